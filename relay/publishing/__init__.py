"""The forward relay's core: outbox rows to Kafka, exactly once (I3, docs/invariants.md).

Pure logic over the ports in :mod:`~relay.publishing.ports`; PostgreSQL and Kafka
implement them in :mod:`relay.postgres` and :mod:`relay.kafka`. Nothing here imports a
database driver or a Kafka client.
"""
