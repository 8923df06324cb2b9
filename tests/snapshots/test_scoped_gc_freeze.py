"""What loading a snapshot freezes (`gc.freeze`: out of the collector's sight, never collected)
is the running service's business: `Snapshot.decode` alone (a test process, a replay, the
what-if) leaves the collector's permanent generation as it was, and a service started from a
snapshot and stopped, whenever it is stopped (its start's rebuild included), leaves it as it was.
Before, decode froze every object alive and nothing outside a running folder ever unfroze them."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import anyio
import pytest

from services.admission.folder import SUBJECTS, AdmissionFolder
from services.common.folding import run_folder
from services.common.memlog import MemoryLog
from services.common.snapshots import MemorySnapshots, Snapshot, SnapshotPolicy
from tests.snapshots.test_service_snapshots import inputs, run_until_caught_up


@pytest.fixture
def collecting() -> Iterator[None]:
    """The collector on, nothing frozen, as a fresh process has it."""
    enabled = gc.isenabled()
    gc.unfreeze()
    gc.enable()
    try:
        yield
    finally:
        gc.unfreeze()
        if not enabled:
            gc.disable()


class Node:
    other: Node | None = None


def test_decode_leaves_the_frozen_objects_as_they_were(collecting: None) -> None:
    state = {"nodes": [Node() for _ in range(100)]}
    data = Snapshot("admission", 7, "fp", state).encode()
    before = gc.get_freeze_count()
    loaded = Snapshot.decode(data)
    assert len(loaded.state["nodes"]) == 100
    assert gc.get_freeze_count() == before
    assert gc.isenabled()


def test_decode_asked_to_freeze_freezes(collecting: None) -> None:
    data = Snapshot("admission", 7, "fp", {"nodes": [Node() for _ in range(100)]}).encode()
    Snapshot.decode(data, freeze=True)
    assert gc.get_freeze_count() > 0  # (a service's start: `folding._restore`)


def test_a_service_started_from_a_snapshot_and_stopped_leaves_nothing_frozen(collecting: None) -> None:
    async def main() -> None:
        log, store = MemoryLog(), MemorySnapshots()
        await log.append(inputs(0))
        await run_until_caught_up(log, store)  # (a clean stop: a snapshot)
        assert store.objects
        await log.append(inputs(1))
        gc.unfreeze()
        await run_until_caught_up(log, store)  # started from it, then stopped

    anyio.run(main, backend="asyncio")
    assert gc.get_freeze_count() == 0


def test_a_service_stopped_in_its_rebuild_leaves_nothing_frozen(collecting: None) -> None:
    """Stopped while its start loads the snapshot and folds the tail (before it goes live)."""
    frozen: list[int] = []

    async def main() -> None:
        log, store = MemoryLog(), MemorySnapshots()
        await log.append(inputs(0))
        await run_until_caught_up(log, store)
        await log.append(inputs(1))
        gc.unfreeze()
        folder = AdmissionFolder()
        load = folder.load

        def loaded_then_stopped(state: object) -> None:
            load(state)
            frozen.append(gc.get_freeze_count())
            scope.cancel()

        folder.load = loaded_then_stopped  # type: ignore[method-assign]
        with anyio.CancelScope() as scope:
            await run_folder(log, folder, SUBJECTS, durable="admission",
                             snapshots=SnapshotPolicy(store, every=10, least=1))

    anyio.run(main, backend="asyncio")
    assert frozen and frozen[0] > 0  # (what the test is about: the start froze the state it loaded)
    assert gc.get_freeze_count() == 0
