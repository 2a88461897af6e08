"""The benchmark's own PostgreSQL server, configured as in production.

The shared development server runs with fsync off; production does not. This cluster,
under ``.relay-dev/bench/pg``, on a free loopback port, is durable (fsync on,
synchronous_commit on, full_page_writes on) and has ``wal_level = logical`` so that the
Debezium peer can stream from it. Every drain, mirror and latency comparison runs on it;
the write path runs on it and on the development server. It is stopped when the
benchmark ends, errors included.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
from psycopg import sql

from relay.devenv import stop_postgres
from relay.devenv.postgres_files import (
    CONF_NAME,
    SUPERUSER,
    ClusterPaths,
    give,
    initdb,
    os_user,
    pg_bindir,
    prepare_root,
    run_as,
)
from relay.devenv.processes import failure, port_open, wait_for
from relay.devenv.workdir import LOOPBACK

from .common import WORKDIR, drop_database, execute, log

USER = "bench"
PASSWORD = "bench"  # noqa: S105 - fixed password of a loopback-only benchmark server
SETTINGS = {
    "fsync": "on",
    "synchronous_commit": "on",
    "full_page_writes": "on",
    "track_commit_timestamp": "on",
    "wal_level": "logical",
    "max_wal_senders": "10",
    "max_replication_slots": "10",
    "shared_buffers": "1GB",
    "max_wal_size": "4GB",
    "checkpoint_timeout": "15min",
    "max_connections": "200",
}
"""Every setting the cluster changes from PostgreSQL's defaults (besides addresses)."""


def _free_port() -> int:
    from relay.devenv.ports import free_ports

    return free_ports(1)[0]


def _write_config(paths: ClusterPaths, port: int) -> None:
    user = os_user()
    sockdir = str(paths.sockdir).replace("'", "''")
    lines = [
        "# Written by bench/cluster.py on every start.",
        f"listen_addresses = '{LOOPBACK}'",
        f"port = {port}",
        f"unix_socket_directories = '{sockdir}'",
        "timezone = 'UTC'",
        *(f"{name} = '{value}'" for name, value in SETTINGS.items()),
    ]
    conf = paths.data / CONF_NAME
    conf.write_text("\n".join(lines) + "\n")
    give(conf, user)


def _bootstrap(paths: ClusterPaths, port: int) -> None:
    with psycopg.connect(
        host=str(paths.sockdir), port=port, user=SUPERUSER, dbname="postgres", autocommit=True
    ) as conn:
        exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (USER,)).fetchone()
        conn.execute(
            sql.SQL("{} ROLE {} LOGIN CREATEDB REPLICATION PASSWORD {}").format(
                sql.SQL("ALTER" if exists else "CREATE"),
                sql.Identifier(USER),
                sql.Literal(PASSWORD),
            )
        )
        # CHECKPOINT between pgbench windows; DROP DATABASE ... WITH (FORCE) past autovacuum.
        conn.execute(
            sql.SQL("GRANT pg_checkpoint, pg_signal_backend TO {}").format(sql.Identifier(USER))
        )


@contextmanager
def durable_cluster(workdir: Path = WORKDIR) -> Iterator[str]:
    """Start the cluster (initdb on first use) and yield an admin URL (database
    ``postgres``, role ``bench``: CREATEDB, REPLICATION); stop it on the way out."""
    user = os_user()
    workdir.mkdir(parents=True, exist_ok=True)
    paths = prepare_root(workdir, user)
    if not (paths.data / "PG_VERSION").exists():
        initdb(paths, user, 120)
    if paths.pidfile.exists():
        paths.pidfile.unlink()
    port = _free_port()
    _write_config(paths, port)
    log(f"starting the durable PostgreSQL cluster on {LOOPBACK}:{port}")
    argv = [str(pg_bindir() / "pg_ctl"), "start", "-D", str(paths.data), "-w", "-t", "120"]
    argv += ["-l", str(paths.logfile)]
    try:
        res = run_as(argv, user, cwd=paths.root, timeout=150)
        if res.returncode != 0 or not wait_for(lambda: port_open(port), 60):
            raise failure(f"benchmark PostgreSQL did not start: {res.stderr}", paths.logfile)
        _bootstrap(paths, port)
        admin_url = f"postgresql+psycopg://{USER}:{PASSWORD}@{LOOPBACK}:{port}/postgres"
        for (name,) in execute(
            admin_url, "SELECT datname FROM pg_database WHERE datname LIKE 'bench%'"
        ):
            drop_database(admin_url, str(name))  # left by an interrupted run
        yield admin_url
    finally:
        log("stopping the durable PostgreSQL cluster")
        stop_postgres(workdir)
