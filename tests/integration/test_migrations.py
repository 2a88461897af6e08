"""`relay db` and the relay's own Alembic version table; a relay on a schema that a later
release migrated (relay_schema_compat)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy.engine import make_url

from relay import devenv
from relay.devenv.postgres_files import cluster_paths
from relay.errors import ConfigurationError
from relay.postgres import migrations
from relay.runtime.secrets import Secret
from tests.integration.support import (
    PROJECT_ROOT,
    RelayTestEnv,
    new_prefix,
    relay_command,
    run_relay,
    run_sql,
)


def _relay_db(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        relay_command("db", *args, "--database-url", url),
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def _tables(url: str) -> set[str]:
    rows = run_sql(url, "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")
    return {str(row[0]) for row in rows}


def test_upgrade_downgrade_upgrade_on_an_empty_database(database_url: str) -> None:
    up = _relay_db(database_url, "upgrade")
    assert up.returncode == 0, up.stderr
    current = _relay_db(database_url, "current")
    assert "up to date" in current.stdout
    down = _relay_db(database_url, "downgrade", "base")
    assert down.returncode == 0, down.stderr
    assert "(empty)" in _relay_db(database_url, "current").stdout
    again = _relay_db(database_url, "upgrade")
    assert again.returncode == 0, again.stderr
    assert "up to date" in _relay_db(database_url, "current").stdout


def test_our_revision_lives_in_our_own_version_table(database_url: str) -> None:
    """A service's Alembic history keeps ``alembic_version`` to itself."""
    run_sql(database_url, "CREATE TABLE alembic_version (version_num varchar(32) PRIMARY KEY)")
    run_sql(database_url, "INSERT INTO alembic_version VALUES ('service_0001')")
    up = _relay_db(database_url, "upgrade")
    assert up.returncode == 0, up.stderr
    head = migrations.head_revision()
    assert run_sql(database_url, "SELECT version_num FROM relay_alembic_version") == [(head,)]
    scripts = ScriptDirectory.from_config(migrations.alembic_config())
    oldest = migrations.oldest_compatible(scripts, head)
    assert run_sql(database_url, "SELECT * FROM relay_schema_compat") == [(head, oldest)]
    down = _relay_db(database_url, "downgrade", "base")
    assert down.returncode == 0, down.stderr
    assert run_sql(database_url, "SELECT version_num FROM alembic_version") == [("service_0001",)]


def test_alembic_by_hand_uses_the_same_version_table(database_url: str) -> None:
    env = {"RELAY_DATABASE_URL": database_url, "PATH": str(Path(sys.executable).parent)}
    by_hand = subprocess.run(
        [sys.executable, "-m", "alembic", "-c", "alembic.ini", "upgrade", "head"],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert by_hand.returncode == 0, by_hand.stderr
    assert "alembic_version" not in _tables(database_url)
    assert "up to date" in _relay_db(database_url, "current").stdout


def test_every_migration_declares_a_compatible_revision_it_descends_from() -> None:
    scripts = ScriptDirectory.from_config(migrations.alembic_config())
    for script in scripts.walk_revisions():
        oldest = migrations.oldest_compatible(scripts, script.revision)
        assert oldest in {s.revision for s in scripts.iterate_revisions(script.revision, "base")}


def _later_release(tmp_path: Path, database_url: str) -> Config:
    """The migrations of a later release: ours, then 9001 (which relays of our head still
    run on), 9002 (which they do not), 9003 (a wrong declaration)."""
    location = tmp_path / "later-release"
    shutil.copytree(
        migrations.script_location(), location, ignore=shutil.ignore_patterns("__pycache__")
    )
    head = migrations.head_revision()
    for revision, down, oldest in (
        ("9001_additive", head, repr(head)),
        ("9002_breaking", "9001_additive", "None"),
        ("9003_wrong", "9002_breaking", repr("9999_elsewhere")),
    ):
        (location / "versions" / f"{revision}.py").write_text(
            f"revision = {revision!r}\ndown_revision = {down!r}\n"
            f"branch_labels = None\ndepends_on = None\noldest_compatible = {oldest}\n\n"
            "def upgrade() -> None:\n    pass\n\n"
            "def downgrade() -> None:\n    pass\n"
        )
    config = migrations.alembic_config(Secret(database_url))
    config.set_main_option("script_location", str(location))
    return config


def test_a_relay_runs_on_a_later_compatible_schema_and_refuses_an_incompatible_one(
    database_url: str, bootstrap_servers: str, tmp_path: Path
) -> None:
    later = _later_release(tmp_path, database_url)
    env = RelayTestEnv(database_url, bootstrap_servers, new_prefix())
    head = migrations.head_revision()

    command.upgrade(later, "9001_additive")
    assert run_sql(database_url, "SELECT * FROM relay_schema_compat") == [("9001_additive", head)]
    compatible = run_relay(env, "run", "--once")
    assert compatible.returncode == 0, compatible.stderr
    assert f"database schema 9001_additive is newer than this relay's {head}" in (compatible.stderr)
    current = _relay_db(database_url, "current")
    assert f"runs relays of {head} or later" in current.stdout
    nothing_to_do = _relay_db(database_url, "upgrade")
    assert nothing_to_do.returncode == 0, nothing_to_do.stderr

    command.upgrade(later, "9002_breaking")
    refused = run_relay(env, "run", "--once")
    assert refused.returncode == 3, refused.stderr
    assert [line for line in refused.stderr.splitlines() if "error" in line] == [
        f"relay: error: database schema is at 9002_breaking, newer than this relay's {head}, "
        "and runs only relays of 9002_breaking or later: upgrade the relay"
    ]
    assert "Traceback" not in refused.stderr
    assert _relay_db(database_url, "upgrade").returncode == 3

    with pytest.raises(ConfigurationError, match="oldest_compatible '9999_elsewhere'"):
        command.upgrade(later, "9003_wrong")
    command.downgrade(later, head)
    scripts = ScriptDirectory.from_config(migrations.alembic_config())
    oldest = migrations.oldest_compatible(scripts, head)
    assert run_sql(database_url, "SELECT * FROM relay_schema_compat") == [(head, oldest)]
    assert "up to date" in _relay_db(database_url, "current").stdout


def test_the_upgrade_is_refused_with_what_to_do_on_a_server_without_commit_timestamps(
    private_postgres: tuple[Path, str],
) -> None:
    """The relay orders outbox transactions by their commit timestamps: on a server with
    ``track_commit_timestamp`` off, `relay db upgrade` stops before the relay-drawn
    positions with one line saying what to set, and leaves the schema as it was."""
    workdir, url = private_postgres
    devenv.stop_postgres(workdir)
    with (cluster_paths(workdir).data / "postgresql.auto.conf").open("a") as conf:
        conf.write("track_commit_timestamp = off\n")  # read after the dev settings
    url = devenv.start_postgres(workdir, port=int(str(make_url(url).port)))
    assert run_sql(url, "SHOW track_commit_timestamp") == [("off",)]

    refused = _relay_db(url, "upgrade")

    assert refused.returncode == 3, refused.stderr
    (line,) = [line for line in refused.stderr.splitlines() if line.startswith("relay: error")]
    assert "track_commit_timestamp is off" in line
    assert "set track_commit_timestamp = on in postgresql.conf" in line
    assert run_sql(url, "SELECT version_num FROM relay_alembic_version") == [
        ("0016_shared_single_draws",)
    ]
