"""On-disk side of the development PostgreSQL: binaries, the OS user it runs as, the
directory layout under ``<workdir>/pg``, ``initdb`` and the generated configuration."""

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

from relay.errors import DevEnvError

from .workdir import LOOPBACK

log = logging.getLogger("relay.devenv.postgres")

SUPERUSER = "postgres"
ENV_OS_USER = "RELAY_DEV_PG_OS_USER"
ENV_BINDIR = "RELAY_DEV_PG_BINDIR"
CONF_NAME = "relay-dev.conf"


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
class OsUser:
    name: str
    uid: int
    gid: int
    home: str

    @property
    def is_self(self) -> bool:
        return self.uid == os.geteuid()


def os_user() -> OsUser:
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
    return OsUser(entry.pw_name, entry.pw_uid, entry.pw_gid, entry.pw_dir)


def run_as(
    argv: list[str], user: OsUser, *, cwd: Path, timeout: float
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


def give(path: Path, user: OsUser, mode: int | None = None) -> None:
    if not user.is_self:
        os.chown(path, user.uid, user.gid)
    if mode is not None:
        path.chmod(mode)


def can_traverse(user: OsUser, directory: Path) -> bool:
    probe = run_as(["test", "-x", str(directory)], user, cwd=Path("/"), timeout=30)
    return probe.returncode == 0


# --- layout --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClusterPaths:
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


def cluster_paths(workdir: Path) -> ClusterPaths:
    return ClusterPaths((workdir / "pg").resolve())


def prepare_root(workdir: Path, user: OsUser) -> ClusterPaths:
    """Create ``<workdir>/pg`` owned by the cluster's user. If that user cannot reach the
    work dir (e.g. it lies under /root), keep the cluster in /var/tmp behind a symlink."""
    link = workdir / "pg"
    if link.is_symlink() or link.is_dir():
        root = link.resolve()
    elif user.is_self or can_traverse(user, workdir):
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
    give(root, user, 0o700)
    paths = ClusterPaths(root)
    paths.sockdir.mkdir(exist_ok=True)
    give(paths.sockdir, user, 0o700)
    return paths


# --- initdb and configuration ------------------------------------------------------------


def initdb(paths: ClusterPaths, user: OsUser, timeout: float) -> None:
    staging = paths.root / "data.initdb"
    if staging.exists():
        shutil.rmtree(staging)
    log.info("initializing PostgreSQL cluster in %s", paths.data)
    res = run_as(
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
        conf.write(f"\n# dev settings, rewritten on every start\ninclude = '{CONF_NAME}'\n")
    staging.rename(paths.data)


def write_config(paths: ClusterPaths, user: OsUser, port: int) -> None:
    sockdir = str(paths.sockdir).replace("'", "''")
    conf = paths.data / CONF_NAME
    conf.write_text(
        "# Written by relay.devenv on every start; local edits are overwritten.\n"
        f"listen_addresses = '{LOOPBACK}'\n"
        f"port = {port}\n"
        f"unix_socket_directories = '{sockdir}'\n"
        "max_connections = 200\n"
        "fsync = off\n"
        "synchronous_commit = off\n"
        "full_page_writes = off\n"
        "track_commit_timestamp = on\n"  # the relay orders outbox commits by their time
        "timezone = 'UTC'\n"
        "log_timezone = 'UTC'\n"
        "log_line_prefix = '%m [%p] %q%u@%d '\n"
    )
    give(conf, user)
