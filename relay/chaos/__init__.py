"""Chaos harness: prove exactly-once delivery under faults (``relay chaos``, docs/chaos.md).

:mod:`~relay.chaos.workload` writes, :mod:`~relay.chaos.faults` and
:mod:`~relay.chaos.injector` break things, :mod:`~relay.chaos.checker` and
:mod:`~relay.chaos.readers` judge independently, :mod:`~relay.chaos.harness` runs them
together on servers of its own (:mod:`~relay.chaos.servers`, :mod:`~relay.chaos.setup`,
:mod:`~relay.chaos.processes`).
"""
