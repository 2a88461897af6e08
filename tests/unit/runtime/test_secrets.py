import logging

from relay.runtime.logs import RedactingFilter
from relay.runtime.secrets import Secret, mask_text, mask_url
from tests.partitioning import partition_of


def test_mask_url_and_text() -> None:
    assert mask_url("postgresql+psycopg://u:pw@h:5/db") == "postgresql+psycopg://u:***@h:5/db"
    assert (
        mask_text("dsn postgresql://u:p%40ss@h/db failed") == "dsn postgresql://u:***@h/db failed"
    )
    assert mask_text("token abc", secrets=("abc",)) == "token ***"


def test_secret_hides_itself_but_survives_pickling() -> None:
    import pickle

    secret = Secret("pw")
    assert "pw" not in f"{secret} {secret!r}"
    assert pickle.loads(pickle.dumps(secret)).reveal() == "pw"


def test_log_filter_masks_urls_in_any_record() -> None:
    record = logging.LogRecord(
        "x", logging.INFO, "f", 1, "connect %s", ("postgresql://a:b@h/d",), None
    )
    RedactingFilter().filter(record)
    assert record.getMessage() == "connect postgresql://a:***@h/d"


def test_partition_of_is_stable_and_spreads_keys() -> None:
    assert partition_of(b"order-42", 8) == partition_of(b"order-42", 8)
    assert len({partition_of(f"k{i}".encode(), 8) for i in range(100)}) == 8


def test_repeated_librdkafka_lines_are_held_back() -> None:
    from relay.runtime.logs import RepeatFilter

    def record(name: str, message: str, at: float) -> logging.LogRecord:
        made = logging.LogRecord(name, logging.ERROR, "f", 1, message, None, None)
        made.created = at
        return made

    repeats = RepeatFilter(interval=10)
    shown = [
        repeats.filter(record("relay.librdkafka", f"connect to 127.0.0.1:{9000 + n} refused", n))
        for n in range(12)
    ]
    assert shown == [True] + [False] * 9 + [True, False]
    assert repeats.filter(record("relay.core", "same line", 1))
    assert repeats.filter(record("relay.core", "same line", 1))
    late = record("relay.librdkafka", "connect to 127.0.0.1:1 refused", 30)
    assert repeats.filter(late)
    assert late.getMessage().endswith("(and 1 alike)")
