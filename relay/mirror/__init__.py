"""The reverse relay: mirror Kafka topics into PostgreSQL tables exactly once.

``relay mirror`` (continuous or ``--once``) and ``jobs/mirror.py`` (Spark) consume with
``isolation.level=read_committed`` and apply each batch of one Kafka partition in one
database transaction that also advances the partition's stored offset with a
compare-and-set (DESIGN.md, I4 and I5). The mapping from topics to tables is a TOML
file, described in ``docs/mirror.md``.

Modules: :mod:`~relay.mirror.mapping` (the TOML mapping), :mod:`~relay.mirror.decode`
(record to row operation or dead-letter reason, pure), :mod:`~relay.mirror.applier` and
:mod:`~relay.mirror.loop` (the core, over the ports in :mod:`~relay.mirror.ports`),
:mod:`~relay.mirror.postgres_store` and :mod:`~relay.mirror.consumer` (the edges),
:mod:`~relay.mirror.service` (typed API) and :mod:`~relay.mirror.cli`.
"""
