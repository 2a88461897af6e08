"""`relay replicate` collects garbage less often (relay.runtime.collector)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from relay.runtime.collector import YOUNG_THRESHOLD, collect_less_often


@pytest.fixture
def restored() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


@pytest.mark.usefixtures("restored")
def test_objects_alive_at_start_are_set_aside_and_collections_come_less_often() -> None:
    gc.set_threshold(700, 10, 10)
    collect_less_often()
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == (YOUNG_THRESHOLD, 20, 10)


@pytest.mark.usefixtures("restored")
def test_higher_thresholds_already_set_are_kept() -> None:
    gc.set_threshold(100_000, 50, 100)
    collect_less_often()
    assert gc.get_threshold() == (100_000, 50, 100)
