"""The relay's core: pure logic over the ports in :mod:`relay.core.ports`.

Nothing here imports a database driver or a Kafka client.
"""
