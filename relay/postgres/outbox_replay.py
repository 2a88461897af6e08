"""Replaying outbox dead letters a key at a time (I2): while a dead letter of a key exists,
the key's later rows follow it to the dead letters, so a key's dead letters go back to the
outbox together, in their order, in one transaction, or none of them does.

Each row is inserted again with the write API's own statement
(:data:`~relay.postgres.outbox_writer.INSERT_EVENT`: it gets a new id, and the next draw
gives it a position after every row drawn before) and its dead letter is deleted.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from sqlalchemy import text

from relay.postgres.dead_letters import (
    OutboxDeadLetter,
    Replayed,
    locked,
    outbox_letter,
    settle,
)
from relay.postgres.engine import Database
from relay.postgres.outbox_writer import INSERT_EVENT

# The given dead letters and every other one of their keys, in the order of the outbox.
_KEY_GROUPS = text(
    """
    SELECT d.id, d.key FROM outbox_dead_letters d
    WHERE d.id = ANY(:ids)
       OR d.key IN (SELECT s.key FROM outbox_dead_letters s
                    WHERE s.id = ANY(:ids) AND s.key IS NOT NULL)
    ORDER BY d.seq, d.id
    """
)


def key_groups(database: Database, ids: Sequence[int]) -> list[list[int]]:
    """``ids`` with every other dead letter of their keys, a list per key (one per dead
    letter without a key), each in the order of the outbox, in the order of their first."""
    with database.connect("reading outbox_dead_letters") as conn:
        rows = conn.execute(_KEY_GROUPS, {"ids": list(ids)}).tuples().all()
    groups: dict[object, list[int]] = {}
    for letter, key in rows:
        groups.setdefault(letter if key is None else bytes(key), []).append(int(letter))
    return list(groups.values())


def replay_together(
    database: Database,
    ids: Sequence[int],
    check: Callable[[OutboxDeadLetter], str | None],
) -> list[Replayed]:
    """Insert the dead letters ``ids`` (one key's, in order) into the outbox again and
    delete them, in one transaction; when ``check`` refuses one, it keeps that reason as
    its error and none of them goes."""
    with database.begin(f"replaying outbox dead letters {list(ids)}") as conn:
        letters = []
        for letter_id in ids:
            row = locked(conn, "outbox", letter_id)
            if row is not None:
                letters.append(outbox_letter(row))
        refused = {letter.id: error for letter in letters if (error := check(letter))}
        for letter in letters:
            if refused:
                if letter.id in refused:
                    settle(conn, "outbox", letter.id, refused[letter.id])
                continue
            conn.execute(
                INSERT_EVENT,
                {
                    "topic": letter.topic,
                    "key": letter.key,
                    "value": letter.value,
                    "event_type": letter.event_type,
                    "headers": json.dumps(letter.headers),
                },
            )
            settle(conn, "outbox", letter.id, None)
    found = {letter.id for letter in letters}
    first = min(refused) if refused else None
    return [
        Replayed(i, False)
        if i not in found
        else Replayed(
            i,
            True,
            refused.get(i, f"kept with dead letter {first} of the same key" if refused else None),
        )
        for i in ids
    ]
