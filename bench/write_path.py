"""Write path: what capturing an event costs the service's own transactions.

pgbench runs three scripts (bench/pgbench/) at each client count, one after another,
each from empty tables: (a) the business row alone, (b) the business row plus a row in a
trigger-less outbox table of the same shape, (c) the business row plus the INSERT into
our outbox that ``relay.publish`` issues, while a drawer draws the positions of what
commits as `relay run`'s commit watch does (``outbox_draw`` every 10 ms, on a connection
of its own). Ratio = tps (c) / tps (b). Measured on the durable cluster
(fsync on) and on the development server (fsync off), and with every event on one hot
key (durable cluster).
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa

from relay.devenv.databases import libpq_url
from relay.devenv.waiting import wait_until

from .common import (
    Outcome,
    Row,
    autocommit,
    engine,
    execute,
    log,
    scratch_database,
    server_settings,
)

PGBENCH = Path("/usr/lib/postgresql/15/bin/pgbench")
SCRIPTS = Path(__file__).resolve().parent / "pgbench"
KINDS = {"business": "business.sql", "plain_outbox": "plain_outbox.sql", "outbox": "outbox.sql"}
_TPS = re.compile(r"tps = ([0-9.]+) \(without initial connection time\)")
_LATENCY = re.compile(r"latency average = ([0-9.]+) ms")


_RESTARTED = ("backend died", "terminating connection", "connection to server")
DRAW_INTERVAL_S = 0.01  # as relay run's commit watch (RELAY_COMMIT_WATCH_S)


class ServerRestartedError(RuntimeError):
    """The server went away during a window (the shared development server is restarted by
    other people's tests now and then); the window is measured again."""


@dataclass(frozen=True, slots=True)
class Plan:
    clients: tuple[int, ...]
    hot_clients: tuple[int, ...]
    seconds: int


FULL = Plan(clients=(1, 4, 16, 64), hot_clients=(16, 64), seconds=10)
QUICK = Plan(clients=(1, 16), hot_clients=(16,), seconds=3)


def pgbench(url: str, script: str, clients: int, seconds: int, spread: int) -> dict[str, float]:
    """One pgbench window; tps and average latency (ms)."""
    parts = sa.make_url(libpq_url(url))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env.update(
        PGHOST=str(parts.host),
        PGPORT=str(parts.port),
        PGUSER=str(parts.username),
        PGPASSWORD=str(parts.password),
        PGDATABASE=str(parts.database),
    )
    argv = [str(PGBENCH), "-n", "-M", "prepared", "-c", str(clients), "-j", str(min(clients, 2))]
    argv += ["-T", str(seconds), "-D", f"spread={spread}", "-f", str(SCRIPTS / script)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    tps = _TPS.search(done.stdout)
    if done.returncode != 0 and any(sign in done.stderr for sign in _RESTARTED):
        raise ServerRestartedError(done.stderr[-500:])
    if done.returncode != 0 or tps is None:
        raise RuntimeError(f"pgbench failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    latency = _LATENCY.search(done.stdout)
    return {"tps": float(tps.group(1)), "latency_ms": float(latency.group(1)) if latency else 0.0}


def _reset(url: str) -> None:
    autocommit(
        url,
        "TRUNCATE bench_orders, plain_outbox, outbox, outbox_commits",
        "UPDATE outbox_draws SET cursor = 0, seen = NULL, check_top = NULL, check_vxids = NULL",
        "VACUUM ANALYZE",
    )
    with contextlib.suppress(sa.exc.DBAPIError):  # where the role may (pg_checkpoint)
        autocommit(url, "CHECKPOINT")


@contextlib.contextmanager
def drawing(url: str) -> Iterator[list[int]]:
    """Draws of the outbox's positions every :data:`DRAW_INTERVAL_S` in a thread, as
    `relay run` makes them, until the block ends; the list holds how many were made."""
    stop = threading.Event()
    made: list[int] = [0]
    failed: list[BaseException] = []

    def draw() -> None:
        eng = engine(url, isolation_level="AUTOCOMMIT")
        try:
            with eng.connect() as conn:
                while not stop.wait(DRAW_INTERVAL_S):
                    conn.execute(sa.text("SELECT outbox_draw()"))
                    made[0] += 1
        except BaseException as exc:
            failed.append(exc)
        finally:
            eng.dispose()

    thread = threading.Thread(target=draw, name="drawer", daemon=True)
    thread.start()
    try:
        yield made
    finally:
        stop.set()
        thread.join(30)
    if failed:
        raise failed[0]


def _window(url: str, script: str, clients: int, seconds: int, spread: int) -> dict[str, float]:
    """One pgbench window from empty tables, again (up to twice) if the server restarted;
    our outbox's with a drawer beside it."""
    for attempt in range(3):
        try:
            _reset(url)
            if script != KINDS["outbox"]:
                return pgbench(url, script, clients, seconds, spread)
            with drawing(url) as draws:
                figures = pgbench(url, script, clients, seconds, spread)
            undrawn = execute(url, "SELECT count(*) FROM outbox_undrawn")[0][0]
            return {**figures, "draws": float(draws[0]), "undrawn_after": float(undrawn)}  # type: ignore[arg-type]
        except (ServerRestartedError, sa.exc.OperationalError) as exc:
            if attempt == 2:
                raise
            log(f"write path: the server went away ({str(exc).strip()[:120]}); measuring again")
            wait_until(lambda: _answers(url), 120, "the server to answer again", interval=1.0)
    raise AssertionError("unreachable")


def _answers(url: str) -> bool:
    try:
        execute(url, "SELECT 1")
    except sa.exc.OperationalError:
        return False
    return True


def measure_server(
    admin_url: str, label: str, clients: tuple[int, ...], seconds: int, spread: int
) -> dict[str, dict[str, dict[str, float]]]:
    """tps of the three scripts at each client count, in a fresh database on one server."""
    figures: dict[str, dict[str, dict[str, float]]] = {}
    with scratch_database(
        admin_url, f"bench_write_{label}", (SCRIPTS / "schema.sql").read_text()
    ) as url:
        for n in clients:
            figures[str(n)] = {}
            for kind, script in KINDS.items():
                if spread == 0 and kind == "business":
                    continue  # one hot key changes nothing for an insert-only business row
                figures[str(n)][kind] = _window(url, script, n, seconds, spread)
            got = figures[str(n)]
            log(
                f"write path {label}, {n} clients: "
                + ", ".join(f"{k} {v['tps']:.0f} tps" for k, v in got.items())
            )
    return figures


def run(dev_admin_url: str, durable_admin_url: str, quick: bool) -> Outcome:
    plan = QUICK if quick else FULL
    outcome = Outcome()
    results: dict[str, object] = {"seconds_per_window": plan.seconds, "pgbench": "-M prepared"}
    ratios: dict[str, dict[str, float]] = {}
    runs = (
        ("durable", durable_admin_url, plan.clients, 1, ""),
        ("dev_fsync_off", dev_admin_url, plan.clients, 1, ""),
        ("durable_hot_key", durable_admin_url, plan.hot_clients, 0, ", one hot key"),
    )
    for label, admin_url, clients, spread, note in runs:
        figures = measure_server(admin_url, label, clients, plan.seconds, spread)
        results[label] = figures
        ratios[label] = {}
        for n, got in figures.items():
            ours, peer = got["outbox"]["tps"], got["plain_outbox"]["tps"]
            outcome.rows.append(
                Row(
                    f"write tps {label.replace('_hot_key', '')}{note}, {n} clients (c)/(b)",
                    ours,
                    peer,
                    "tps",
                )
            )
            ratios[label][n] = round(ours / peer, 3)
    results["ratios_c_over_b"] = ratios
    results["server_settings"] = {
        "durable": server_settings(durable_admin_url),
        "dev_fsync_off": server_settings(dev_admin_url),
    }
    outcome.headline["write_path_ratio"] = min(ratios["durable"].values())
    outcome.headline["write_path_ratio_dev_fsync_off"] = min(ratios["dev_fsync_off"].values())
    outcome.raw["write_path"] = results
    return outcome
