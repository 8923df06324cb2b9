"""The tree service writes its projections behind its fold; the batches folded while a write runs
are written together, in one transaction (`projecting_behind`)."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence

import anyio
import pytest

import services.tree.service as tree_service
from events import Envelope, TreeConfigured, TreeOptions
from services.common.log import Stored
from services.common.memlog import MemoryLog
from services.tree.service import TreeService, projecting_behind
from tests.projections.make import gangs, stored


class SlowStore:
    """Records each `apply_isolating`; the first one waits until `release` is set."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[int], set[int]]] = []
        self.release = threading.Event()

    def apply_isolating(self, batch: Sequence[Stored], decoded: Mapping[int, Sequence[Envelope]]) -> int:
        if not self.calls:
            self.release.wait(5)
        self.calls.append(([m.seq for m in batch], set(decoded)))
        return batch[-1].seq


@pytest.mark.anyio
async def test_batches_folded_during_a_write_are_written_together() -> None:
    store = SlowStore()
    service = TreeService(MemoryLog(), store)  # type: ignore[arg-type]
    log = [stored(1, TreeConfigured(tree="default", options=TreeOptions()), source="tree"), *gangs(2, 13)]
    batches = [log[0:4], log[4:7], log[7:10], log[10:13]]
    async with anyio.create_task_group() as tg:
        handle = projecting_behind(tg, service, store)  # type: ignore[arg-type]
        await handle(batches[0])
        await anyio.sleep(0.05)  # the first write has started, and waits
        for batch in batches[1:]:
            await handle(batch)
        store.release.set()
        with anyio.fail_after(5):
            while sum(len(seqs) for seqs, _ in store.calls) < 12:
                await anyio.sleep(0.01)
        tg.cancel_scope.cancel()
    assert [seqs for seqs, _ in store.calls] == [list(range(1, 5)), list(range(5, 14))]
    assert store.calls[1][1] == set(range(5, 14))  # what the fold decoded goes along
    assert service.position == 13


class QuickStore:
    """Records each `apply_isolating` and when it was called."""

    def __init__(self) -> None:
        self.calls: list[list[int]] = []

    def apply_isolating(self, batch: Sequence[Stored], decoded: Mapping[int, Sequence[Envelope]]) -> int:
        self.calls.append([m.seq for m in batch])
        return batch[-1].seq


@pytest.mark.anyio
async def test_batches_folded_soon_after_a_write_started_wait_for_the_next_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A trickle of small batches is written a transaction per `PROJECTION_INTERVAL`, not one each."""
    monkeypatch.setattr(tree_service, "PROJECTION_INTERVAL", 0.3)
    store = QuickStore()
    service = TreeService(MemoryLog(), store)  # type: ignore[arg-type]
    log = [stored(1, TreeConfigured(tree="default", options=TreeOptions()), source="tree"), *gangs(2, 7)]
    async with anyio.create_task_group() as tg:
        handle = projecting_behind(tg, service, store)  # type: ignore[arg-type]
        await handle(log[0:2])
        with anyio.fail_after(5):
            while not store.calls:
                await anyio.sleep(0.01)
        for start in range(2, 7):  # within the interval: they wait for the next transaction
            await handle(log[start : start + 1])
            await anyio.sleep(0.02)
        assert len(store.calls) == 1
        await handle(log[7:8])
        with anyio.fail_after(5):
            while sum(len(seqs) for seqs in store.calls) < 7:
                await anyio.sleep(0.01)
        tg.cancel_scope.cancel()
    assert store.calls == [[1, 2], [3, 4, 5, 6, 7]]
