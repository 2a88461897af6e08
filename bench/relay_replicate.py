"""`relay replicate` as a :class:`bench.replication.Replicator`: the process MirrorMaker 2
is compared with (bench/mirrormaker.py :func:`~bench.mirrormaker.compare`).

Each :class:`RelayReplicate` is one measured run: continuous ``relay replicate`` (a
child process, ``python -m relay.cli replicate``) from ``flow.source`` to ``flow.target``
of ``flow.topics``, the target topic being PREFIX + the source topic (the clusters are
distinct, so no prefix is needed; one is used to tell the copies apart from MirrorMaker
2's ``source.<topic>`` on the same target broker). Its group (the positions on the
target) and its transactional ids are the run's own, and stay the same across the
restarts of the kill schedule, so that a restarted process fences the killed one and
resumes from the positions committed on the target.

``start`` returns once the process replicates: its ``/readyz`` (``--metrics-port``)
answers 200 with every source partition of the flow known to it, i.e. each partition's
producer has fenced the previous instance and read its position on the target (the
same point MirrorMaker 2's ``start`` waits for is sooner: its target topic existing).
``kill`` is SIGKILL, ``stop`` is SIGTERM (open transactions finished) and a wait.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request

from confluent_kafka.admin import AdminClient

from relay.devenv.cli_runner import relay_command
from relay.devenv.ports import free_ports

from .common import ROOT, log, run_id
from .replication import Flow

PREFIX = "relay."
"""Target topic = PREFIX + source topic (``--target-prefix``)."""
LOG_LEVEL = "INFO"
"""Start-up lines only (ready, the position); nothing is logged per batch at INFO."""
_COPIED = re.compile(r"^relay_replicate_records_copied_total\{(.*)\}")
_LABEL = re.compile(r'(\w+)="([^"]*)"')


class RelayReplicate:
    """Continuous `relay replicate` for one Flow, as a child process."""

    def __init__(self, flow: Flow, *, extra_args: tuple[str, ...] = ()) -> None:
        self.flow = flow
        self.id = run_id()
        self.group = f"bench-replicate-{self.id}"
        self.dir = flow.workdir / f"relay-replicate-{self.id}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.extra_args = extra_args
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.starts = 0
        self.ready_s: list[float] = []
        """Seconds from each spawn until /readyz answered 200 for every partition."""
        self.exit_codes: list[int] = []
        """Exit code of each process that ended (-9: killed; 0: a clean stop)."""
        self._partitions: set[tuple[str, int]] | None = None

    def target_topic(self, topic: str) -> str:
        return PREFIX + topic

    def transactional_ids(self) -> list[str]:
        """The transactional ids this run's producers use on the target (one a partition)."""
        return sorted(f"{self.group}-{self.target_topic(t)}-{p}" for t, p in self.partitions())

    def partitions(self) -> set[tuple[str, int]]:
        """(topic, partition) of every source partition of the flow."""
        if self._partitions is None:
            admin = AdminClient({"bootstrap.servers": self.flow.source})
            found = admin.list_topics(timeout=10).topics
            self._partitions = {
                (topic, p) for topic in self.flow.topics for p in found[topic].partitions
            }
        return self._partitions

    def command(self) -> list[str]:
        return relay_command(*self.arguments())

    def arguments(
        self, source: str | None = None, target: str | None = None, port: str | None = None
    ) -> list[str]:
        """`relay replicate`'s arguments (with the endpoints given, for a report)."""
        return [
            *("replicate", "--log-level", LOG_LEVEL),
            *("--source-bootstrap-servers", source or self.flow.source),
            *("--target-bootstrap-servers", target or self.flow.target),
            *("--topics", ",".join(self.flow.topics)),
            *("--target-prefix", PREFIX),
            *("--group", self.group),
            *("--transactional-id-prefix", self.group),
            *("--metrics-host", "127.0.0.1", "--metrics-port", port or str(self.port)),
            *self.extra_args,
        ]

    def start(self, timeout: float = 120.0) -> None:
        """Launch `relay replicate`; return once every source partition is being copied."""
        self.port = free_ports(1)[0]
        # Nothing of the caller's RELAY_* environment: the flags are the whole configuration.
        env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
        started = time.monotonic()
        with (self.dir / "replicate.log").open("ab") as out:
            out.write(f"--- start {self.starts + 1}: {' '.join(self.command())}\n".encode())
            out.flush()
            self.proc = subprocess.Popen(
                self.command(), cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
            )
        self.starts += 1
        wanted = self.partitions()
        while not self._ready(wanted):
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"relay replicate exited {self.proc.returncode}; see {self.dir}/replicate.log"
                )
            if time.monotonic() - started > timeout:
                raise RuntimeError(f"relay replicate not ready in {timeout:.0f} s; see {self.dir}")
            time.sleep(0.05)
        self.ready_s.append(round(time.monotonic() - started, 2))

    def _get(self, path: str) -> tuple[int, str]:
        url = f"http://127.0.0.1:{self.port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                return int(answer.status), answer.read().decode(errors="replace")
        except urllib.error.HTTPError as exc:
            return exc.code, ""
        except (OSError, urllib.error.URLError):
            return 0, ""  # not listening yet

    def _ready(self, wanted: set[tuple[str, int]]) -> bool:
        """Every wanted partition known to the process (its counter exists: the thread
        began), then /readyz 200 (each of them fenced, its position read)."""
        status, metrics = self._get("/metrics")
        if status != 200:
            return False
        known = set()
        for line in metrics.splitlines():
            found = _COPIED.match(line)
            if found:
                labels = dict(_LABEL.findall(found.group(1)))
                known.add((labels.get("topic", ""), int(labels.get("partition", "-1"))))
        return wanted <= known and self._get("/readyz")[0] == 200

    def _ended(self) -> None:
        if self.proc is not None and self.proc.returncode is not None:
            self.exit_codes.append(self.proc.returncode)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
            self._ended()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                log("relay replicate did not stop in 60 s; killing it")
                self.kill()
                return
            self._ended()

    def logged(self, needle: str) -> int:
        """How many lines of the process's log (every start) contain ``needle``."""
        path = self.dir / "replicate.log"
        if not path.exists():
            return 0
        return sum(needle in line for line in path.read_text(errors="replace").splitlines())
