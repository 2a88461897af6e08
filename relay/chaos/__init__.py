"""Chaos harness: prove exactly-once delivery under faults (``relay chaos``, docs/chaos.md).

:mod:`~relay.chaos.workload` writes as a service would, :mod:`~relay.chaos.faults` and
:mod:`~relay.chaos.injector` break things (watching logs with :mod:`~relay.chaos.logwatch`),
:mod:`~relay.chaos.checker` and :mod:`~relay.chaos.replica_checker` (pure) and
:mod:`~relay.chaos.checker_inputs` judge independently of the relay's, the mirror's and the
replicator's own adapters, :mod:`~relay.chaos.harness` runs them together
(:mod:`~relay.chaos.config`) on servers of its own (:mod:`~relay.devenv.private`), with the
processes under test set up by :mod:`~relay.chaos.preparation`, supervised by
:mod:`~relay.chaos.processes` and drained at the end by :mod:`~relay.chaos.drain`;
:mod:`~relay.chaos.report` gives the figures.
"""
