"""Relay partitions of outbox keys.

The database assigns the partition on insert (``outbox_partition_of`` in the first
migration); this is the same function in Python, for tools and tests that need to
know where a key goes.
"""

from __future__ import annotations

import hashlib


def partition_of(key: bytes, partitions: int) -> int:
    """The relay partition of ``key``: the first 28 bits of sha256(key) mod ``partitions``."""
    if partitions <= 0:
        raise ValueError(f"partitions must be positive, got {partitions}")
    return (int.from_bytes(hashlib.sha256(key).digest()[:4], "big") >> 4) % partitions
