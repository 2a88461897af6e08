"""The `hold` failpoint: a thread blocked at a point until the test releases it."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from relay.errors import ConfigurationError
from relay.runtime.failpoints import RELEASE_SUFFIX, Failpoints, parse


def test_hold_needs_a_once_path() -> None:
    with pytest.raises(ConfigurationError, match="hold needs once=PATH"):
        parse("before_commit=hold")


def test_hold_blocks_the_first_caller_until_released_and_lets_later_ones_pass(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "held"
    points = Failpoints(parse(f"before_commit=hold,once={marker}"))
    first = threading.Thread(target=points.hit, args=("before_commit", 0))
    first.start()
    first.join(0.3)
    assert first.is_alive() and marker.exists()  # held
    points.hit("before_commit", 1)  # `once`: a second caller is not held
    Path(str(marker) + RELEASE_SUFFIX).touch()
    first.join(10)
    assert not first.is_alive()
