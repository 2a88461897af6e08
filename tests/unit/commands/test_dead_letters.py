"""`relay dead-letters`' pure parts: values shown safely, what a replay would do with a dead
letter (refuse it, or the mirror's row operations), options, and the listing's rendering."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from relay.cli.dead_letters import render_json, render_text
from relay.commands.dead_letters import (
    DeadLetterRow,
    MirrorDeadLetter,
    MirrorOptions,
    OutboxDeadLetter,
    describe,
    load_mirror_options,
    mirror_operations,
    outbox_refusal,
    replay_mapping,
    shown_bytes,
)
from relay.errors import ConfigurationError
from relay.mirroring.mapping import parse_mapping
from relay.mirroring.types import ColumnKind, ResolvedTable, Upsert
from relay.postgres.dead_letters import record_headers

AT = datetime(2026, 11, 23, 16, 19, 5, 543000, tzinfo=UTC)
ITEMS = ResolvedTable(
    parse_mapping(
        {
            "tables": [
                {
                    "table": "items",
                    "topics": ["items"],
                    "key": {"column": "id"},
                    "version": {"column": "version", "source": "offset"},
                    "columns": {"name": "name"},
                    "event_types": ["ItemChanged"],
                }
            ]
        }
    ).tables[0],
    {"id": ColumnKind.INTEGER, "name": ColumnKind.TEXT, "version": ColumnKind.INTEGER},
)


def _outbox(headers: object, value: bytes | None = b'{"n":1}') -> OutboxDeadLetter:
    return OutboxDeadLetter(
        7, 42, 3, 950, "orders", b"order-1", value, "OrderPlaced", headers, AT, "too large", AT
    )


def _mirror(
    value: bytes | None, headers: tuple[tuple[str, bytes | None], ...] = (), topic: str = "items"
) -> MirrorDeadLetter:
    return MirrorDeadLetter(5, "relay-mirror", topic, 0, 17, b"1", value, headers, "boom", AT)


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (None, "(null)"),
        (b"", ""),
        (b'{"name": "caf\xc3\xa9"}', '{"name": "café"}'),
        (b"line\nbreak\x00", "'line\\nbreak\\x00'"),  # control characters: escaped, one line
        (b"\xff\xfe{", "hex fffe7b"),  # not UTF-8
    ],
)
def test_values_are_shown_safely_on_one_line(value: bytes | None, shown: str) -> None:
    assert shown_bytes(value) == shown


def test_long_values_are_cut_unless_full() -> None:
    assert shown_bytes(b"x" * 300) == "x" * 200 + "... (300 bytes; --full shows all)"
    assert shown_bytes(b"x" * 300, full=True) == "x" * 300
    assert shown_bytes(b"\xff" * 150, limit=10) == "hex ffffffffff... (150 bytes; --full shows all)"
    assert shown_bytes(b"\xff" * 5, limit=10) == "hex ffffffffff"


def test_an_outbox_dead_letter_is_described_with_its_headers_decoded() -> None:
    fields = dict(describe(_outbox([["trace", "YWJj"], ["raw", "/w=="]])))
    assert fields["header 'trace'"] == "abc"
    assert fields["header 'raw'"] == "hex ff"
    assert (fields["key"], fields["seq"], fields["error"]) == ("order-1", "950", "too large")
    assert fields["dead-lettered at"] == "2026-11-23T16:19:05.543+00:00"


def test_unreadable_outbox_headers_are_shown_as_stored_with_the_reason() -> None:
    fields = dict(describe(_outbox([["trace", "!!"]])))
    assert fields["headers"].startswith("[['trace', '!!']] (unreadable: ")
    assert "base64" in fields["headers"]


def test_a_mirror_dead_letter_is_described_with_its_record() -> None:
    letter = _mirror(b"\xff", (("trace", b"\x00"), ("empty", None)))
    fields = describe(letter)
    assert ("value", "hex ff") in fields
    assert ("header 'trace'", "'\\x00'") in fields and ("header 'empty'", "(null)") in fields
    assert ("offset", "17") in fields and ("consumer group", "relay-mirror") in fields


@pytest.mark.parametrize(
    ("headers", "refused"),
    [
        ([], None),
        ([["trace", "YWJj"]], None),
        ({"trace": "YWJj"}, "JSON array"),
        ([["trace", "!!"]], "not base64"),
        ([["outbox-id", "MQ=="]], "set by the relay itself"),
    ],
)
def test_an_outbox_dead_letter_is_refused_only_when_its_headers_cannot_be_sent(
    headers: object, refused: str | None
) -> None:
    reason = outbox_refusal(_outbox(headers))
    assert reason is None if refused is None else refused in str(reason)


def test_a_mirror_dead_letter_becomes_the_mirrors_own_version_guarded_upsert() -> None:
    letter = _mirror(b'{"name": "a"}', (("event-type", b"ItemChanged"),))
    assert mirror_operations([ITEMS], letter) == (
        Upsert("items", {"id": 1, "name": "a", "version": 17}),
    )


@pytest.mark.parametrize(
    ("letter", "reason"),
    [
        (_mirror(b'{"name": "a"}', (("event-type", b"ItemChanged"),), "other"), "not in the"),
        (_mirror(b"{not json", (("event-type", b"ItemChanged"),)), "value is not JSON"),
        (_mirror(b'{"name": "a"}', (("event-type", b"Other"),)), "no mapped table takes"),
    ],
)
def test_a_mirror_dead_letter_that_cannot_apply_says_why(
    letter: MirrorDeadLetter, reason: str
) -> None:
    found = mirror_operations([ITEMS], letter)
    assert isinstance(found, str) and reason in found


def test_stored_mirror_headers_become_the_records_headers_again() -> None:
    stored = [
        {"name": "a", "value": "text"},
        {"name": "b", "base64": "AAE="},
        {"name": "c", "value": None},
    ]
    assert record_headers(stored) == (("a", b"text"), ("b", b"\x00\x01"), ("c", None))
    assert record_headers(None) == ()


def test_the_mirrors_options_come_from_the_flags_else_the_environment() -> None:
    environ = {"RELAY_MIRROR_CONFIG": "env.toml", "RELAY_MIRROR_GROUP": "env-group"}
    assert load_mirror_options(
        {"mirror_config": None, "mirror_group": None}, environ
    ) == MirrorOptions("env.toml", "env-group")
    assert load_mirror_options(
        {"mirror_config": "flag.toml", "mirror_group": "g"}, environ
    ) == MirrorOptions("flag.toml", "g")
    assert load_mirror_options({}, {}) == MirrorOptions()
    with pytest.raises(ConfigurationError, match="RELAY_MIRROR_GROUP must not be empty"):
        load_mirror_options({}, {"RELAY_MIRROR_GROUP": " "})


def test_only_the_mirrors_replay_needs_a_mapping() -> None:
    assert replay_mapping("outbox", None) is None
    assert replay_mapping("mirror", MirrorOptions("m.toml")) == "m.toml"
    with pytest.raises(ConfigurationError, match="RELAY_MIRROR_CONFIG or --mapping"):
        replay_mapping("mirror", MirrorOptions(group="g"))


def test_listings_as_text_and_json() -> None:
    outbox = [DeadLetterRow(7, "orders", 3, 950, "Kafka refuses\nit " + "x" * 200, AT, None, 42)]
    text = render_text("outbox", outbox).splitlines()
    assert text[0].split()[-3:] == ["dead-lettered", "at", "error"]
    assert text[1].split()[:6] == ["7", "3", "950", "42", "orders", "2026-11-23T16:19:05.543+00:00"]
    assert "Kafka refuses it x" in text[1] and text[1].endswith("...")
    assert json.loads(render_json("outbox", outbox)) == {
        "source": "outbox",
        "dead_letters": [
            {
                "id": 7,
                "topic": "orders",
                "partition": 3,
                "seq": 950,
                "outbox_id": 42,
                "error": outbox[0].error,
                "dead_lettered_at": "2026-11-23T16:19:05.543+00:00",
            }
        ],
    }
    mirror = [DeadLetterRow(5, "items", 0, 17, "boom", AT, "relay-mirror")]
    assert render_text("mirror", mirror).splitlines()[1].split()[:4] == [
        "5",
        "relay-mirror",
        "items[0]",
        "17",
    ]
    (letter,) = json.loads(render_json("mirror", mirror))["dead_letters"]
    assert (letter["offset"], letter["group"]) == (17, "relay-mirror")
