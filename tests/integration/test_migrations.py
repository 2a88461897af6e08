from __future__ import annotations

import subprocess

from tests.integration.support import PROJECT_ROOT, relay_command


def _relay_db(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        relay_command("db", *args, "--database-url", url),
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


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
