"""Which headline keys of a run do not measure what their name says, and why.

A ratio is only as good as the times behind it: at quick sizes some figures measure start-up,
the interpreter's fixed footprint or a busy machine rather than the thing compared. The run's
``latest.json`` lists such keys under ``not_meaningful`` (key -> reason) and the table's
footer prints them, so nobody quotes them.
"""

from __future__ import annotations

from collections.abc import Mapping

RSS_MIN_ROWS = 1_000_000
"""Below this backlog the peak RSS is mostly the fixed footprint (interpreter, librdkafka,
SQLAlchemy), so the growth from a tenth of it to all of it says little about the rows."""

TIMED_MIN_S = 5.0
"""A ratio of runs shorter than this measures start-up and scheduling, not throughput."""

BUSY_LOAD_PER_CORE = 2.0
"""A 1-minute load average above this many per core before a comparison: its figures are
noisy (the machine was shared)."""


def not_meaningful(payload: Mapping[str, object], cores: int) -> dict[str, str]:
    """The headline keys of ``payload`` (a run's latest.json, raw figures included) that
    are not meaningful, each with its reason."""
    found: dict[str, str] = {}
    rows = payload.get("drain_rows")
    if "rss_growth" in payload and isinstance(rows, int) and rows < RSS_MIN_ROWS:
        found["rss_growth"] = (
            f"measured at {rows:,} vs {rows // 10:,} rows: below {RSS_MIN_ROWS:,} rows the "
            "fixed footprint (interpreter, librdkafka, SQLAlchemy) dominates the peak RSS"
        )
    found.update(_short_replication(payload))
    found.update(_busy(payload, cores))
    return found


def _short_replication(payload: Mapping[str, object]) -> dict[str, str]:
    raw = payload.get("raw")
    runs = raw.get("replicate") if isinstance(raw, Mapping) else None
    if not isinstance(runs, Mapping):
        return {}
    found: dict[str, str] = {}
    for key, timed in (
        ("replicate_vs_mirrormaker2", "seconds"),
        ("replicate_vs_mirrormaker2_from_start", "seconds_from_start"),
    ):
        if key not in payload:
            continue
        times = {
            who: run.get(timed)
            for who, run in (
                ("ours", runs.get("ours")),
                ("MirrorMaker 2", runs.get("mirrormaker2")),
            )
            if isinstance(run, Mapping)
        }
        short = {who: t for who, t in times.items() if isinstance(t, int | float)}
        if any(t < TIMED_MIN_S for t in short.values()):
            spelled = ", ".join(f"{who} {t:.2f} s" for who, t in short.items())
            found[key] = (
                f"timed over {spelled}: below {TIMED_MIN_S:.0f} s a ratio measures start-up "
                "and scheduling, not throughput"
            )
    return found


def _busy(payload: Mapping[str, object], cores: int) -> dict[str, str]:
    load = payload.get("load_average_1min")
    if not isinstance(load, Mapping):
        return {}
    busy = {
        name: float(figures["before"])
        for name, figures in load.items()
        if isinstance(figures, Mapping)
        and isinstance(figures.get("before"), int | float)
        and float(figures["before"]) > BUSY_LOAD_PER_CORE * cores
    }
    return {
        f"{name} (every figure)": (
            f"1-minute load average {before:.1f} on {cores} cores before it: the machine was "
            "busy, so its figures are noisy"
        )
        for name, before in busy.items()
    }
