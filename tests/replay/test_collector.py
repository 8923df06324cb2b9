"""`fewer_collections` (services/tools/replay/collector.py): the youngest generation's threshold
raised while held, and the thresholds as they were once the last overlapping hold ends."""

from __future__ import annotations

import gc

from services.tools.replay.collector import YOUNGEST, fewer_collections


def test_thresholds_are_raised_while_held_and_restored_after_the_last_hold() -> None:
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 11, 12)
        with fewer_collections():
            assert gc.get_threshold() == (YOUNGEST, 11, 12)
            with fewer_collections():  # (another replay in the same process)
                assert gc.get_threshold() == (YOUNGEST, 11, 12)
            assert gc.get_threshold() == (YOUNGEST, 11, 12)
        assert gc.get_threshold() == (700, 11, 12)
    finally:
        gc.set_threshold(*before)


def test_an_error_inside_restores_them_too() -> None:
    before = gc.get_threshold()
    try:
        with fewer_collections():
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert gc.get_threshold() == before
