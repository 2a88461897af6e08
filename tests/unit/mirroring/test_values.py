"""Fast paths of the mirror's decoding read exactly what the plain ones read: a JSON key
or value (``json_object`` against ``json.loads``), a column's value (``decode`` against
``from_json``), a version header (against the integer pattern)."""

from __future__ import annotations

import json
import re

import pytest

from relay.errors import DecodeError
from relay.mirroring.decode import decode, from_json
from relay.mirroring.mapping import parse_mapping
from relay.mirroring.types import ColumnKind, KafkaRecord, ResolvedTable, Upsert
from relay.mirroring.values import json_object

SAMPLES = [
    b'{"n": 1, "pad": "xxx", "ts": 1764184000.123456}',
    b'{"a": {"b": [1, 2.5, -0.0, 1e400, null, true]}}',
    b'{"big": 123456789012345678901234567890, "e": 1E-7}',
    b'{"nan": NaN, "inf": -Infinity}',
    b'{"dup": 1, "dup": 2}',
    b'{"lone": "\\ud800", "pair": "\\ud83d\\ude00", "esc": "\\u0000"}',
    '{"utf8": "caf\u00e9 \u4e2d \U0001f600"}'.encode(),
    b'{"raw surrogate": "\xed\xa0\x80"}',
    b'{"invalid": "\xff"}',
    b"{}",
    b"{ }  \n\t\r",
    b'{"a": 1} trailing',
    b'{"a": 1} \x0c',
    b'{"a": 1}{"b": 2}',
    b'{"a": 1',
    b"{\x00}",
    b"{",
    b"[1, 2]",
    b'"text"',
    b"",
    b" {}",
    '\ufeff{"bom": 1}'.encode(),
    '{"utf16": 1}'.encode("utf-16"),
    '{"utf16le": 1}'.encode("utf-16-le"),
    '{"utf32": 1}'.encode("utf-32-be"),
]


def _reference(raw: bytes) -> str:
    """What the mirror read before the fast path: json.loads, then the object check."""
    try:
        parsed = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        text = str(exc)
        return "value is not JSON: " + (text if len(text) <= 80 else text[:77] + "...")
    if not isinstance(parsed, dict):
        return f"value is JSON {type(parsed).__name__}, not an object"
    return repr(parsed)  # NaN is not equal to itself, -0.0 equals 0.0: compare the text


def _fast(raw: bytes) -> str:
    try:
        return repr(json_object(raw, "value"))
    except DecodeError as exc:
        return str(exc)


@pytest.mark.parametrize("raw", SAMPLES)
def test_json_object_reads_what_json_loads_reads(raw: bytes) -> None:
    assert _fast(raw) == _reference(raw)


VALUES: list[object] = [
    None, True, False, 0, 1, -7, 2**70, 1.0, 2.5, -0.0, float("inf"), "", "x", "42",
    "2026-03-01T12:00:00", "2026-03-01T12:00:00+02:00", "2026-03-01", "not a date",
    "0193a0c4-7c1e-7000-8000-000000000000", "aGVsbG8=", "1.25", [1, "a"], [[1]], {"a": 1},
]  # fmt: skip


def _column_table(kind: ColumnKind) -> ResolvedTable:
    mapping = {
        "table": "t",
        "topics": ["topic"],
        "key": {"column": "id"},
        "version": {"column": "seq", "source": "offset"},
        "columns": {"c": "c"},
    }
    kinds = {"id": ColumnKind.INTEGER, "seq": ColumnKind.INTEGER, "c": kind}
    return ResolvedTable(parse_mapping({"tables": [mapping]}).tables[0], kinds)


@pytest.mark.parametrize("kind", list(ColumnKind))
def test_decode_converts_each_column_as_from_json_does(kind: ColumnKind) -> None:
    table = _column_table(kind)
    for value in VALUES:
        record = KafkaRecord("topic", 0, 9, b"5", json.dumps({"c": value}).encode())
        decoded = decode(record, [table])
        try:
            expected: object = from_json(kind, json.loads(json.dumps(value)), "field 'c'")
        except DecodeError as exc:
            assert decoded.error == f"t: {exc}", (kind, value)
            continue
        assert decoded.ops == (Upsert("t", {"id": 5, "c": expected, "seq": 9}),), (kind, value)
        assert type(decoded.ops[0].row["c"]) is type(expected), (kind, value)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "header", [b"42", b"0", b"007", b" 42 ", b"-3", b"+3", b"4_2", b"\xd9\xa3", b"", b"x", b"1.0"]
)
def test_a_version_header_reads_as_the_integer_pattern_reads_it(header: bytes) -> None:
    mapping = {
        "table": "t",
        "topics": ["topic"],
        "key": {"column": "id"},
        "version": {"column": "seq", "source": "header:v"},
        "columns": {},
    }
    kinds = {"id": ColumnKind.INTEGER, "seq": ColumnKind.INTEGER}
    table = ResolvedTable(parse_mapping({"tables": [mapping]}).tables[0], kinds)
    decoded = decode(KafkaRecord("topic", 0, 9, b"5", b"{}", (("v", header),)), [table])
    text = header.decode("ascii", "replace").strip()
    if re.fullmatch("-?[0-9]+", text):
        assert decoded.ops == (Upsert("t", {"id": 5, "seq": int(text)}),)
    else:
        assert decoded.error == f"t: version header 'v' is not an integer: {text!r}"
