"""A private PostgreSQL server in ``<workdir>/pg`` for development and tests.

PostgreSQL refuses to run as root, so when this runs as root the cluster belongs to an
unprivileged system user (``postgres``, or ``$RELAY_DEV_PG_OS_USER``) and every server
binary runs as that user. Loopback TCP needs a password (``relay``/``relay``); the Unix
socket, inside the cluster's directory, trusts local users and is only used to bootstrap.
"""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

import psycopg
from psycopg import sql

from relay.errors import DevEnvError

from .postgres_files import (
    SUPERUSER,
    ClusterPaths,
    OsUser,
    cluster_paths,
    initdb,
    os_user,
    pg_bindir,
    prepare_root,
    run_as,
    write_config,
)
from .processes import (
    failure,
    pid_alive,
    port_open,
    process_cmdline,
    read_pid,
    wait_for,
)
from .workdir import (
    DEFAULT_TIMEOUT,
    ENV_PG_PORT,
    LOOPBACK,
    configured_ports,
    read_state,
    resolve_workdir,
    workdir_lock,
    write_state,
)

log = logging.getLogger("relay.devenv.postgres")

DB_USER = "relay"
DB_PASSWORD = "relay"  # noqa: S105 - fixed password of a loopback-only dev server
DB_NAME = "relay"
_STATE_KEY = "postgres_port"


def database_url(port: int, dbname: str = DB_NAME) -> str:
    """SQLAlchemy URL (psycopg 3 driver) of ``dbname`` as the ``relay`` role."""
    return f"postgresql+psycopg://{DB_USER}:{DB_PASSWORD}@{LOOPBACK}:{port}/{dbname}"


# --- state queries -------------------------------------------------------------------------


def postgres_pid(workdir: Path | None = None) -> int | None:
    """Pid of the running postmaster of ``workdir``, or None."""
    pidfile = cluster_paths(resolve_workdir(workdir)).pidfile
    pid = read_pid(pidfile)
    if pid is None or not pid_alive(pid):
        return None
    cmdline = process_cmdline(pid)
    if cmdline is not None and "postgres" not in cmdline:
        return None  # stale pid file whose pid was reused
    return pid


def postgres_port(workdir: Path | None = None) -> int:
    """Port the cluster of ``workdir`` was last started on (else the configured one)."""
    return read_state(resolve_workdir(workdir)).get(_STATE_KEY, configured_ports().postgres)


def postgres_answering(port: int, timeout: float = 3.0) -> bool:
    """True if the ``relay`` database accepts a password login on ``port``."""
    try:
        with psycopg.connect(
            host=LOOPBACK,
            port=port,
            user=DB_USER,
            password=DB_PASSWORD,
            dbname=DB_NAME,
            connect_timeout=max(1, int(timeout)),
        ) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error:
        return False
    return True


# --- lifecycle -----------------------------------------------------------------------------


def _bootstrap(paths: ClusterPaths, port: int) -> None:
    """Create (or refresh) the ``relay`` role and database over the trusted Unix socket."""
    with psycopg.connect(
        host=str(paths.sockdir), port=port, user=SUPERUSER, dbname="postgres", autocommit=True
    ) as conn:
        exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (DB_USER,)).fetchone()
        conn.execute(
            sql.SQL("{} ROLE {} LOGIN CREATEDB CREATEROLE PASSWORD {}").format(
                sql.SQL("ALTER" if exists else "CREATE"),
                sql.Identifier(DB_USER),
                sql.Literal(DB_PASSWORD),
            )
        )
        # Tests and benchmarks drop scratch databases WITH (FORCE), which must be allowed to
        # end an autovacuum worker in them.
        conn.execute(sql.SQL("GRANT pg_signal_backend TO {}").format(sql.Identifier(DB_USER)))
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DB_NAME,)).fetchone():
            conn.execute(
                sql.SQL("CREATE DATABASE {} OWNER {}").format(
                    sql.Identifier(DB_NAME), sql.Identifier(DB_USER)
                )
            )


def _repair_role(paths: ClusterPaths, port: int) -> None:
    """Restore the ``relay`` role/password/database if something (e.g. a test running
    ``ALTER ROLE CURRENT_USER PASSWORD ...``) changed them; best effort."""
    try:
        _bootstrap(paths, port)
    except psycopg.Error as exc:
        log.debug("could not refresh the relay role: %s", exc)
    else:
        log.info("refreshed the relay role and password of the running PostgreSQL")


def _pg_ctl(
    paths: ClusterPaths, user: OsUser, action: str, *opts: str, timeout: float
) -> subprocess.CompletedProcess[str]:
    """``pg_ctl <action> -D <data> <opts> -w -t <timeout>`` as ``user``."""
    pg_ctl = str(pg_bindir() / "pg_ctl")
    argv = [pg_ctl, action, "-D", str(paths.data), *opts, "-w", "-t", str(int(timeout))]
    return run_as(argv, user, cwd=paths.root, timeout=timeout + 30)


def start_postgres(
    workdir: Path | None = None, *, port: int | None = None, timeout: float = DEFAULT_TIMEOUT
) -> str:
    """Start (initializing if needed) the cluster of ``workdir`` unless it is running, wait
    until the ``relay`` database accepts logins, and return its SQLAlchemy URL."""
    wd = resolve_workdir(workdir)
    with workdir_lock(wd):
        if postgres_pid(wd) is not None:
            running_port = postgres_port(wd)
            if not postgres_answering(running_port):
                _repair_role(cluster_paths(wd), running_port)
            if not wait_for(lambda: postgres_answering(running_port), timeout, interval=0.5):
                raise failure(
                    f"PostgreSQL in {wd} is running but not answering on port {running_port}",
                    cluster_paths(wd).logfile,
                )
            return database_url(running_port)
        if port is None:
            port = configured_ports().postgres
        if port_open(port):
            raise DevEnvError(
                f"{LOOPBACK}:{port} is already in use by another process (not the PostgreSQL "
                f"of {wd}); stop it or choose another port with {ENV_PG_PORT}"
            )
        user = os_user()
        paths = prepare_root(wd, user)
        if not (paths.data / "PG_VERSION").exists():
            initdb(paths, user, timeout)
        if paths.pidfile.exists():
            paths.pidfile.unlink()  # stale: no postmaster of ours is running
        write_config(paths, user, port)
        log.info("starting PostgreSQL on %s:%d", LOOPBACK, port)
        res = _pg_ctl(paths, user, "start", "-l", str(paths.logfile), timeout=timeout)
        if res.returncode != 0:
            raise failure(
                f"PostgreSQL did not start within {timeout:.0f}s (pg_ctl exit {res.returncode}: "
                f"{(res.stdout + res.stderr).strip()})",
                paths.logfile,
            )
        write_state(wd, **{_STATE_KEY: port})
        try:
            _bootstrap(paths, port)
        except psycopg.Error as exc:
            raise failure(f"could not create the relay role/db: {exc}", paths.logfile) from exc
        if not wait_for(lambda: postgres_answering(port), timeout, interval=0.5):
            raise failure(f"PostgreSQL started but refuses relay logins on {port}", paths.logfile)
        return database_url(port)


def stop_postgres(
    workdir: Path | None = None, hard: bool = False, *, timeout: float = 60.0
) -> None:
    """Stop the cluster of ``workdir`` (``pg_ctl stop -m fast``; ``-m immediate``, i.e. a
    crash that needs WAL recovery on the next start, when ``hard``). No-op if stopped."""
    _stop(resolve_workdir(workdir), "immediate" if hard else "fast", timeout)


def _stop(wd: Path, mode: str, timeout: float) -> None:
    with workdir_lock(wd):
        pid = postgres_pid(wd)
        if pid is None:
            return
        paths = cluster_paths(wd)
        log.info("stopping PostgreSQL (pid %d, mode %s)", pid, mode)
        res = _pg_ctl(paths, os_user(), "stop", "-m", mode, timeout=timeout)
        if res.returncode != 0 and pid_alive(pid):
            raise failure(
                f"pg_ctl stop -m {mode} failed (exit {res.returncode}): "
                f"{(res.stdout + res.stderr).strip()}",
                paths.logfile,
            )
        if not wait_for(lambda: not pid_alive(pid), timeout):
            raise failure(f"PostgreSQL (pid {pid}) did not exit", paths.logfile)


def restart_postgres(
    workdir: Path | None = None, mode: str = "immediate", *, timeout: float = DEFAULT_TIMEOUT
) -> str:
    """Stop the cluster with ``pg_ctl stop -m <mode>`` (smart, fast or immediate) and start it
    again on the same port; returns the database URL."""
    if mode not in ("smart", "fast", "immediate"):
        raise ValueError(f"unknown pg_ctl shutdown mode {mode!r}")
    wd = resolve_workdir(workdir)
    with workdir_lock(wd):
        port = postgres_port(wd)
        _stop(wd, mode, timeout)
        return start_postgres(wd, port=port, timeout=timeout)
