"""Flags that are not settings of the loader, and the ``RELAY_*`` variable of each.

A setting's flag (``--batch-size``) defaults to None and :mod:`relay.settings.loader` reads
its variable. Every other flag (``--log-level``, ``--once``, ``--partitions``, a
subcommand's own options) is added here with :func:`env_flag`: its variable is named in
its help (``[RELAY_ONCE=false]``, the same shape as the settings' flags) and
:func:`apply_environment` fills it in after parsing when the flag is not given. So every
flag has a variable, and the flag wins. The few flags that must be typed each time
(``--yes``) say so in :data:`NO_VARIABLE` instead.
"""

from __future__ import annotations

import argparse
import os
import weakref
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from relay.errors import ConfigurationError
from relay.runtime import logs
from relay.settings.loader import boolean

NO_VARIABLE: dict[str, str] = {
    "--yes": "a confirmation is given on each command line; from the environment it would "
    "confirm every change without anyone reading what it does",
}
"""Flags without a variable, and why (tests/unit/cli checks every other flag has one)."""


@dataclass(frozen=True, slots=True)
class Variable:
    name: str  # e.g. RELAY_ONCE
    default: object  # the flag's value when neither the flag nor the variable is given
    parse: Callable[[str], object] | None = None  # None: the flag's own type and choices


_VARIABLES: weakref.WeakKeyDictionary[argparse.Action, Variable] = weakref.WeakKeyDictionary()


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
    ends ``[env=shown]`` (``shown`` defaults to ``default``; no ``=`` when it is empty).
    ``copy``: a second place for a flag of the same ``dest`` (a global flag on a
    subcommand), which leaves the value alone unless given."""
    given = default if shown is None else shown
    if isinstance(given, bool):
        given = str(given).lower()
    empty = given is None or (isinstance(given, str | tuple | list) and not given)
    suffix = f"[{env}]" if empty else f"[{env}={given}]"
    help_text = kwargs.pop("help", None)
    kwargs["help"] = f"{help_text} {suffix}" if help_text else suffix
    # None: not given (apply_environment fills it in); SUPPRESS: not even None
    kwargs["default"] = argparse.SUPPRESS if copy else None
    action = container.add_argument(*names, **kwargs)
    _VARIABLES[action] = Variable(env, default, parse)
    return action


def variable_of(action: argparse.Action) -> Variable | None:
    return _VARIABLES.get(action)


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
    for action in parser._actions:
        variable = _VARIABLES.get(action)
        if variable is None or getattr(args, action.dest, None) is not None:
            continue
        raw = env.get(variable.name)
        value = variable.default if raw is None else _parse(action, variable, raw)
        setattr(args, action.dest, value)
    for subparsers in subparsers_of(parser):
        chosen = getattr(args, subparsers.dest, None)
        if chosen is not None and chosen in subparsers.choices:
            apply_environment(subparsers.choices[chosen], args, env)
    return args


def _parse(action: argparse.Action, variable: Variable, raw: str) -> object:
    try:
        if variable.parse is not None:
            return variable.parse(raw)
        if action.nargs == 0:  # a switch: --once, --traceback
            return action.const if boolean(variable.name, raw) else variable.default
        value = action.type(raw) if callable(action.type) else raw
    except (argparse.ArgumentTypeError, ValueError, TypeError) as exc:
        raise ConfigurationError(f"{variable.name}: {exc}") from None
    if action.choices is not None and value not in action.choices:
        allowed = ", ".join(map(str, action.choices))
        raise ConfigurationError(f"{variable.name} must be one of {allowed}, got {raw!r}")
    return value


def choice(variable: str, choices: tuple[str, ...]) -> Callable[[str], str]:
    """A parse for a variable that picks one of ``choices`` (e.g. which flag of a group)."""

    def parse(raw: str) -> str:
        value = raw.strip().lower()
        if value not in choices:
            raise ConfigurationError(f"{variable} must be one of {', '.join(choices)}, got {raw!r}")
        return value

    return parse


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
