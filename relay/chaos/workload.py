"""The chaos workload: concurrent service writers through the public write API.

Each transaction changes 1-4 accounts (``UPDATE ... SET version = version + 1``, so the
row lock serialises the writers of one key and per-key version order is commit order),
appends one ledger row per change and publishes one event per change with
:func:`relay.publish`, all in the same transaction. Some transactions are rolled back on
purpose, some are held open for seconds. Writers survive PostgreSQL restarts by retrying;
they never track commits themselves: whatever the ledger holds at the end is the truth
(a COMMIT whose answer was lost with the connection may or may not be in it).
"""

from __future__ import annotations

import logging
import random
import threading
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

import relay
from relay.chaos.names import ACCOUNTS, EVENT_TYPE, HISTORY, LEDGER, MIRROR
from relay.runtime.clock import Clock

log = logging.getLogger(__name__)


_SCHEMA = (
    f"""CREATE TABLE IF NOT EXISTS {ACCOUNTS} (
        key text PRIMARY KEY, version bigint NOT NULL, balance bigint NOT NULL)""",
    f"""CREATE TABLE IF NOT EXISTS {LEDGER} (
        event_id uuid PRIMARY KEY, key text NOT NULL, version bigint NOT NULL,
        balance bigint NOT NULL, committed_at timestamptz NOT NULL DEFAULT now(),
        UNIQUE (key, version))""",
    f"""CREATE TABLE IF NOT EXISTS {MIRROR} (
        key text PRIMARY KEY, version bigint NOT NULL, balance bigint NOT NULL)""",
    f"""CREATE TABLE IF NOT EXISTS {HISTORY} (
        key text NOT NULL, seq bigint NOT NULL, version bigint NOT NULL,
        balance bigint NOT NULL, valid_from timestamptz NOT NULL, valid_to timestamptz,
        is_current boolean NOT NULL, UNIQUE (key, seq))""",
)
_SEED_ACCOUNT = text(
    f"INSERT INTO {ACCOUNTS} (key, version, balance) VALUES (:key, 0, 0) ON CONFLICT DO NOTHING"
)
_UPDATE = text(
    f"UPDATE {ACCOUNTS} SET version = version + 1, balance = balance + :delta "
    "WHERE key = :key RETURNING version, balance"
)
_LEDGER_INSERT = text(
    f"INSERT INTO {LEDGER} (event_id, key, version, balance) "
    "VALUES (:event_id, :key, :version, :balance)"
)


def account_key(n: int) -> str:
    return f"acct-{n:04d}"


def create_schema(engine: Engine, keys: int) -> None:
    """The workload's own tables (accounts, ledger, mirror targets) and its accounts."""
    with engine.begin() as conn:
        for statement in _SCHEMA:
            conn.execute(text(statement))
        conn.execute(_SEED_ACCOUNT, [{"key": account_key(n)} for n in range(keys)])


@dataclass(frozen=True, slots=True)
class WorkloadConfig:
    writers: int = 6
    keys: int = 50
    max_keys_per_transaction: int = 4
    rollback_ratio: float = 0.10
    long_ratio: float = 0.05
    long_seconds: tuple[float, float] = (1.0, 3.0)
    think_seconds: tuple[float, float] = (0.0, 0.06)
    retry_seconds: tuple[float, float] = (0.2, 1.0)


@dataclass
class WorkloadStats:
    """What the writers did, as they saw it (the ledger, not this, is the truth)."""

    attempted: int = 0
    acknowledged: int = 0
    rolled_back: int = 0
    long_held: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count(self, name: str) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + 1)

    def error(self, name: str) -> None:
        with self._lock:
            self.errors[name] += 1

    def describe(self) -> str:
        errors = ", ".join(f"{k} {v}" for k, v in sorted(self.errors.items())) or "none"
        return (
            f"{self.attempted} transactions attempted, {self.acknowledged} commits "
            f"acknowledged, {self.rolled_back} rolled back on purpose, {self.long_held} held "
            f"open 1-3 s; errors: {errors}"
        )


class Workload:
    """``config.writers`` writer threads, each with its own seeded random generator."""

    def __init__(
        self,
        engine: Engine,
        topic: str,
        config: WorkloadConfig,
        seed: int,
        clock: Clock,
    ) -> None:
        self._engine = engine
        self._topic = topic
        self._config = config
        self._seed = seed
        self._clock = clock
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.stats = WorkloadStats()

    def start(self) -> None:
        for n in range(self._config.writers):
            rng = random.Random(f"{self._seed}/writer/{n}")
            thread = threading.Thread(
                target=self._writer, args=(rng,), name=f"chaos-writer-{n}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop writing; a transaction in flight finishes (or fails) first."""
        self._stop.set()
        deadline = self._clock.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - self._clock.monotonic()))

    def _writer(self, rng: random.Random) -> None:
        try:
            self._write_until_stopped(rng)
        except Exception as exc:  # shows in the report instead of a silently smaller load
            log.exception("writer %s crashed", threading.current_thread().name)
            self.stats.error(f"writer crashed: {type(exc).__name__}")

    def _write_until_stopped(self, rng: random.Random) -> None:
        config = self._config
        failures = 0
        while not self._stop.is_set():
            try:
                self._transaction(rng)
                failures = 0
            except SQLAlchemyError as exc:  # e.g. PostgreSQL restarting: a new transaction
                failures += 1
                self.stats.error(_error_name(exc))
                low, high = config.retry_seconds
                delay = min(high, low * failures) * (0.5 + rng.random())
                if self._clock.wait(delay, self._stop):
                    return
                continue
            if self._clock.wait(rng.uniform(*config.think_seconds), self._stop):
                return

    def _transaction(self, rng: random.Random) -> None:
        config = self._config
        count = rng.randint(1, config.max_keys_per_transaction)
        keys = sorted(account_key(n) for n in rng.sample(range(config.keys), count))
        rollback = rng.random() < config.rollback_ratio
        hold = rng.uniform(*config.long_seconds) if rng.random() < config.long_ratio else 0.0
        deltas = [rng.randint(-100, 100) for _ in keys]
        event_ids = [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in keys]
        self.stats.count("attempted")
        with self._engine.connect() as conn:
            transaction = conn.begin()
            try:
                self._write(conn, keys, deltas, event_ids)
                if hold:
                    self.stats.count("long_held")
                    self._clock.wait(hold)  # locks held; other writers of these keys wait
                if rollback:
                    transaction.rollback()
                    self.stats.count("rolled_back")
                    return
                transaction.commit()
            except BaseException:
                if transaction.is_active:
                    _quiet_rollback(conn)
                raise
        self.stats.count("acknowledged")

    def _write(
        self, conn: Connection, keys: Sequence[str], deltas: Sequence[int], ids: Sequence[str]
    ) -> None:
        events: list[relay.Event] = []
        for key, delta, event_id in zip(keys, deltas, ids, strict=True):
            version, balance = conn.execute(_UPDATE, {"key": key, "delta": delta}).one()
            row = {"event_id": event_id, "key": key, "version": version, "balance": balance}
            conn.execute(_LEDGER_INSERT, row)
            events.append(relay.Event(self._topic, key, row, event_type=EVENT_TYPE))
        relay.publish_many(conn, events)


def _quiet_rollback(conn: Connection) -> None:
    try:
        conn.rollback()
    except SQLAlchemyError as exc:  # the connection is gone: nothing to roll back
        log.debug("rollback after a failure failed too: %s", exc)


def _error_name(exc: SQLAlchemyError) -> str:
    orig = exc.orig if isinstance(exc, DBAPIError) else None
    return type(orig).__name__ if orig is not None else type(exc).__name__
