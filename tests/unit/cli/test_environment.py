"""Every flag has a ``RELAY_*`` variable: named in its help (or in a configuration table of
the docs), documented, and read. Walks every parser, so a new flag without one fails."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from relay.cli import build_parser
from relay.errors import ConfigurationError
from relay.settings.env_flags import NO_VARIABLE, apply_environment, every_parser, setting_of
from relay.spark import job_parser
from relay.spark import mirror as mirror_job
from relay.spark import outbox_relay as relay_job
from relay.spark import replicate as replicate_job

ROOT = Path(__file__).resolve().parents[3]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NAMED = re.compile(r"\[(RELAY_[A-Z0-9_]+)")
TABLE_ROW = re.compile(r"^\|\s*`(RELAY_[A-Z0-9_]+)`\s*\|\s*`(-[-\w]+)", re.M)


def _parsers() -> Iterator[argparse.ArgumentParser]:
    yield from every_parser(build_parser())
    yield job_parser("outbox_relay", None, relay_job.add_flags)
    yield job_parser("mirror", None, mirror_job.add_flags)
    yield job_parser("replicate", None, replicate_job.add_flags)


def _flags() -> Iterator[tuple[str, argparse.Action]]:
    """(``prog --flag``, action) of every flag that should have a variable."""
    for parser in _parsers():
        for action in parser._actions:
            if not action.option_strings:
                continue  # positional: an operand
            if isinstance(action, argparse._HelpAction | argparse._VersionAction):
                continue
            if action.required:
                continue  # an operand too: the command line must give it
            if NO_VARIABLE.keys() & set(action.option_strings):
                continue
            yield f"{parser.prog} {action.option_strings[-1]}", action


def _tables() -> dict[str, str]:
    """flag -> variable, from the configuration tables of README.md and docs/*.md."""
    rows: dict[str, str] = {}
    for doc in DOCS:
        for variable, flag in TABLE_ROW.findall(doc.read_text(encoding="utf-8")):
            rows[flag] = variable
    return rows


def test_every_flag_names_its_environment_variable() -> None:
    tables = _tables()
    missing = [
        name
        for name, action in _flags()
        if not NAMED.search(action.help or "")
        and not any(flag in tables for flag in action.option_strings)
    ]
    assert missing == []


def test_every_variable_a_flag_names_is_documented() -> None:
    documented = set(re.findall(r"`(RELAY_[A-Z0-9_]+)", "".join(d.read_text() for d in DOCS)))
    named = {v for _, action in _flags() for v in NAMED.findall(action.help or "")}
    assert named
    assert sorted(named - documented) == []


def test_every_variable_of_a_plain_flag_is_read() -> None:
    """Each variable :func:`env_flag` declares changes its flag's value: a value the flag
    cannot take is an error naming the variable, any other is taken."""
    checked = 0
    for parser in _parsers():
        for action in parser._actions:
            setting = setting_of(action)
            if setting is None or action.default is argparse.SUPPRESS:
                continue
            args = argparse.Namespace(**{a.dest: None for a in parser._actions})
            try:
                apply_environment(parser, args, {setting.env: "%%"})
            except ConfigurationError as exc:
                assert setting.env in str(exc)
            else:
                assert getattr(args, action.dest) != setting.default, setting.env
            checked += 1
    assert checked > 20


def test_the_flag_wins_over_its_variable() -> None:
    parser = build_parser()
    env = {"RELAY_PARTITIONS": "1,2", "RELAY_ONCE": "true", "RELAY_LOG_FORMAT": "json"}
    args = apply_environment(parser, parser.parse_args(["run", "--partitions", "3"]), env)
    assert (args.partitions, args.once, args.log_format) == ([3], True, "json")
    args = apply_environment(parser, parser.parse_args(["run"]), {})
    assert (args.partitions, args.once, args.log_format) == (None, False, "text")


def test_a_variable_only_applies_to_the_subcommand_that_runs() -> None:
    parser = build_parser()
    env = {"RELAY_CHAOS_TOPIC": "chaos", "RELAY_DEAD_LETTERS_TOPIC": "orders"}
    args = apply_environment(parser, parser.parse_args(["dead-letters", "list"]), env)
    assert args.topic == "orders"
    args = apply_environment(parser, parser.parse_args(["dead-letters", "list", "--mirror"]), {})
    assert args.source == "mirror"
    env = {"RELAY_DEAD_LETTERS_SOURCE": "Mirror"}
    args = apply_environment(parser, parser.parse_args(["dead-letters", "list"]), env)
    assert args.source == "mirror"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"RELAY_LOG_LEVEL": "loud"}, "RELAY_LOG_LEVEL must be one of DEBUG, INFO"),
        ({"RELAY_ONCE": "maybe"}, "RELAY_ONCE must be true or false"),
        ({"RELAY_PARTITIONS": "a,b"}, "RELAY_PARTITIONS: expected comma-separated"),
        ({"RELAY_PROGRESS_INTERVAL_S": "0"}, "RELAY_PROGRESS_INTERVAL_S must be positive"),
    ],
)
def test_a_bad_variable_is_one_clear_error(env: dict[str, str], message: str) -> None:
    parser = build_parser()
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        apply_environment(parser, parser.parse_args(["run"]), env)
