"""Replicating Kafka topics from one cluster to another, exactly once: the pure core.

Each source partition is copied by one :class:`~relay.replication.partition_replicator.
PartitionReplicator`, over the ports in :mod:`relay.replication.ports` (implemented with
librdkafka in :mod:`relay.kafka`). `relay replicate` and the Spark job ``jobs/replicate.py``
both drive it.
"""
