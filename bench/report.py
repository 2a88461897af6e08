"""Markdown tables of one or more result files, side by side (for docs/performance.md):

    python -m bench.report bench/results/run_A.json bench/results/run_B.json

One row per measurement: ours / peer / ratio of each run, in the order of the first file.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path


def _number(value: object) -> str:
    if value is None:
        return ""
    assert isinstance(value, int | float)
    if math.isnan(value):
        return ""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.1f}"


def _ratio(value: object) -> str:
    return "" if value is None else f"{value:.2f}"


def table(runs: Sequence[dict[str, object]]) -> str:
    """The measurements of ``runs`` as one Markdown table."""
    by_run: list[dict[str, dict[str, object]]] = []
    for run in runs:
        rows = run["table"]
        assert isinstance(rows, list)
        by_run.append({str(r["measurement"]).strip(): r for r in rows})
    header = ["measurement", "unit"]
    for n in range(1, len(runs) + 1):
        header += [f"ours #{n}", f"peer #{n}", f"ratio #{n}"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, first in by_run[0].items():
        cells = [name.replace("|", "\\|"), str(first["unit"])]
        for rows in by_run:
            r = rows.get(name, {})
            cells += [_number(r.get("ours")), _number(r.get("peer")), _ratio(r.get("ratio"))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    runs = [json.loads(Path(p).read_text()) for p in argv]
    print(table(runs))
    keys = [
        k
        for k in runs[0]
        if k not in ("table", "raw", "machine", "durable_cluster_settings", "not_meaningful")
    ]
    print()
    print("| key | " + " | ".join(f"#{n}" for n in range(1, len(runs) + 1)) + " |")
    print("|---|" + "---|" * len(runs))
    for key in keys:
        print(f"| {key} | " + " | ".join(str(r.get(key, "")) for r in runs) + " |")
    for n, run in enumerate(runs, 1):
        for key, reason in dict(run.get("not_meaningful") or {}).items():
            print(f"\nRun #{n}: {key} is not meaningful: {reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
