"""The reverse relay: mirror Kafka topics into PostgreSQL tables exactly once.

``relay mirror`` (continuous or ``--once``) and ``jobs/mirror.py`` (Spark) consume with
``isolation.level=read_committed`` and apply each batch of one Kafka partition in one
database transaction that also advances the partition's stored offset with a
compare-and-set (I4 and I5, docs/invariants.md). The mapping from topics to tables is a TOML
file, described in ``docs/mirror.md``.

Modules: :mod:`~relay.mirroring.mapping` (the TOML mapping), :mod:`~relay.mirroring.decode`
(record to row operation or dead-letter reason, pure), :mod:`~relay.mirroring.applier` and
:mod:`~relay.mirroring.loop` (the core, over the ports in :mod:`~relay.mirroring.ports`),
:mod:`~relay.postgres.mirror_store` and :mod:`~relay.kafka.record_stream` (the edges),
:mod:`~relay.commands.mirror` (typed API) and :mod:`~relay.cli.mirror`.
"""
