"""The tree service writes its projections behind its fold; the batches folded while a write runs
are written together, in one transaction (`_projecting_behind`)."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence

import anyio
import pytest

from events import Envelope, TreeConfigured, TreeOptions
from services.common.log import Stored
from services.common.memlog import MemoryLog
from services.tree.service import TreeService, _projecting_behind
from tests.projections.make import gangs, stored


class SlowStore:
    """Records each `apply_decoded`; the first one waits until `release` is set."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[int], set[int]]] = []
        self.release = threading.Event()

    def apply_decoded(self, batch: Sequence[Stored], decoded: Mapping[int, Sequence[Envelope]]) -> int:
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
        handle = _projecting_behind(tg, service, store)  # type: ignore[arg-type]
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
