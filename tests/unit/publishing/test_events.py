"""Turning the headers column back into Kafka headers: every malformed shape is a clear
InvalidEventError (which the relay dead-letters), and the relay's own names are refused."""

from __future__ import annotations

import pytest

from relay.errors import InvalidEventError
from relay.publishing.events import decode_headers, encode_headers


def test_encoded_headers_decode_to_the_same_bytes() -> None:
    stored = encode_headers({"trace": "abc", "bin": b"\x00\xff"})
    assert decode_headers(stored) == (("trace", b"abc"), ("bin", b"\x00\xff"))
    assert decode_headers([]) == ()
    assert decode_headers([["a", "YWJj"], ["b", ""], ["a", "/w=="]]) == (
        ("a", b"abc"),
        ("b", b""),
        ("a", b"\xff"),
    )


@pytest.mark.parametrize(
    ("stored", "reason"),
    [
        ({"trace": "abc"}, "headers must be a JSON array"),
        ("abc", "headers must be a JSON array"),
        (None, "headers must be a JSON array"),
        ([["trace"]], "[name, base64 value or null] pair"),
        ([["trace", 1]], "[name, base64 value or null] pair"),
        ([["", "YQ=="]], "[name, base64 value or null] pair"),
        ([["trace", "!!"]], "not base64"),
        ([["trace", "YQ"]], "not base64"),  # padding missing
        ([["trace", "YQ==\n"]], "not base64"),
        ([["trace", "Y Q=="]], "not base64"),
        ([["trace", "YQ==YQ=="]], "not base64"),  # data after the padding
        ([["trace", "w6k=é"]], "not base64"),
        ([[], ["trace", "YQ=="]], "[name, base64 value or null] pair"),
        ([["outbox-id", "MQ=="]], "set by the relay itself"),
        ([["outbox-anything", "MQ=="]], "set by the relay itself"),
        ([["event-type", "MQ=="]], "set by the relay itself"),
    ],
)
def test_malformed_headers_are_refused_with_the_reason(stored: object, reason: str) -> None:
    with pytest.raises(InvalidEventError, match=reason.replace("[", r"\[").replace("]", r"\]")):
        decode_headers(stored)


def test_the_write_api_refuses_every_outbox_header_name() -> None:
    with pytest.raises(InvalidEventError, match="set by the relay itself"):
        encode_headers({"outbox-trace": "x"})
