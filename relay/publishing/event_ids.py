"""Event ids: UUIDv7 (RFC 9562), made by the write API when an event is published.

48 bits of Unix time in milliseconds, then 74 random bits (around the version and variant
bits). Ids made by one process increase: within a millisecond (or when the clock steps
back) the random part of the previous id is increased by a random step (RFC 9562 6.2,
method 2), so that they stay unguessable. A forked child starts afresh.
"""

from __future__ import annotations

import os
import threading
import time
import uuid

_RANDOM_BITS = 74
_RANDOM_MASK = (1 << _RANDOM_BITS) - 1


class _Last:
    """The previous id's milliseconds and random bits."""

    lock = threading.Lock()
    millis = 0
    random = 0

    @classmethod
    def forget(cls) -> None:
        cls.millis = cls.random = 0


os.register_at_fork(after_in_child=_Last.forget)


def new_event_id() -> uuid.UUID:
    """A new UUIDv7, greater than every earlier one of this process."""
    with _Last.lock:
        millis = time.time_ns() // 1_000_000
        last_millis, last_random = _Last.millis, _Last.random
        if millis > last_millis:
            random = int.from_bytes(os.urandom(10)) & _RANDOM_MASK
        else:  # the same millisecond, or the clock stepped back: count on from the last
            millis = last_millis
            random = last_random + 1 + int.from_bytes(os.urandom(4))  # a step below 2**32
            if random > _RANDOM_MASK:  # spent: borrow the next millisecond
                millis += 1
                random &= _RANDOM_MASK
        _Last.millis, _Last.random = millis, random
    rand_a, rand_b = random >> 62, random & ((1 << 62) - 1)
    value = (millis & ((1 << 48) - 1)) << 80 | 0x7 << 76 | rand_a << 64 | 0b10 << 62 | rand_b
    return uuid.UUID(int=value)
