"""A policy that saves only a settled fold (`WhenSettled`: an instance deciding per tree) holds on
every save path, the rebuild's included (`Saving.if_due` asks `due_folding_again`), not only the
live one (`due`) and the clean stop's (`unsaved`)."""

from __future__ import annotations

import anyio
import pytest

from services.admission.folder import SUBJECTS, AdmissionFolder
from services.admission.held_trees import WhenSettled
from services.common import log as log_module
from services.common.folding import rebuild
from services.common.memlog import MemoryLog
from services.common.snapshots import MemorySnapshots, SnapshotPolicy
from tests.replay.biglog import build

EVERY = 2_000


@pytest.fixture(scope="module")
def log() -> MemoryLog:
    made = MemoryLog()
    anyio.run(lambda: build(made, 2_000, per_round=100, leaves=3), backend="asyncio")
    return made


def _rebuilt(log: MemoryLog, settled: bool) -> list[int]:
    """The positions of the snapshots a rebuild saves under a `WhenSettled` policy."""
    store = MemorySnapshots()
    policy = WhenSettled.of(SnapshotPolicy(store, every=EVERY), settled=lambda: settled)

    async def run() -> list[int]:
        await rebuild(log, AdmissionFolder(), SUBJECTS, store, policy=policy)
        return await store.candidates("admission")

    return anyio.run(run, backend="asyncio")


@pytest.fixture(autouse=True)
def in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POOLWISE_SNAPSHOT_FORK", "0")  # (pickled at once: no child to wait for)
    monkeypatch.setattr(log_module, "READ_CHUNK", 500)  # (a rebuild looks where a piece ends)


def test_a_rebuild_saves_no_snapshot_of_a_fold_that_is_not_settled(log: MemoryLog) -> None:
    assert anyio.run(log.last_seq, backend="asyncio") > 3 * EVERY  # (due several times over)
    assert _rebuilt(log, settled=True), "the control: a settled rebuild saves snapshots"
    assert _rebuilt(log, settled=False) == []


def test_every_save_predicate_asks_whether_the_fold_is_settled() -> None:
    policy = WhenSettled.of(SnapshotPolicy(MemorySnapshots(), every=10, least=1), settled=lambda: False)
    assert not policy.due(100, 10_000.0)
    assert not policy.due_folding_again(100)
    assert not policy.unsaved(100)
    plain = SnapshotPolicy(MemorySnapshots(), every=10, least=1)
    assert plain.due(100, 10_000.0) and plain.due_folding_again(100) and plain.unsaved(100)
