"""Readiness of a long-running command (`relay run`, `relay mirror`), as ``/readyz`` says it.

Ready once the start-up checks passed and every component the command named then (each
relay partition, the mirror's consumer) is running; not ready before, nor while one of
them is retrying (a batch, a start-up, a database or broker call) or has stopped.
Liveness (``/healthz``) needs nothing here: a process that answers is alive. The HTTP
server is in :mod:`relay.runtime.metrics`; this module is pure.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Iterable


class State(enum.Enum):
    STARTING = "starting"
    RUNNING = "running"
    RETRYING = "retrying"
    STOPPED = "stopped"


class Readiness:
    """Thread-safe: the command's threads set states, the HTTP server's threads read them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._checked = False
        self._states: dict[str, State] = {}
        self._reasons: dict[str, str] = {}  # why a component retries, when told

    def checked(self, components: Iterable[str]) -> None:
        """The start-up checks passed; each of ``components`` must run to be ready."""
        with self._lock:
            self._checked = True
            for component in components:
                self._states.setdefault(component, State.STARTING)

    def set(self, component: str, state: State, reason: str = "") -> None:
        """``reason``: why it retries (shown by :meth:`check`), e.g. a topic that does not
        exist."""
        with self._lock:
            self._states[component] = state
            self._reasons[component] = reason

    def forget(self, component: str) -> None:
        """``component`` is no longer this command's (a relay partition handed on)."""
        with self._lock:
            self._states.pop(component, None)
            self._reasons.pop(component, None)

    def check(self) -> tuple[bool, str]:
        """(ready, why): ``why`` names each component that is not running."""
        with self._lock:
            if not self._checked:
                return False, "start-up checks have not passed yet"
            waiting = [
                f"{name} {state.value}" + (f" ({why})" if (why := self._reasons.get(name)) else "")
                for name, state in sorted(self._states.items())
                if state is not State.RUNNING
            ]
        return (False, ", ".join(waiting)) if waiting else (True, "ready")
