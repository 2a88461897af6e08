"""How ``PostgresMirrorStore`` writes a batch's rows: in bulk through a staging table that
each connection keeps (emptied at each commit), and, when the bulk statements fail, the
batch rolled back and applied again without them: record by record after a record's
fault, pipelined after a fault of the database's (no right to create a temporary table),
and later batches still applied, their refused records dead-lettered."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import sqlalchemy as sa

from relay.mirroring.decode import decode
from relay.mirroring.mapping import parse_mapping
from relay.mirroring.types import ApplyResult, Batch, KafkaRecord
from relay.postgres.engine import Database, make_engine
from relay.postgres.mirror_catalog import resolve_tables
from relay.postgres.mirror_store import PostgresMirrorStore
from relay.runtime.secrets import Secret
from tests.fakes.mirroring import ITEMS_DDL, ITEMS_MAPPING, REFUSED_NAME, items_table, record
from tests.integration.support import RelayTestEnv, run_relay

STAGING = (
    "SELECT oid FROM pg_class WHERE relnamespace = pg_my_temp_schema() "
    "AND starts_with(relname, 'relay_mirror_stage_')"
)


class _Failed(Exception):
    pass


@contextmanager
def _opened(url: str) -> Iterator[tuple[PostgresMirrorStore, sa.Engine]]:
    """A store on an engine of one pooled connection (every call below shares it),
    disposed of at the end."""
    engine = make_engine(Secret(url), pool_size=1, pre_ping=False)
    try:
        database = Database(engine, Secret(url))
        tables, reflected = resolve_tables(database, parse_mapping(ITEMS_MAPPING))
        yield PostgresMirrorStore(database, "paths", tables, reflected), engine
    finally:
        engine.dispose()


def _batch(expected: int | None, *records: KafkaRecord) -> Batch:
    items = tuple(decode(r, [items_table()]) for r in records)
    return Batch("t", 0, expected, records[-1].offset + 1, items)


def _apply(store: PostgresMirrorStore, batch: Batch) -> ApplyResult:
    return store.apply(batch, lambda: None)


def _staging_table(engine: sa.Engine) -> object:
    with engine.connect() as conn:
        return conn.exec_driver_sql(STAGING).scalar()


def _rows(engine: sa.Engine) -> dict[int, str]:
    with engine.connect() as conn:
        return dict(conn.exec_driver_sql("SELECT id, name FROM items").tuples().all())


def _fail() -> None:
    raise _Failed("before the commit")


def test_a_connection_keeps_its_staging_table_from_batch_to_batch(
    relay_env: RelayTestEnv,
) -> None:
    relay_env.sql(ITEMS_DDL)
    with _opened(relay_env.database_url) as (store, engine):
        with pytest.raises(_Failed):  # the table created in a batch that rolled back
            store.apply(_batch(None, record(0, 1, "a")), _fail)
        assert _staging_table(engine) is None
        _apply(store, _batch(None, record(0, 1, "a"), record(1, 2, "b")))
        created = _staging_table(engine)
        assert created is not None, "the batch after the rollback did not stage in bulk"
        _apply(store, _batch(2, record(2, 3, "c"), record(3, 1, "a2")))
        assert _staging_table(engine) == created
        with engine.connect() as conn:
            assert conn.exec_driver_sql(f"SELECT count(*) FROM pg_temp.{_name(conn)}").scalar() == 0
        assert _rows(engine) == {1: "a2", 2: "b", 3: "c"}


def _name(conn: sa.Connection) -> str:
    return str(conn.exec_driver_sql(STAGING.replace("SELECT oid", "SELECT relname")).scalar())


def test_a_record_refused_in_bulk_is_dead_lettered_and_the_rest_applied(
    relay_env: RelayTestEnv,
) -> None:
    relay_env.sql(ITEMS_DDL)
    with _opened(relay_env.database_url) as (store, engine):
        result = _apply(
            store, _batch(None, record(0, 1, "a"), record(1, 2, REFUSED_NAME), record(2, 3, "c"))
        )
        assert (result.applied, [d.record.offset for d in result.dead_letters]) == (2, [1])
        assert _rows(engine) == {1: "a", 3: "c"}


def test_without_the_right_to_create_temporary_tables_batches_apply_without_bulk(
    relay_env: RelayTestEnv,
    login_roles: dict[str, str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    relay_env.sql(ITEMS_DDL)
    granted = run_relay(relay_env, "db", "roles", "--mirror-tables", "items")
    assert granted.returncode == 0, granted.stderr
    database = sa.make_url(relay_env.database_url).database
    relay_env.sql(f'REVOKE TEMPORARY ON DATABASE "{database}" FROM PUBLIC')
    with _opened(login_roles["outbox_mirror"]) as (store, engine):
        with caplog.at_level(logging.WARNING, logger="relay.postgres.mirror_store"):
            first = _apply(store, _batch(None, record(0, 1, "a"), record(1, 2, "b")))
            second = _apply(
                store, _batch(2, record(2, 1, "a2"), record(3, 3, REFUSED_NAME), record(4, 4, "d"))
            )
        assert (first.applied, first.dead_letters) == (2, ())
        assert (second.applied, [d.record.offset for d in second.dead_letters]) == (2, [3])
        assert _rows(engine) == {1: "a2", 2: "b", 4: "d"}
        warnings = [r.getMessage() for r in caplog.records if "in bulk failed" in r.getMessage()]
        assert len(warnings) == 1 and "permission denied" in warnings[0]
