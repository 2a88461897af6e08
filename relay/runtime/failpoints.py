"""Named fault-injection points for crash and zombie testing.

The core calls :meth:`Failpoints.hit` at the dangerous points of a batch. Nothing
happens unless ``RELAY_FAILPOINTS`` names the point, e.g.::

    RELAY_FAILPOINTS="after_produce=kill"               # SIGKILL this process there
    RELAY_FAILPOINTS="before_commit=stop,partition=3"   # SIGSTOP itself (a zombie to fence)
    RELAY_FAILPOINTS="after_commit=raise,once=/tmp/f"   # raise once, across processes
    RELAY_FAILPOINTS="before_commit=hold,once=/tmp/f"   # block there until /tmp/f.release

Several specs are separated by ``;``. ``once=PATH`` fires only for the process that
creates PATH first, and writes its pid there. ``hold`` (which needs ``once``) blocks the
calling thread until a file ``PATH.release`` exists, while the process's other threads
(librdkafka's among them) go on: a transaction kept open as long as a test needs.

Points: ``startup`` (earlier producers fenced, position read, the ``relay partition N:
ready, ...`` line logged, nothing published), ``after_produce`` (records sent inside the
open Kafka transaction), ``before_commit`` (same place, for pausing), ``after_commit``
(Kafka committed, DB housekeeping not done).

The mirror (``relay mirror``, ``jobs/mirror.py``) has points of its own, where
``partition`` is the Kafka partition: ``mirror_before_apply`` (a batch fetched and
decoded, no database transaction open yet), ``mirror_after_apply`` (rows, dead letters
and the offset written, the database transaction not yet committed) and
``mirror_after_commit``.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from relay.errors import ConfigurationError, FailpointError

POINTS = frozenset(
    {
        "startup",
        "after_produce",
        "before_commit",
        "after_commit",
        "mirror_before_apply",
        "mirror_after_apply",
        "mirror_after_commit",
    }
)
ACTIONS = frozenset({"kill", "stop", "raise", "hold"})
RELEASE_SUFFIX = ".release"  # `hold` ends when PATH + this exists
_HOLD_POLL_S = 0.05
ENV_VAR = "RELAY_FAILPOINTS"


@dataclass(frozen=True, slots=True)
class FailpointSpec:
    point: str
    action: str
    partition: int | None = None
    once_path: str | None = None


def parse(text: str) -> tuple[FailpointSpec, ...]:
    specs: list[FailpointSpec] = []
    for chunk in filter(None, (c.strip() for c in text.split(";"))):
        head, *options = (part.strip() for part in chunk.split(","))
        point, _, action = head.partition("=")
        if point not in POINTS or action not in ACTIONS:
            raise ConfigurationError(
                f"{ENV_VAR}: {chunk!r} is not point=action with point in {sorted(POINTS)} "
                f"and action in {sorted(ACTIONS)}"
            )
        partition: int | None = None
        once_path: str | None = None
        for option in options:
            name, _, value = option.partition("=")
            if name == "partition" and value.isdigit():
                partition = int(value)
            elif name == "once" and value:
                once_path = value
            else:
                raise ConfigurationError(f"{ENV_VAR}: unknown option {option!r} in {chunk!r}")
        if action == "hold" and once_path is None:
            raise ConfigurationError(f"{ENV_VAR}: {chunk!r}: hold needs once=PATH")
        specs.append(FailpointSpec(point, action, partition, once_path))
    return tuple(specs)


class FailpointHook(Protocol):
    """What the cores call at their dangerous points (:class:`Failpoints`, or a test's)."""

    def hit(self, point: str, partition: int) -> None: ...


class Failpoints:
    __slots__ = ("_specs",)

    def __init__(self, specs: tuple[FailpointSpec, ...] = ()) -> None:
        self._specs = specs

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Failpoints:
        env = os.environ if environ is None else environ
        return cls(parse(env.get(ENV_VAR, "")))

    def hit(self, point: str, partition: int) -> None:
        for spec in self._specs:
            if spec.point != point or spec.partition not in (None, partition):
                continue
            if spec.once_path is not None and not _claim(spec.once_path):
                continue
            if spec.action == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            elif spec.action == "stop":
                os.kill(os.getpid(), signal.SIGSTOP)
            elif spec.action == "hold" and spec.once_path is not None:
                release = spec.once_path + RELEASE_SUFFIX
                while not os.path.exists(release):
                    time.sleep(_HOLD_POLL_S)
            else:
                raise FailpointError(f"failpoint {point} fired on relay partition {partition}")


def _claim(path: str) -> bool:
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    try:
        os.write(fd, str(os.getpid()).encode())  # tells a test which process fired
    finally:
        os.close(fd)
    return True


NO_FAILPOINTS = Failpoints()  # no specs: never fires
