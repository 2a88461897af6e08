"""Watching the log of a process under test: whether a text appears in it, which
partitions it shows fenced (a new instance has taken them over), and which relay
partitions a relay holds."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from relay.publishing.partition_relay import READY as RELAY_READY
from relay.replication.startup import READY as REPLICA_READY

_ROUTE_FENCED = re.compile(rf"(\S+\[\d+\]): {re.escape(REPLICA_READY)}; copying from offset")
_RELAY_FENCED = re.compile(rf"relay partition (\d+): {re.escape(RELAY_READY)}")
_LISTED = re.compile(r"relay partitions \[([\d, ]*)\]")
_ONE = re.compile(r"relay partition (\d+)[: ]")


class LogReader:
    """A process's log file, read incrementally: each read returns the bytes appended
    since the previous one (rather than the whole file every poll)."""

    def __init__(self, path: Path, offset: int = 0) -> None:
        self._path = path
        self._offset = offset

    def read(self) -> bytes:
        try:
            with self._path.open("rb") as fh:
                fh.seek(self._offset)
                data = fh.read()
        except OSError:
            return b""
        self._offset += len(data)
        return data


class Appears:
    """Whether ``text`` occurs in what ``log`` has read so far (once true, stays true)."""

    def __init__(self, log: LogReader, text: str) -> None:
        self._log = log
        self._needle = text.encode()
        self._carry = b""  # the last len(needle) - 1 bytes: the start of a split needle
        self._found = False

    def __call__(self) -> bool:
        if not self._found:
            data = self._carry + self._log.read()
            self._found = self._needle in data
            self._carry = data[max(0, len(data) - len(self._needle) + 1) :]
        return self._found


def reader_from_now(path: Path) -> LogReader:
    """A reader of what the log at ``path`` gets from now on."""
    try:
        return LogReader(path, path.stat().st_size)
    except OSError:
        return LogReader(path)


def appears_from_now(path: Path, text: str) -> Appears:
    """Whether ``text`` newly occurs in the log at ``path``: not already complete in it
    now (an occurrence still being written counts)."""
    try:
        size = path.stat().st_size
    except OSError:
        size = 0
    start = max(0, size - len(text.encode()) + 1)
    return Appears(LogReader(path, start), text)


def relay_partitions_fenced(data: bytes) -> set[str]:
    """The relay partitions a relay's log shows it took over, fencing earlier producers
    (``relay partition 3: ready, earlier producers of this partition fenced; ...``)."""
    return set(_RELAY_FENCED.findall(data.decode(errors="replace")))


def relay_holdings(data: bytes) -> set[str]:
    """The relay partitions a relay's whole log shows it holding at its end. A relay that
    shares the partitions with the members of its group logs ``taking relay partitions
    [..]`` and gives them up (``handing ... on``, ``lost ...``, ``relay partition N
    released``); one that never logged taking any holds what it fenced."""
    return _holdings(data, "relay partition", _listed, _ONE, relay_partitions_fenced)


_SOURCE_LISTED = re.compile(r"source partitions \[(.*)\]")
_SOURCE_ONE = re.compile(r"source partition (\S+\[\d+\])(?::| released: )")


def source_holdings(data: bytes) -> set[str]:
    """The source partitions (``topic[p]``) a continuous replicator's whole log shows it
    holding at its end, as :func:`relay_holdings` for a relay."""

    def listed(line: str) -> set[str]:
        found = _SOURCE_LISTED.search(line)
        return set(re.findall(r"\S+?\[\d+\]", found.group(1))) if found else set()

    return _holdings(data, "source partition", listed, _SOURCE_ONE, source_partitions_fenced)


def _holdings(
    data: bytes,
    noun: str,
    listed: Callable[[str], set[str]],
    one: re.Pattern[str],
    fenced: Callable[[bytes], set[str]],
) -> set[str]:
    held: set[str] = set()
    shared = False
    for line in data.decode(errors="replace").splitlines():
        if f"taking {noun}s [" in line:
            shared = True
            held |= listed(line)
        elif f"handing {noun}s [" in line or f"lost {noun}s [" in line:
            held -= listed(line)
        elif (found := one.search(line)) is not None:
            if " released: " in line:
                held.discard(found.group(1))
            elif "still assigned here, taking it back" in line:
                held.add(found.group(1))
    return held if shared else fenced(data)


def _listed(line: str) -> set[str]:
    found = _LISTED.search(line)
    return {p.strip() for p in found.group(1).split(",") if p.strip()} if found else set()


def source_partitions_fenced(data: bytes) -> set[str]:
    """The source partitions a replicator's log shows it took over (``chaos-accounts[2]:
    ready, earlier copiers of this partition fenced; copying from offset ...``)."""
    return set(_ROUTE_FENCED.findall(data.decode(errors="replace")))


class Fenced:
    """Which partitions the log shows fenced, as ``parse`` finds them: complete lines are
    parsed once, the last (incomplete) line at every call."""

    def __init__(self, log: LogReader, parse: Callable[[bytes], set[str]]) -> None:
        self._log = log
        self._parse = parse
        self._fenced: set[str] = set()
        self._partial = b""

    def __call__(self) -> set[str]:
        complete, _, self._partial = (self._partial + self._log.read()).rpartition(b"\n")
        self._fenced |= self._parse(complete)
        return self._fenced | self._parse(self._partial)
