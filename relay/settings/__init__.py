"""Typed settings, each declared once (:mod:`~relay.settings.spec`): a CLI flag wins over
its ``RELAY_*`` variable, else the declared default.

:mod:`~relay.settings.connections` (the database, a Kafka cluster, metrics: every family's),
:mod:`~relay.settings.relay` (the forward relay), :mod:`~relay.settings.mirror` (the
mirror), :mod:`~relay.settings.replicate_spec` and :mod:`~relay.settings.replicate` (the
replicator's, declared; built and checked), :mod:`~relay.settings.status`
(`relay status`), :mod:`~relay.settings.flags` (the flags the CLI and the Spark jobs
share) and :mod:`~relay.settings.env_flags` (a command's own flags).
"""
