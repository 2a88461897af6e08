"""A private PostgreSQL server in ``<workdir>/pg`` for development and tests.

PostgreSQL refuses to run as root, so when this runs as root the cluster belongs to an
unprivileged system user (``postgres``, or ``$RELAY_DEV_PG_OS_USER``) and every server
binary runs as that user. Loopback TCP needs a password (``relay``/``relay``); the Unix
socket, inside the cluster's directory, trusts local users and is only used to bootstrap.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pwd
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql

from .common import (
    DEFAULT_TIMEOUT,
    ENV_PG_PORT,
    LOOPBACK,
    DevEnvError,
    configured_ports,
    failure,
    pid_alive,
    port_open,
    process_cmdline,
    read_pid,
    read_state,
    resolve_workdir,
    wait_for,
    workdir_lock,
    write_state,
)

log = logging.getLogger("relay.devenv.postgres")

DB_USER = "relay"
DB_PASSWORD = "relay"  # noqa: S105 - fixed password of a loopback-only dev server
DB_NAME = "relay"
SUPERUSER = "postgres"
ENV_OS_USER = "RELAY_DEV_PG_OS_USER"
ENV_BINDIR = "RELAY_DEV_PG_BINDIR"
_CONF_NAME = "relay-dev.conf"
_STATE_KEY = "postgres_port"


def database_url(port: int, dbname: str = DB_NAME) -> str:
    """SQLAlchemy URL (psycopg 3 driver) of ``dbname`` as the ``relay`` role."""
    return f"postgresql+psycopg://{DB_USER}:{DB_PASSWORD}@{LOOPBACK}:{port}/{dbname}"


# --- binaries and OS user ------------------------------------------------------------------


def _version_key(path: Path) -> tuple[int, ...]:
    name = path.parent.name
    return tuple(int(p) for p in name.split(".") if p.isdigit())


def pg_bindir() -> Path:
    """Directory holding ``initdb``, ``pg_ctl`` and ``postgres``: ``$RELAY_DEV_PG_BINDIR``,
    else the one on PATH, else the newest ``/usr/lib/postgresql/<version>/bin`` (Debian)."""
    needed = ("initdb", "pg_ctl", "postgres")
    candidates: list[Path] = []
    env = os.environ.get(ENV_BINDIR)
    if env:
        candidates.append(Path(env))
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidates.append(Path(on_path).resolve().parent)
    debian = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=_version_key, reverse=True)
    candidates.extend(debian)
    candidates.append(Path("/usr/local/pgsql/bin"))
    for cand in candidates:
        if all(os.access(cand / exe, os.X_OK) for exe in needed):
            return cand
    raise DevEnvError(
        "PostgreSQL server binaries (initdb, pg_ctl, postgres) not found on PATH or in "
        "/usr/lib/postgresql/*/bin; install them (Debian: apt-get install postgresql) "
        f"or set {ENV_BINDIR}"
    )


@dataclass(frozen=True, slots=True)
class _OsUser:
    name: str
    uid: int
    gid: int
    home: str

    @property
    def is_self(self) -> bool:
        return self.uid == os.geteuid()


def _os_user() -> _OsUser:
    if os.geteuid() != 0:
        entry = pwd.getpwuid(os.geteuid())
    else:
        name = os.environ.get(ENV_OS_USER, "postgres")
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            raise DevEnvError(
                f"running as root, but there is no '{name}' user to run PostgreSQL as "
                f"(PostgreSQL refuses root); create one (useradd --system {name}) "
                f"or set {ENV_OS_USER}"
            ) from None
        if entry.pw_uid == 0:
            raise DevEnvError(f"{ENV_OS_USER}={name} is root; PostgreSQL refuses to run as root")
    return _OsUser(entry.pw_name, entry.pw_uid, entry.pw_gid, entry.pw_dir)


def _run(
    argv: list[str], user: _OsUser, *, cwd: Path, timeout: float
) -> subprocess.CompletedProcess[str]:
    """Run a PostgreSQL tool as the cluster's OS user, capturing its output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env.update(HOME=user.home, USER=user.name, LOGNAME=user.name, LC_ALL="C")
    log.debug("running %s", " ".join(argv))
    try:
        if user.is_self:
            return subprocess.run(
                argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
            )
        return subprocess.run(
            argv,
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            user=user.uid,
            group=user.gid,
            extra_groups=[],
        )
    except subprocess.TimeoutExpired:
        raise DevEnvError(f"{' '.join(argv)} did not finish within {timeout:.0f}s") from None


def _give(path: Path, user: _OsUser, mode: int | None = None) -> None:
    if not user.is_self:
        os.chown(path, user.uid, user.gid)
    if mode is not None:
        path.chmod(mode)


def _can_traverse(user: _OsUser, directory: Path) -> bool:
    probe = _run(["test", "-x", str(directory)], user, cwd=Path("/"), timeout=30)
    return probe.returncode == 0


# --- layout --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Paths:
    root: Path

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def logfile(self) -> Path:
        return self.root / "postgres.log"

    @property
    def pidfile(self) -> Path:
        return self.data / "postmaster.pid"

    @property
    def sockdir(self) -> Path:
        # Unix socket paths are limited to ~107 bytes; fall back to a short temp dir.
        sock = self.root / "run"
        if len(str(sock)) <= 80:
            return sock
        digest = hashlib.sha256(str(self.root).encode()).hexdigest()[:12]
        return Path(tempfile.gettempdir()) / f"relay-dev-pgsock-{digest}"


def _paths(workdir: Path) -> _Paths:
    return _Paths((workdir / "pg").resolve())


def _prepare_root(workdir: Path, user: _OsUser) -> _Paths:
    """Create ``<workdir>/pg`` owned by the cluster's user. If that user cannot reach the
    work dir (e.g. it lies under /root), keep the cluster in /var/tmp behind a symlink."""
    link = workdir / "pg"
    if link.is_symlink() or link.is_dir():
        root = link.resolve()
    elif user.is_self or _can_traverse(user, workdir):
        root = link
    else:
        persistent = Path("/var/tmp")  # noqa: S108 - survives reboots, unlike /tmp
        base = persistent if persistent.is_dir() else Path(tempfile.gettempdir())
        digest = hashlib.sha256(str(workdir).encode()).hexdigest()[:12]
        root = base / f"relay-dev-pg-{digest}"
        log.info("%s cannot reach %s; keeping the cluster in %s", user.name, workdir, root)
        link.symlink_to(root, target_is_directory=True)
    if not root.is_dir():
        root.mkdir(parents=True)
    _give(root, user, 0o700)
    paths = _Paths(root)
    paths.sockdir.mkdir(exist_ok=True)
    _give(paths.sockdir, user, 0o700)
    return paths


# --- state queries -------------------------------------------------------------------------


def postgres_pid(workdir: Path | None = None) -> int | None:
    """Pid of the running postmaster of ``workdir``, or None."""
    pidfile = _paths(resolve_workdir(workdir)).pidfile
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


def _initdb(paths: _Paths, user: _OsUser, timeout: float) -> None:
    staging = paths.root / "data.initdb"
    if staging.exists():
        shutil.rmtree(staging)
    log.info("initializing PostgreSQL cluster in %s", paths.data)
    res = _run(
        [
            str(pg_bindir() / "initdb"),
            "-D",
            str(staging),
            "-U",
            SUPERUSER,
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        ],
        user,
        cwd=paths.root,
        timeout=timeout,
    )
    if res.returncode != 0:
        raise DevEnvError(f"initdb failed (exit {res.returncode}):\n{res.stdout}{res.stderr}")
    with (staging / "postgresql.conf").open("a") as conf:
        conf.write(f"\n# dev settings, rewritten on every start\ninclude = '{_CONF_NAME}'\n")
    staging.rename(paths.data)


def _write_config(paths: _Paths, user: _OsUser, port: int) -> None:
    sockdir = str(paths.sockdir).replace("'", "''")
    conf = paths.data / _CONF_NAME
    conf.write_text(
        "# Written by relay.devenv on every start; local edits are overwritten.\n"
        f"listen_addresses = '{LOOPBACK}'\n"
        f"port = {port}\n"
        f"unix_socket_directories = '{sockdir}'\n"
        "max_connections = 200\n"
        "fsync = off\n"
        "synchronous_commit = off\n"
        "full_page_writes = off\n"
        "timezone = 'UTC'\n"
        "log_timezone = 'UTC'\n"
        "log_line_prefix = '%m [%p] %q%u@%d '\n"
    )
    _give(conf, user)


def _bootstrap(paths: _Paths, port: int) -> None:
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
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DB_NAME,)).fetchone():
            conn.execute(
                sql.SQL("CREATE DATABASE {} OWNER {}").format(
                    sql.Identifier(DB_NAME), sql.Identifier(DB_USER)
                )
            )


def _repair_role(paths: _Paths, port: int) -> None:
    """Restore the ``relay`` role/password/database if something (e.g. a test running
    ``ALTER ROLE CURRENT_USER PASSWORD ...``) changed them; best effort."""
    try:
        _bootstrap(paths, port)
    except psycopg.Error as exc:
        log.debug("could not refresh the relay role: %s", exc)
    else:
        log.info("refreshed the relay role and password of the running PostgreSQL")


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
                _repair_role(_paths(wd), running_port)
            if not wait_for(lambda: postgres_answering(running_port), timeout, interval=0.5):
                raise failure(
                    f"PostgreSQL in {wd} is running but not answering on port {running_port}",
                    _paths(wd).logfile,
                )
            return database_url(running_port)
        if port is None:
            port = configured_ports().postgres
        if port_open(port):
            raise DevEnvError(
                f"{LOOPBACK}:{port} is already in use by another process (not the PostgreSQL "
                f"of {wd}); stop it or choose another port with {ENV_PG_PORT}"
            )
        user = _os_user()
        paths = _prepare_root(wd, user)
        if not (paths.data / "PG_VERSION").exists():
            _initdb(paths, user, timeout)
        if paths.pidfile.exists():
            paths.pidfile.unlink()  # stale: no postmaster of ours is running
        _write_config(paths, user, port)
        log.info("starting PostgreSQL on %s:%d", LOOPBACK, port)
        res = _run(
            [
                str(pg_bindir() / "pg_ctl"),
                "start",
                "-D",
                str(paths.data),
                "-l",
                str(paths.logfile),
                "-w",
                "-t",
                str(int(timeout)),
            ],
            user,
            cwd=paths.root,
            timeout=timeout + 30,
        )
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
    workdir: Path | None = None, *, hard: bool = False, timeout: float = 60.0
) -> None:
    """Stop the cluster of ``workdir`` (``pg_ctl stop -m fast``; ``-m immediate``, i.e. a
    crash that needs WAL recovery on the next start, when ``hard``). No-op if stopped."""
    _stop(resolve_workdir(workdir), "immediate" if hard else "fast", timeout)


def _stop(wd: Path, mode: str, timeout: float) -> None:
    with workdir_lock(wd):
        pid = postgres_pid(wd)
        if pid is None:
            return
        paths = _paths(wd)
        log.info("stopping PostgreSQL (pid %d, mode %s)", pid, mode)
        res = _run(
            [str(pg_bindir() / "pg_ctl"), "stop", "-D", str(paths.data), "-m", mode, "-w",
             "-t", str(int(timeout))],
            _os_user(),
            cwd=paths.root,
            timeout=timeout + 30,
        )
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
