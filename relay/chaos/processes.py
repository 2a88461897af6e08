"""Processes under test (relays, mirrors, Spark jobs) and the supervisor that restarts them.

Every process runs in a session of its own, so a kill reaches its whole tree (a Spark
job's JVM and Python workers too) and nothing else. Each incarnation writes its output to
a log file of its own.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from relay.chaos.process_tree import descendants, identified, kill_identified
from relay.postgres.migrations import PROJECT_ROOT
from relay.runtime.clock import Clock

log = logging.getLogger(__name__)

TIMED_OUT = -1
"""run_logged's exit code for a command killed when it outlasted its timeout."""


def run_logged(argv: Sequence[str], env: Mapping[str, str], log_path: Path, timeout: float) -> int:
    """Run ``argv`` to its end from the project's root (a `relay` command a run or its
    operator runs once), its output appended to ``log_path``; its exit code, or
    TIMED_OUT when it was killed after ``timeout`` seconds."""
    with log_path.open("ab") as out:
        try:
            return subprocess.run(
                list(argv),
                env=dict(env),
                cwd=PROJECT_ROOT,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                check=False,
            ).returncode
        except subprocess.TimeoutExpired:
            return TIMED_OUT


@dataclass(frozen=True, slots=True)
class Command:
    argv: Sequence[str]
    env: Mapping[str, str]
    cwd: Path
    trap: Path | None = None  # see ManagedProcess.arm_trap


class ManagedProcess:
    """One incarnation of a process under test."""

    def __init__(
        self, name: str, command: Command, log_path: Path, trap: Path | None = None
    ) -> None:
        self.name = name
        self.log_path = log_path
        self.trap = trap
        with log_path.open("ab") as out:
            self._popen = subprocess.Popen(
                list(command.argv),
                env=dict(command.env),
                cwd=command.cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.pid = self._popen.pid

    def arm_trap(self) -> bool:
        """Let the process stop itself at its failpoint (``RELAY_FAILPOINTS`` names
        ``once=<trap>``, a file that exists, so the point does not fire until deleted)."""
        if self.trap is None:
            return False
        self.trap.unlink(missing_ok=True)
        return True

    def disarm_trap(self) -> bool:
        """True when disarmed before the process reached the point (it then never will)."""
        if self.trap is None:
            return True
        try:
            os.close(os.open(self.trap, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return False
        return True

    def poll(self) -> int | None:
        return self._popen.poll()

    @property
    def alive(self) -> bool:
        return self._popen.poll() is None

    def signal_group(self, sig: signal.Signals) -> bool:
        """Send ``sig`` to the whole process group; False when it is gone. Once the
        process has been waited for, its pid (its group's id) may be another process's,
        so nothing is sent then."""
        if self._popen.poll() is not None:
            return False
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            return False
        return True

    def kill_tree(self) -> None:
        """SIGKILL the process, its group and every descendant (PySpark's daemon moves
        itself and its workers into a process group of their own)."""
        family = identified(descendants(self.pid))
        self.signal_group(signal.SIGKILL)
        kill_identified(family)

    def wait(self, timeout: float) -> int | None:
        try:
            return self._popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, timeout: float) -> int:
        """SIGTERM (and SIGCONT, in case it is paused); SIGKILL after ``timeout``."""
        family = identified(descendants(self.pid))
        self.signal_group(signal.SIGTERM)
        self.signal_group(signal.SIGCONT)
        code = self.wait(timeout)
        self.kill_tree()  # whatever is left, e.g. a Spark JVM or Python workers
        kill_identified(family)
        return code if code is not None else self._popen.wait()

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""


@dataclass
class Slot:
    """A role (``relay``, ``mirror-1``, ``spark``) that the supervisor keeps filled."""

    name: str
    command: Callable[[int], Command]  # incarnation number -> command
    restart_delay: Callable[[], float]
    current: ManagedProcess | None = None
    starts: int = 0
    exits: Counter[str] = field(default_factory=Counter)
    next_start: float = 0.0
    enabled: bool = True


class Supervisor:
    """Restarts the process of every enabled slot when it exits, after its delay.

    Processes that a fault replaced while they were paused (zombies) are watched too,
    and their exit codes recorded separately, by slot (``relay: exit 5``).
    """

    def __init__(self, log_dir: Path, clock: Clock, interval: float = 0.2) -> None:
        self.log_dir = log_dir
        self.clock = clock
        self._interval = interval
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.slots: dict[str, Slot] = {}
        self.zombies: list[ManagedProcess] = []
        self.zombie_exits: Counter[str] = Counter()

    def add(self, slot: Slot) -> None:
        with self._lock:
            self.slots[slot.name] = slot

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="chaos-supervisor", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self.clock.wait(self._interval, self._stop):
            self.tick()

    def tick(self) -> None:
        with self._lock:
            now = self.clock.monotonic()
            for slot in self.slots.values():
                self._tend(slot, now)
            for zombie in list(self.zombies):
                code = zombie.poll()
                if code is not None:
                    self.zombies.remove(zombie)
                    self.zombie_exits[f"{zombie.name}: {_exit_name(code)}"] += 1
                    log.info("zombie %s (pid %d) exited: %s", zombie.name, zombie.pid, code)

    def _tend(self, slot: Slot, now: float) -> None:
        if slot.current is not None:
            code = slot.current.poll()
            if code is None:
                return
            slot.exits[_exit_name(code)] += 1
            log.debug("%s (pid %d) exited: %s", slot.name, slot.current.pid, code)
            slot.current = None
            slot.next_start = now + slot.restart_delay()
        if slot.enabled and now >= slot.next_start:
            self.launch(slot)

    def launch(self, slot: Slot) -> ManagedProcess:
        with self._lock:
            slot.starts += 1
            path = self.log_dir / f"{slot.name}.{slot.starts:04d}.log"
            command = slot.command(slot.starts)
            slot.current = ManagedProcess(slot.name, command, path, command.trap)
            return slot.current

    def running(self, name: str) -> ManagedProcess | None:
        with self._lock:
            current = self.slots[name].current
            return current if current is not None and current.alive else None

    def live(self, name: str) -> list[ManagedProcess]:
        """Every live process of slot ``name``: its current one and its zombies."""
        with self._lock:
            current = self.slots[name].current
            found = [current] if current is not None and current.alive else []
            return found + [z for z in self.zombies if z.name == name and z.alive]

    def start_now(self, name: str) -> None:
        with self._lock:
            self.slots[name].next_start = 0.0

    def replace(self, name: str) -> tuple[ManagedProcess, ManagedProcess] | None:
        """Start a new instance in slot ``name`` while keeping the old one as a zombie."""
        with self._lock:
            slot = self.slots[name]
            old = slot.current
            if old is None or not old.alive:
                return None
            self.zombies.append(old)
            return old, self.launch(slot)

    def hold(self, name: str, *, kill: bool = False, timeout: float = 20.0) -> int | None:
        """Stop restarting slot ``name`` and stop its process (SIGTERM, SIGKILL after
        ``timeout``; ``kill``: SIGKILL at once), as an operator does before maintenance.
        Returns how it ended (None: none ran)."""
        with self._lock:
            slot = self.slots[name]
            slot.enabled = False
            process = slot.current
        if process is None:
            return None
        if kill:
            process.kill_tree()
        code = process.stop(timeout)
        with self._lock:
            if slot.current is process:  # else the loop saw it end first, and counted it
                slot.exits[_exit_name(code)] += 1
                slot.current = None
        return code

    def release(self, name: str) -> None:
        """Restart slot ``name`` again (at once) after :meth:`hold`."""
        with self._lock:
            slot = self.slots[name]
            slot.enabled = True
            slot.next_start = 0.0

    def shutdown(self, timeout: float = 20.0) -> None:
        """Stop restarting, then stop every process (zombies too)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            for slot in self.slots.values():
                slot.enabled = False
                if slot.current is not None:
                    code = slot.current.stop(timeout)
                    slot.exits[_exit_name(code)] += 1
                    slot.current = None
            for zombie in self.zombies:
                finished = zombie.poll()
                if finished is None:
                    zombie.stop(timeout)
                    self.zombie_exits[f"{zombie.name}: still running at the end"] += 1
                else:
                    self.zombie_exits[f"{zombie.name}: {_exit_name(finished)}"] += 1
            self.zombies.clear()


def _exit_name(code: int) -> str:
    if code < 0:
        return signal.Signals(-code).name
    return f"exit {code}"
