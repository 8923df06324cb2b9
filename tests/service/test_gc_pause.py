"""The services fold with the cyclic collector paused and the state frozen out of its sight
(`folding.GcPause`); every `UNFREEZE_EVERY` batches what was frozen is handed back and collected.
Cycles made during batches (exceptions and their tracebacks, event-loop internals) must be freed
then: before they were frozen again at the next batch, never collected, and a service's memory
grew with its history."""

from __future__ import annotations

import gc
import weakref

from services.common.folding import GcPause


class Node:
    other: Node


def test_cycles_made_in_batches_are_freed_at_the_unfreeze() -> None:
    pause = GcPause()
    pause.UNFREEZE_EVERY = 10
    refs: list[weakref.ref[Node]] = []
    enabled = gc.isenabled()
    gc.enable()
    try:
        for batch in range(1, 36):
            with pause():
                a, b = Node(), Node()
                a.other, b.other = b, a  # a cycle: reference counting never frees it
                refs.append(weakref.ref(a))
                del a, b
            alive = [r for r in refs if r() is not None]
            if batch % 10 == 0:
                assert not alive, f"after batch {batch}: {len(alive)} cycles of earlier batches still alive"
        # between unfreezes the cycles wait (frozen), at most UNFREEZE_EVERY batches' worth
        assert 0 < len([r for r in refs if r() is not None]) <= 10
    finally:
        gc.unfreeze()
        if not enabled:
            gc.disable()
