"""The metrics docs/operations.md and docs/replication.md list are the ones the commands
export, and the alert examples (docs/operations.md, docs/deployment.md) name only metrics
that exist."""

from __future__ import annotations

import re
from pathlib import Path

from relay.runtime.metrics import MirrorMetrics, OutboxMetrics, ProcessMetrics, ReplicaMetrics

DOCS = Path(__file__).resolve().parents[3] / "docs"
_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}


def _exported() -> dict[str, set[str]]:
    """Per metric the commands export, as the docs name it (a counter with ``_total``), the
    names its samples carry."""
    found: dict[str, set[str]] = {}
    metrics: list[ProcessMetrics] = [OutboxMetrics(), MirrorMetrics(), ReplicaMetrics()]
    for each in metrics:
        for family in each.registry.collect():
            samples = {family.name + suffix for suffix in _SUFFIXES[family.type]}
            found[min(samples) if family.type == "counter" else family.name] = samples
    return found


def test_every_exported_metric_is_documented_and_every_documented_one_exported() -> None:
    text = (DOCS / "operations.md").read_text() + (DOCS / "replication.md").read_text()
    documented = set(re.findall(r"^\| `(relay_[a-z_]+)(?:\{[a-z,]+\})?` \|", text, re.MULTILINE))
    exported = {
        name + ("_total" if "_total" in samples else "") for name, samples in _exported().items()
    }
    assert documented == exported


def test_the_alert_examples_name_only_exported_metrics() -> None:
    samples = set().union(*_exported().values())
    rules = (
        (DOCS / "deployment.md").read_text().split("# outbox-relay.rules.yml")[1].split("```")[0]
    )
    alerts = (DOCS / "operations.md").read_text().split("Suggested alerts")[1].split("\n\n")[1]
    named = set(re.findall(r"\b(relay_[a-z_]+)", rules + alerts))
    assert named and named <= samples, sorted(named - samples)
