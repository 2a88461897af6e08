"""Consumer failover as a typed API: a group's committed offsets on the source cluster,
translated to the target topics of `relay replicate` (:func:`translate`), and committed
for the same group on the target cluster (:func:`apply`), so that its consumers continue
there with the first record they have not processed (docs/replication.md, "Failing
consumers over")."""

from __future__ import annotations

from collections.abc import Iterable

from relay.commands.groups import replicate_settings
from relay.kafka.offset_translation import KafkaOffsetTranslator
from relay.replication.translation import TranslatedOffset
from relay.settings.replicate import ReplicateSettings


def translate(settings: ReplicateSettings, group: str) -> list[TranslatedOffset]:
    """One row per partition of the selected source topics: the group's committed source
    offset, the target offset it translates to, whether it can be applied, and the
    group's committed offset on the target now. Changes nothing."""
    translator = KafkaOffsetTranslator(replicate_settings(settings), group)
    try:
        return translator.translate()
    finally:
        translator.close()


def apply(
    settings: ReplicateSettings, group: str, rows: Iterable[TranslatedOffset]
) -> list[TranslatedOffset]:
    """Commit the translated offsets of ``rows`` that change the group's offsets on the
    target cluster (partitions not replicated up to the group's offset are left alone),
    and return those rows. OffsetTranslationError while the group has active members
    on the target."""
    translator = KafkaOffsetTranslator(replicate_settings(settings, announce=False), group)
    try:
        return translator.apply(rows)
    finally:
        translator.close()
