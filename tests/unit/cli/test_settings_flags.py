"""The settings' flags on the command line: the help of `relay run`, `relay mirror` and
`relay replicate` shows each setting's true default, and a bad value names the flag when
the flag was typed and the variable when the variable was set."""

from __future__ import annotations

import argparse

import pytest

from relay.cli import build_parser, main
from relay.settings.connections import CONNECTIONS, METRICS
from relay.settings.flags import relay_settings_from_args
from relay.settings.mirror import MIRROR
from relay.settings.relay import RELAY_FLAGS
from relay.settings.replicate_spec import REPLICATE, SELECTION, SOURCE, TARGET
from relay.settings.spec import Setting

COMMANDS = {
    "run": (*CONNECTIONS, *RELAY_FLAGS, *METRICS),
    "mirror": (*CONNECTIONS, *MIRROR, *METRICS),
    "replicate": (
        *SOURCE.settings,
        *TARGET.settings,
        *SELECTION,
        *REPLICATE,
        SOURCE.transaction_timeout_ms,
        SOURCE.kafka_timeout_s,
        *METRICS,
    ),
}
ENV = {
    "RELAY_DATABASE_URL": "postgresql://app:hunter2@127.0.0.1:1/app",
    "RELAY_KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1",
}


def _command(name: str) -> argparse.ArgumentParser:
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            parser: argparse.ArgumentParser = action.choices[name]
            return parser
    raise LookupError(name)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_each_flag_is_made_from_its_setting(command: str) -> None:
    actions = {a.dest: a for a in _command(command)._actions}
    settings: tuple[Setting, ...] = COMMANDS[command]
    for setting in settings:
        if setting.flag is None:
            continue
        action = actions[setting.dest]
        assert action.option_strings == [setting.flag]
        assert (action.help or "").replace("%%", "%") == setting.help_text()


def test_run_help_shows_the_computed_defaults_not_a_fixed_name(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "RELAY_POSITIONS_GROUP=" not in shown
    assert "RELAY_TRANSACTIONAL_ID_PREFIX=" not in shown
    assert "[RELAY_POSITIONS_GROUP; default: the database's, outbox-relay-<first 8" in shown
    assert "[RELAY_BATCH_SIZE=5000]" in shown


@pytest.mark.parametrize(
    ("argv", "flag", "variable"),
    [
        (["run", "--once", "--batch-size", "-5"], "--batch-size", "RELAY_BATCH_SIZE"),
        (
            ["mirror", "--mapping", "m.toml", "--batch-size", "0"],
            "--batch-size",
            "RELAY_MIRROR_BATCH_SIZE",
        ),
        (
            ["replicate", "--topics", "a", "--max-wait", "0"],
            "--max-wait",
            "RELAY_REPLICATE_MAX_WAIT_S",
        ),
        (["run", "--metrics-port", "70000"], "--metrics-port", "RELAY_METRICS_PORT"),
    ],
)
def test_a_bad_value_names_the_flag_or_the_variable_that_was_given(
    argv: list[str],
    flag: str,
    variable: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in {
        **ENV,
        "RELAY_REPLICATE_SOURCE_BOOTSTRAP_SERVERS": "127.0.0.1:1",
        "RELAY_REPLICATE_TARGET_BOOTSTRAP_SERVERS": "127.0.0.1:1",
    }.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    typed = capsys.readouterr().err.splitlines()[-1]
    assert f"argument {flag}: must" in typed
    assert variable not in typed

    *command, _, value = argv
    monkeypatch.setenv(variable, value)
    assert main(command) == 2
    from_variable = capsys.readouterr().err.splitlines()[-1]
    assert from_variable.startswith(f"relay: error: {variable} must")
    assert flag not in from_variable


def test_status_offers_only_the_flags_it_reads() -> None:
    """`relay status` reads the connections, where the positions are and which mirror to
    report on; the relay's and the mirror's tuning flags would only mislead there."""
    offered = {o for a in _command("status")._actions for o in a.option_strings}
    tuning = {
        s.flag
        for s in (*RELAY_FLAGS, *MIRROR)
        if s.flag
        and s.name not in {"transactional_id_prefix", "positions_topic"}
        and s.name not in {"positions_group", "mapping_path", "group_name", "topics"}
    }
    assert not offered & tuning, sorted(offered & tuning)
    assert {"--positions-group", "--mapping", "--partitions", "--database-url"} <= offered


@pytest.mark.parametrize(
    ("argv", "environ", "per_process"),
    [
        ([], {}, True),  # the default: one transaction per process
        (["--partition-transactions"], {}, False),
        (["--process-transactions"], {}, True),  # the old opt-in, still accepted
        ([], {"RELAY_PROCESS_TRANSACTIONS": "false"}, False),
        (["--process-transactions"], {"RELAY_PROCESS_TRANSACTIONS": "false"}, True),
    ],
)
def test_relay_run_has_one_transaction_per_process_unless_told_otherwise(
    argv: list[str], environ: dict[str, str], per_process: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in {**ENV, **environ}.items():
        monkeypatch.setenv(name, value)
    args = build_parser().parse_args(["run", *argv])
    assert relay_settings_from_args(args).process_transactions is per_process
