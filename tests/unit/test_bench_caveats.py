"""The bench says which of its headline keys are not meaningful: a ratio of near-zero times,
RSS growth at quick sizes, figures taken on a busy machine."""

from __future__ import annotations

from bench.caveats import not_meaningful


def _replicate(ours_s: float, peer_s: float, ours_from_start: float) -> dict[str, object]:
    return {
        "replicate_vs_mirrormaker2": 2.0,
        "replicate_vs_mirrormaker2_from_start": 401.6,
        "raw": {
            "replicate": {
                "ours": {"seconds": ours_s, "seconds_from_start": ours_from_start},
                "mirrormaker2": {"seconds": peer_s, "seconds_from_start": peer_s + 1},
            }
        },
    }


def test_a_full_size_quiet_run_has_no_caveat() -> None:
    payload = {
        "drain_rows": 1_000_000,
        "rss_growth": 1.1,
        **_replicate(40.0, 250.0, 41.0),
        "load_average_1min": {"drain": {"before": 1.5, "after": 2.0}},
    }
    assert not_meaningful(payload, cores=2) == {}


def test_rss_growth_at_quick_size_is_not_meaningful() -> None:
    found = not_meaningful({"drain_rows": 100_000, "rss_growth": 1.4}, cores=2)
    assert list(found) == ["rss_growth"]
    assert "100,000 vs 10,000 rows" in found["rss_growth"]


def test_a_ratio_of_near_zero_times_is_not_meaningful() -> None:
    found = not_meaningful(_replicate(12.0, 30.0, 0.02), cores=2)
    assert list(found) == ["replicate_vs_mirrormaker2_from_start"]
    assert "ours 0.02 s" in found["replicate_vs_mirrormaker2_from_start"]
    both = not_meaningful(_replicate(1.5, 3.0, 2.0), cores=2)
    assert sorted(both) == ["replicate_vs_mirrormaker2", "replicate_vs_mirrormaker2_from_start"]


def test_figures_taken_on_a_busy_machine_are_flagged_by_comparison() -> None:
    load = {"drain": {"before": 9.2, "after": 8.0}, "mirror": {"before": 1.0, "after": 1.0}}
    found = not_meaningful({"load_average_1min": load}, cores=2)
    assert list(found) == ["drain (every figure)"]
    assert "9.2 on 2 cores" in found["drain (every figure)"]
