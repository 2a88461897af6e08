"""Each setting declared once, and everything else derived from that declaration.

A :class:`Setting` names a value once: the field it fills, its ``RELAY_*`` variable, its
flag, how text becomes the value, its default (or, for one computed at run time, how it is
computed), its help and whether it is a secret. From it come

- the flag (:func:`add_flags`): its help ends with the variable and the true default,
  ``[RELAY_BATCH_SIZE=5000]`` or ``[RELAY_POSITIONS_GROUP; default: ...]``;
- the reading (:class:`Given`): the flag wins over the variable, else the default;
- the error messages: they name what the user typed, ``--batch-size`` or
  ``RELAY_BATCH_SIZE``;
- the description that is safe to log (:meth:`Setting.shown`: secrets masked).

A flag's ``dest`` is its variable's name without ``RELAY_``, lowercase
(``RELAY_MIRROR_BATCH_SIZE`` is ``args.mirror_batch_size``), in every command family, so
a loader takes ``vars(args)`` as it is.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from relay.errors import ConfigurationError
from relay.runtime.secrets import MASK

ENV_PREFIX = "RELAY_"
N = TypeVar("N", int, float)


class Invalid(ValueError):
    """A value a parser refuses. The message says why (``must be positive, got -5``); the
    setting's flag or variable, whichever was given, goes in front of it."""


def named(origin: str, reason: str) -> str:
    """``--batch-size must be positive, got -5``; ``RELAY_PARTITIONS: expected ...``."""
    return f"{origin}{'' if reason.startswith(':') else ' '}{reason}"


@dataclass(frozen=True, slots=True)
class Setting:
    name: str  # the settings field it fills, e.g. batch_size
    env: str  # its variable, e.g. RELAY_BATCH_SIZE
    flag: str | None  # its flag, e.g. --batch-size (None: only the variable)
    parse: Callable[[str], Any]  # text to value; raises Invalid
    default: Any = None  # the value when neither is given
    help: str = ""
    default_doc: str | None = None  # a default computed at run time: how
    secret: bool = False  # never shown: not in help, logs or errors
    metavar: str | None = None
    const: bool | None = None  # a switch: the flag stores this (parse: boolean)
    repeatable: bool = False  # name=value pairs: the flag many times, the variable a=b;c=d
    show: Callable[[Any], str] | None = None  # how a secret is described (default: ***)
    dest_name: str | None = None  # a command's own flag: its dest (settings: the variable's)

    @property
    def dest(self) -> str:
        return self.dest_name or self.env.removeprefix(ENV_PREFIX).lower()

    def default_text(self) -> str | None:
        """The default as help shows it; None when there is none."""
        if self.default_doc is not None:
            return self.default_doc
        default = self.default
        if default is None or (isinstance(default, str | tuple | list) and not default):
            return None
        if isinstance(default, bool):
            return str(default).lower()
        return str(default)

    def help_text(self) -> str:
        shown = self.default_text()
        if self.repeatable:
            suffix = f"[{self.env}='a=b;c=d']"
        elif shown is None:
            suffix = f"[{self.env}]"
        elif self.default_doc is not None:
            suffix = f"[{self.env}; default: {shown}]"
        else:
            suffix = f"[{self.env}={shown}]"
        return f"{self.help} {suffix}" if self.help else suffix

    def shown(self, value: Any) -> str:
        """``value`` as text that is safe to log."""
        if value is None:
            return f"({self.default_doc})" if self.default_doc else "(unset)"
        if self.secret:
            return MASK if self.show is None else self.show(value)
        if self.show is not None:
            return self.show(value)
        if isinstance(value, tuple | list):
            return ",".join(map(str, value))
        return str(value)

    def flag_type(self) -> Callable[[str], Any]:
        """The flag's argparse ``type``: the same parse, refusals as argparse's."""

        def convert(text: str) -> Any:
            try:
                return self.parse(text)
            except Invalid as exc:
                raise argparse.ArgumentTypeError(str(exc).removeprefix(": ")) from None

        convert.__name__ = self.name  # argparse names it in "invalid <name> value"
        return convert


def add_flags(
    container: argparse._ActionsContainer, settings: Iterable[Setting]
) -> list[argparse.Action]:
    """One flag for each setting that has one, with ``dest`` :attr:`Setting.dest`, default
    None (not given: :class:`Given` reads the variable) and the help :meth:`help_text`."""
    added = []
    for setting in settings:
        if setting.flag is None:
            continue
        kwargs: dict[str, Any] = {"dest": setting.dest, "help": _escape(setting.help_text())}
        if setting.const is not None:
            kwargs.update(action="store_const", const=setting.const)
        elif setting.repeatable:
            kwargs.update(action="append", metavar=setting.metavar)
        else:
            kwargs.update(type=setting.flag_type(), metavar=setting.metavar)
        added.append(container.add_argument(setting.flag, default=None, **kwargs))
    return added


def _escape(help_text: str) -> str:
    return help_text.replace("%", "%%")  # argparse formats help with %


class Given:
    """What the user gave: flags (``vars(args)``: by dest, None when not given) over the
    environment."""

    __slots__ = ("_env", "_flags")

    def __init__(
        self, flags: Mapping[str, object] | None = None, environ: Mapping[str, str] | None = None
    ) -> None:
        self._flags = {k: v for k, v in (flags or {}).items() if v is not None and v != []}
        self._env = os.environ if environ is None else environ

    def origin(self, setting: Setting) -> str | None:
        """The flag or the variable the value comes from; None: neither was given."""
        if setting.dest in self._flags:
            return setting.flag or setting.env
        return setting.env if self._env.get(setting.env) is not None else None

    def value(self, setting: Setting) -> Any:
        """The flag's value, else the variable's, parsed, else the default. A repeatable
        setting's: the flag's pairs alone (its variable is read with :meth:`environ`)."""
        if setting.repeatable:
            return self._flags.get(setting.dest, ())
        if setting.dest in self._flags:
            given = self._flags[setting.dest]
            if not isinstance(given, str):
                return given  # parsed by the flag's type, or a switch's constant
            return self._parse(setting, setting.flag or setting.env, given)
        raw = self._env.get(setting.env)
        if raw is None:
            return setting.default
        return self._parse(setting, setting.env, raw)

    def environ(self, setting: Setting) -> str | None:
        """The variable alone (a repeatable setting's variable is read beside its flag)."""
        return self._env.get(setting.env)

    def required(self, setting: Setting, what: str, hint: str = "") -> Any:
        """The value; a ConfigurationError saying how to give it (``hint``: more on what
        to give) when it is missing."""
        empty = setting.dest not in self._flags and self.environ(setting) == ""
        value = None if empty else self.value(setting)
        if value is None or value == "":
            how = setting.env + (f" or {setting.flag}" if setting.flag else "")
            raise ConfigurationError(f"no {what}: set {how}{f' ({hint})' if hint else ''}")
        return value

    def values(self, settings: Iterable[Setting]) -> dict[str, Any]:
        """``{name: value}`` of ``settings``, defaults included."""
        return {setting.name: self.value(setting) for setting in settings}

    @staticmethod
    def _parse(setting: Setting, origin: str, raw: str) -> Any:
        try:
            return setting.parse(raw)
        except Invalid as exc:
            raise ConfigurationError(named(origin, str(exc))) from None


def describe(settings: Iterable[Setting], source: object) -> dict[str, str]:
    """``{name: shown value}`` of ``settings`` read from ``source``'s attributes."""
    return {s.name: s.shown(getattr(source, s.name)) for s in settings}


def declared_twice(settings: Iterable[Setting]) -> list[str]:
    """Variables or dests that more than one of ``settings`` declares (a flag may repeat in
    another family: `relay mirror --batch-size` is not `relay run --batch-size`)."""
    seen: dict[str, Setting] = {}
    twice = []
    for setting in settings:
        for key in (setting.env, setting.dest):
            if key in seen and seen[key] is not setting:
                twice.append(key)
            seen.setdefault(key, setting)
    return sorted(set(twice))


# -- parsers: text to value, or Invalid saying why ------------------------------------------


def text(raw: str) -> str:
    return raw


def non_empty(raw: str) -> str:
    if not raw.strip():
        raise Invalid("must not be empty")
    return raw


def uri_reference(raw: str) -> str:
    """A URI-reference (RFC 3986): not empty, no whitespace or control characters."""
    if not raw:
        raise Invalid("must not be empty")
    if any(char.isspace() or not char.isprintable() for char in raw):
        raise Invalid("must be a URI-reference: no spaces or control characters")
    return raw


def kafka_name(raw: str) -> str:
    """A name Kafka accepts in a group instance id and a transactional id: letters,
    digits, ``.``, ``_`` and ``-``, at most 200 characters."""
    if (
        not raw
        or len(raw) > 200
        or not all(c.isascii() and (c.isalnum() or c in "._-") for c in raw)
    ):
        raise Invalid(f"must be 1 to 200 letters, digits, '.', '_' or '-', got {raw!r}")
    return raw


def names(raw: str) -> tuple[str, ...]:
    """``a, b`` as ``("a", "b")``."""
    return tuple(part.strip() for part in raw.split(",") if part.strip())


def whole(raw: str) -> int:
    """A whole number above 0."""
    return _positive(_number(raw, int, "a whole number"))


def seconds(raw: str) -> float:
    """A number of seconds above 0."""
    return _positive(_number(raw, float, "a number of seconds"))


def whole_or_zero(raw: str) -> int:
    return _at_least_zero(_number(raw, int, "a whole number"))


def seconds_or_zero(raw: str) -> float:
    return _at_least_zero(_number(raw, float, "a number of seconds"))


def port(raw: str) -> int:
    value = whole(raw)
    if value > 65535:
        raise Invalid(f"must be a TCP port (1..65535), got {value}")
    return value


def boolean(raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise Invalid(f"must be true or false, got {raw!r}")


def choice(*choices: str) -> Callable[[str], str]:
    """One of ``choices``, in any case."""

    def parse(raw: str) -> str:
        value = raw.strip().lower()
        if value not in choices:
            raise Invalid(f"must be one of {', '.join(choices)}, got {raw!r}")
        return value

    return parse


def _number(raw: str, kind: type[N], what: str) -> N:
    try:
        return kind(raw)
    except ValueError:
        raise Invalid(f"must be {what}, got {raw!r}") from None


def _positive(value: N) -> N:
    if value <= 0:
        raise Invalid(f"must be positive, got {value}")
    return value


def _at_least_zero(value: N) -> N:
    if value < 0:
        raise Invalid(f"must be 0 or more, got {value}")
    return value
