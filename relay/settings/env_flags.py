"""A command's own flags (``--log-level``, ``--once``, ``--partitions``, a subcommand's
options), each with a ``RELAY_*`` variable, declared as a :class:`~relay.settings.spec.Setting`
the flag is made from.

The settings of the command families (:mod:`relay.settings.relay`, ``mirror``,
``replicate``) are read by their loaders; a command's own flags are read here:
:func:`env_flag` adds the flag, its help ends with its variable and its default
(``[RELAY_ONCE=false]``, the same shape as the settings'), and :func:`apply_environment`
fills it in after parsing when the flag is not given, reading the variable the same way
(:class:`~relay.settings.spec.Given`): the flag wins, a bad value is an error naming the
variable. The few flags that must be typed each time (``--yes``) say so in
:data:`NO_VARIABLE` instead.
"""

from __future__ import annotations

import argparse
import os
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from relay.runtime import logs
from relay.settings.spec import Given, Invalid, Setting, boolean

NO_VARIABLE: dict[str, str] = {
    "--yes": "a confirmation is given on each command line; from the environment it would "
    "confirm every change without anyone reading what it does",
    "--process-transactions": "`relay run`'s default, still accepted from command lines "
    "written when it was an opt-in; RELAY_PROCESS_TRANSACTIONS is --partition-transactions'",
}
"""Flags without a variable, and why (tests/unit/cli checks every other flag has one)."""


_SETTINGS: weakref.WeakKeyDictionary[argparse.Action, Setting] = weakref.WeakKeyDictionary()


def env_flag(
    container: argparse._ActionsContainer,
    *names: str,
    env: str,
    default: object = None,
    shown: str | None = None,
    parse: Callable[[str], object] | None = None,
    copy: bool = False,
    **kwargs: Any,
) -> argparse.Action:
    """``container.add_argument(*names, **kwargs)`` with the variable ``env``: its help
    ends ``[env=default]``, or ``[env; default: shown]`` (no default when ``shown`` is
    empty). ``parse``: how the variable's text (and, unless ``type`` is given, the flag's)
    becomes the value; without it, the flag's own type and choices. ``copy``: a second
    place for a flag of the same ``dest`` (a global flag on a subcommand), which leaves
    the value alone unless given."""
    switch = kwargs.get("action") in ("store_true", "store_const")
    if parse is not None and not switch and "type" not in kwargs:
        kwargs["type"] = _flag_type(parse)
    help_text = kwargs.pop("help", "")
    # None: not given (apply_environment fills it in); SUPPRESS: not even None
    kwargs["default"] = argparse.SUPPRESS if copy else None
    action = container.add_argument(*names, **kwargs)
    setting = Setting(
        action.dest,
        env,
        names[-1],
        parse or (boolean if switch else _action_parse(action)),
        default,
        help_text,
        default_doc=shown or None,
        dest_name=action.dest,
    )
    action.help = setting.help_text().replace("%", "%%")
    _SETTINGS[action] = setting
    return action


def _flag_type(parse: Callable[[str], object]) -> Callable[[str], object]:
    def convert(text: str) -> object:
        try:
            return parse(text)
        except Invalid as exc:
            raise argparse.ArgumentTypeError(str(exc).removeprefix(": ")) from None

    return convert


def _action_parse(action: argparse.Action) -> Callable[[str], object]:
    """The flag's own type and choices, as the parse of its variable."""

    def parse(raw: str) -> object:
        try:
            value = action.type(raw) if callable(action.type) else raw
        except (argparse.ArgumentTypeError, ValueError, TypeError) as exc:
            raise Invalid(f": {exc}") from None
        if action.choices is not None and value not in action.choices:
            allowed = ", ".join(map(str, action.choices))
            raise Invalid(f"must be one of {allowed}, got {raw!r}")
        return value

    return parse


def setting_of(action: argparse.Action) -> Setting | None:
    return _SETTINGS.get(action)


def subparsers_of(parser: argparse.ArgumentParser) -> Iterator[argparse._SubParsersAction[Any]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield action


def every_parser(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """``parser`` and every subcommand's parser under it, depth first."""
    yield parser
    for subparsers in subparsers_of(parser):
        seen: set[int] = set()
        for sub in subparsers.choices.values():
            if id(sub) not in seen:  # an alias names the same parser twice
                seen.add(id(sub))
                yield from every_parser(sub)


def apply_environment(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    environ: Mapping[str, str] | None = None,
) -> argparse.Namespace:
    """Fill in each :func:`env_flag` flag that was not given, from its variable or its
    default, along the subcommands ``args`` chose. A malformed value is a
    ConfigurationError naming the variable."""
    env = os.environ if environ is None else environ
    given = Given(None, env)
    for action in parser._actions:
        setting = _SETTINGS.get(action)
        if setting is None or getattr(args, action.dest, None) is not None:
            continue
        setattr(args, action.dest, given.value(setting))
    for subparsers in subparsers_of(parser):
        chosen = getattr(args, subparsers.dest, None)
        if chosen is not None and chosen in subparsers.choices:
            apply_environment(subparsers.choices[chosen], args, env)
    return args


# -- the global flags: before or after the subcommand -------------------------------------


def add_global_flags(parser: argparse.ArgumentParser, *, copy: bool = False) -> None:
    """``--log-level``, ``--log-format`` and ``--traceback``. ``copy``: on a subcommand's
    parser, where the flag only overrides what was given before the subcommand."""
    add_log_flags(parser, copy=copy)
    env_flag(
        parser,
        "--traceback",
        env="RELAY_TRACEBACK",
        default=False,
        action="store_true",
        help="show tracebacks of errors",
        copy=copy,
    )


def add_log_flags(parser: argparse.ArgumentParser, *, copy: bool = False) -> None:
    env_flag(
        parser,
        "--log-level",
        env="RELAY_LOG_LEVEL",
        default="INFO",
        type=str.upper,
        choices=logs.LEVELS,
        help="DEBUG, INFO, WARNING or ERROR",
        copy=copy,
    )
    env_flag(
        parser,
        "--log-format",
        env="RELAY_LOG_FORMAT",
        default="text",
        type=str.lower,
        choices=logs.FORMATS,
        help="text (one line a record) or json (one object a line)",
        copy=copy,
    )


def share_global_flags(parser: argparse.ArgumentParser) -> None:
    """Accept the global flags after any subcommand too (``relay run --once --log-level
    debug``); the last one given wins."""
    for sub in every_parser(parser):
        if sub is not parser:
            add_global_flags(sub, copy=True)


def add_yes_flag(container: argparse._ActionsContainer, what: str) -> None:
    """``--yes``: the one flag without a variable (:data:`NO_VARIABLE`)."""
    container.add_argument("--yes", action="store_true", help=what)
