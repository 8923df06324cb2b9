"""A merge the store cannot write is tried again after more and more seals (1, 2, 4 ... up to
`MERGE_RETRY_SEALS`), not at every seal; once the store writes again, runs merge as before and
no id is lost meanwhile."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pytest

from services.tree.domain import used_ids
from services.tree.domain.used_ids import MemoryRuns, Run, UsedIds

SEAL = 50


class BrokenForMerges(MemoryRuns):
    """A store whose merges fail while `broken` (a seal's run, written from lists, goes through)."""

    def __init__(self) -> None:
        super().__init__()
        self.broken = True
        self.merges_tried = 0

    def write(self, digests: Iterable[np.ndarray], crcs: Iterable[np.ndarray]) -> Run:
        if not isinstance(digests, list):  # (a merge: the runs' digests merged as they are read)
            self.merges_tried += 1
            if self.broken:
                raise OSError(28, "No space left on device")
        return super().write(digests, crcs)


def test_a_failing_merge_backs_off_and_merges_once_the_store_writes_again(monkeypatch: pytest.MonkeyPatch,
                                                                         caplog: Any) -> None:
    monkeypatch.setattr(used_ids, "SEAL_AT", SEAL)
    store = BrokenForMerges()
    ids = UsedIds(store=store)
    seals = 100
    for i in range(SEAL * seals):
        ids.add(f"g{i}")
    assert store.merges_tried <= 10  # (1, 2, 4, ... 64 seals apart: ~8 in 100 seals; was one a seal)
    assert len([r for r in caplog.records if "not merged" in r.getMessage()]) == store.merges_tried
    assert len(ids.runs) >= seals - 1  # (unmerged)
    store.broken = False
    for i in range(SEAL * seals, SEAL * (seals + used_ids.MERGE_RETRY_SEALS + 1)):
        ids.add(f"g{i}")
    assert len(ids.runs) <= 12  # merged again (O(log n) runs)
    assert all(f"g{i}" in ids for i in range(0, SEAL * (seals + used_ids.MERGE_RETRY_SEALS + 1), 97))
    assert "h1" not in ids
