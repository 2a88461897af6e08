"""The TOML mapping: what it accepts, and one clear line for what it does not."""

from __future__ import annotations

from pathlib import Path

import pytest

from relay.errors import ConfigurationError
from relay.mirroring.mapping import load_mapping, parse_mapping

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "mirror.toml"


def one(table: dict[str, object]) -> dict[str, object]:
    base: dict[str, object] = {
        "table": "analytics.orders",
        "topics": ["orders"],
        "key": {"column": "id"},
        "version": {"column": "seq"},
    }
    return {"tables": [base | table]}


def test_parses_all_three_key_forms_and_version_sources() -> None:
    mapping = parse_mapping(
        {
            "tables": [
                {
                    "table": "analytics.orders",
                    "topics": ["orders", "orders.v2"],
                    "key": {"pattern": "order-(?P<id>[0-9]+)"},
                    "version": {"column": "seq"},
                    "columns": {"customer": "customer", "city": "address.city"},
                    "event_types": ["OrderPlaced"],
                },
                {
                    "table": "customers",
                    "topics": ["customers"],
                    "key": {"fields": {"region": "region", "name": "name"}},
                    "version": {"column": "v", "source": "field:rev"},
                },
                {
                    "table": "clicks",
                    "topics": ["clicks"],
                    "key": {"column": "id"},
                    "version": {"column": "o", "source": "offset"},
                },
            ]
        }
    )
    orders, customers, clicks = mapping.tables
    assert (orders.schema, orders.name) == ("analytics", "orders")
    assert orders.key.columns == ("id",)
    assert orders.version.describe() == "header:outbox-seq"
    assert orders.all_columns == ("id", "customer", "city", "seq")
    assert orders.event_types == frozenset({"OrderPlaced"})
    assert customers.key.columns == ("region", "name")
    assert customers.version.describe() == "field:rev"
    assert (clicks.schema, clicks.version.kind) == (None, "offset")
    assert mapping.topics == ("clicks", "customers", "orders", "orders.v2")
    assert mapping.tables_for("orders") == (orders,)
    only = mapping.restricted_to(("orders.v2",))
    assert [(t.table, t.topics) for t in only.tables] == [("analytics.orders", ("orders.v2",))]


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({}, "no tables"),
        ({"tables": [], "x": 1}, "unknown setting 'x'"),
        (one({"table": "a.b.c"}), 'table must be "name" or "schema.name"'),
        (one({"colums": {}}), "unknown setting 'colums'"),
        (one({"topics": []}), "topics: expected a non-empty list of strings"),
        (one({"topics": ["bad topic"]}), "'bad topic' is not a Kafka topic name"),
        (one({"key": {"column": "id", "pattern": "x"}}), "give exactly one of column, pattern"),
        (one({"key": {"pattern": "("}}), "is invalid"),
        (one({"key": {"pattern": "order-[0-9]+"}}), "has no named group"),
        (one({"key": {"fields": {}}}), "fields must map at least one column"),
        (one({"version": None}), "a version column is required"),
        (one({"version": {"column": "seq", "source": "clock"}}), "source must be header:NAME"),
        (
            one({"topics": ["a", "b"], "version": {"column": "seq", "source": "offset"}}),
            "version source 'offset' needs a single topic",
        ),
        (one({"columns": {"id": "id"}}), "column id is mapped twice (as key and value column)"),
        (one({"columns": {"seq": "s"}}), "column seq is mapped twice (as value and version"),
        (one({"columns": {"c": ""}}), "c must name a JSON field"),
        (one({"event_types": "OrderPlaced"}), "event_types: expected a non-empty list"),
        (one({"history": "scd3"}), "history must be one of current, scd2, changelog, got 'scd3'"),
        (
            one({"history": "changelog", "history_columns": {"valid_to": "x"}}),
            "'valid_to' is not a column of history mode changelog (its columns: op)",
        ),
        (one({"metadata": {"m": "timestamp"}}), "metadata: m = 'timestamp' is not one of"),
        (
            one({"history": "scd2", "version": {"column": "seq", "source": "field:v"}}),
            "history scd2 needs a version every record carries",
        ),
        (
            one({"history": "scd2", "metadata": {"valid_to": "offset"}}),
            "column valid_to is mapped twice (as valid_to and metadata column)",
        ),
    ],
)
def test_mistakes_are_one_clear_line(document: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        parse_mapping(document, "m.toml")
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_table_mapped_twice_is_an_error() -> None:
    table = one({})["tables"][0]  # type: ignore[index]
    with pytest.raises(ConfigurationError, match="mapped twice"):
        parse_mapping({"tables": [table, table]})


def test_unknown_topic_restriction_is_an_error() -> None:
    with pytest.raises(ConfigurationError, match="topic nope is not in the mapping"):
        parse_mapping(one({})).restricted_to(("nope",))


def test_files(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[[tables]\n")
    with pytest.raises(ConfigurationError, match="is not valid TOML"):
        load_mapping(bad)
    with pytest.raises(ConfigurationError, match="cannot read mirror mapping"):
        load_mapping(tmp_path / "missing.toml")


def test_the_shipped_example_is_valid() -> None:
    mapping = load_mapping(EXAMPLE)
    assert [t.table for t in mapping.tables] == ["orders_mirror"]


def test_history_and_metadata_columns() -> None:
    document = one(
        {
            "history": "scd2",
            "history_columns": {"valid_from": "since", "is_current": "now"},
            "metadata": {"ts": "kafka_timestamp", "at": "applied_at"},
        }
    )
    (table,) = parse_mapping(document).tables
    assert table.history.mode == "scd2"
    assert table.all_columns == ("id", "seq", "since", "valid_to", "now", "ts", "at")
    assert parse_mapping(one({})).tables[0].history.mode == "current"
