"""Every comparison against its peer, in one run: ``python -m bench [--quick]``.

Starts a durable PostgreSQL cluster of its own (fsync on, wal_level=logical) next to the
development servers of ``relay dev up`` (or RELAY_DATABASE_URL / RELAY_ADMIN_DATABASE_URL
and RELAY_KAFKA_BOOTSTRAP_SERVERS), runs the comparisons one after another (the write
path, Avro against JSON on the write path, the drain, the mirror, the latency, Debezium's
drain, and `relay replicate` against MirrorMaker 2's Kafka->Kafka replication on two
private brokers, which needs no PostgreSQL), prints a table (measurement, ours, peer,
ours/peer) and writes bench/results/latest.json. ``--quick`` runs a smaller version of
everything (CI's smoke test); ``--only`` picks comparisons.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext

from . import debezium, drain, formats, latency, mirror, mirrormaker, write_path
from .caveats import not_meaningful
from .cluster import SETTINGS, durable_cluster
from .common import Outcome, Row, endpoints, log, write_latest

COMPARISONS = (
    "write_path",
    "formats",
    "drain",
    "mirror",
    "latency",
    "debezium",
    "mirrormaker",
)
KAFKA_ONLY = {"mirrormaker"}
"""Comparisons on private brokers of their own, without the durable PostgreSQL cluster."""


def _table(rows: list[Row]) -> str:
    width = max([len(r.measurement) for r in rows] + [11])
    lines = [f"{'measurement':<{width}}  {'ours':>12}  {'peer':>12}  {'ratio':>6}  unit"]
    for r in rows:
        ratio = "" if math.isnan(r.ratio) else f"{r.ratio:.2f}"
        ours = "" if math.isnan(r.ours) else f"{r.ours:,.1f}"  # a peer measured alone
        peer = "" if math.isnan(r.peer) else f"{r.peer:,.1f}"
        lines.append(f"{r.measurement:<{width}}  {ours:>12}  {peer:>12}  {ratio:>6}  {r.unit}")
    return "\n".join(lines)


def _machine() -> dict[str, object]:
    model = ""
    with open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as meminfo:
        memory_kib = int(meminfo.readline().split()[1])
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "memory_gib": round(memory_kib / 2**20, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, short windows")
    parser.add_argument(
        "--only",
        default=",".join(COMPARISONS),
        help=f"comma-separated subset of {','.join(COMPARISONS)}",
    )
    args = parser.parse_args(argv)
    only = [c.strip() for c in args.only.split(",") if c.strip()]
    unknown = sorted(set(only) - set(COMPARISONS))
    if unknown:
        parser.error(f"unknown comparison(s): {', '.join(unknown)}")
    started = time.monotonic()
    started_at = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    dev_admin_url, bootstrap = endpoints()
    outcomes: dict[str, Outcome] = {}
    load: dict[str, dict[str, float]] = {}
    needs_cluster = not set(only) <= KAFKA_ONLY
    with durable_cluster() if needs_cluster else nullcontext("") as durable_admin_url:
        steps: dict[str, Callable[[], Outcome]] = {
            "write_path": lambda: write_path.run(dev_admin_url, durable_admin_url, args.quick),
            "formats": lambda: formats.run(durable_admin_url, args.quick),
            "drain": lambda: drain.run(durable_admin_url, bootstrap, args.quick),
            "mirror": lambda: mirror.run(durable_admin_url, bootstrap, args.quick),
            "latency": lambda: latency.run(durable_admin_url, bootstrap, args.quick),
            "debezium": lambda: debezium.run(durable_admin_url, bootstrap, args.quick, outcomes),
            "mirrormaker": lambda: mirrormaker.run(args.quick),
        }
        for name in COMPARISONS:
            if name in only:
                log(f"--- {name}")
                before = os.getloadavg()[0]
                outcomes[name] = steps[name]()
                # The machine may be shared: a high load average marks noisy figures.
                load[name] = {"before": before, "after": os.getloadavg()[0]}
    rows = [row for o in outcomes.values() for row in o.rows]
    payload: dict[str, object] = {
        "quick": args.quick,
        "started": started_at,
        "seconds": round(time.monotonic() - started, 1),
        "sizes": "quick: smaller backlogs and shorter windows" if args.quick else "full",
        "machine": _machine(),
        "durable_cluster_settings": SETTINGS,
        "load_average_1min": load,
    }
    for outcome in outcomes.values():
        payload.update(outcome.headline)
    payload["table"] = [
        {
            "measurement": r.measurement,
            "ours": None if math.isnan(r.ours) else r.ours,
            "peer": None if math.isnan(r.peer) else r.peer,
            "ratio": None if math.isnan(r.ratio) else round(r.ratio, 3),
            "unit": r.unit,
        }
        for r in rows
    ]
    payload["raw"] = {k: v for o in outcomes.values() for k, v in o.raw.items()}
    caveats = not_meaningful(payload, os.cpu_count() or 1)
    payload["not_meaningful"] = caveats
    path = write_latest(payload)
    print(_table(rows))
    if caveats:
        print("\nnot meaningful in this run (do not quote):")
        for key, reason in caveats.items():
            print(f"  {key}: {reason}")
    print(f"\n{len(rows)} measurements in {payload['seconds']} s; written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
