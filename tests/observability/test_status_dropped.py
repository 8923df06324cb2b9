"""A service that stops takes its entry out of `metrics.STATUS` (what the gauges and `/readyz`
read): the entry held the whole fold (its folder: the state, its id records alive, which the next
snapshot's `used_ids.freeze_filters` wrote again) for as long as the process lived. A role
leadership told of meanwhile (`lost`: the instance stands by again in a moment) is kept, in an
entry that holds no fold."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import anyio
import pytest

from services.admission.folder import SUBJECTS, AdmissionFolder
from services.common import metrics
from services.common.folding import run_folder
from services.common.memlog import MemoryLog
from services.common.snapshots import MemorySnapshots, SnapshotPolicy
from services.tree.service import serve_tree
from tests.snapshots.test_service_snapshots import inputs


@pytest.fixture(autouse=True)
def fresh() -> Iterator[None]:
    metrics.reset()
    yield
    metrics.reset()


async def _served_then_stopped(role: str | None = None) -> weakref.ref[AdmissionFolder]:
    log = MemoryLog()
    await log.append(inputs(0))
    folder = AdmissionFolder()
    async with anyio.create_task_group() as tg:
        await tg.start(lambda task_status: run_folder(log, folder, SUBJECTS, durable="admission",
                                                      snapshots=SnapshotPolicy(MemorySnapshots(), every=10, least=1),
                                                      task_status=task_status))
        assert metrics.STATUS["admission"].folder is folder
        if role is not None:
            metrics.set_role("admission", role)
        tg.cancel_scope.cancel()
    return weakref.ref(folder)


def test_a_stopped_service_leaves_no_status() -> None:
    folder = anyio.run(_served_then_stopped, backend="asyncio")
    assert "admission" not in metrics.STATUS
    gc.collect()
    assert folder() is None  # nothing in the metrics holds the fold


def test_a_role_told_meanwhile_is_kept_without_the_fold() -> None:
    folder = anyio.run(lambda: _served_then_stopped("lost"), backend="asyncio")
    found = metrics.STATUS["admission"]
    assert (found.role, found.folder, found.snapshots) == ("lost", None, None)
    assert metrics.readiness(found, 100) == (False, "lost")
    gc.collect()
    assert folder() is None


def test_a_stopped_service_leaves_the_entry_another_fold_took() -> None:
    """A fold that took the entry over since (a standby's, the next term's) keeps it."""
    async def main() -> None:
        other = AdmissionFolder()
        log = MemoryLog()
        await log.append(inputs(0))
        async with anyio.create_task_group() as tg:
            await tg.start(lambda task_status: run_folder(log, AdmissionFolder(), SUBJECTS, durable="admission",
                                                          task_status=task_status))
            metrics.status("admission").folder = other
            tg.cancel_scope.cancel()
        assert metrics.STATUS["admission"].folder is other

    anyio.run(main, backend="asyncio")


def test_a_stopped_tree_service_leaves_no_status() -> None:
    async def main() -> None:
        async with anyio.create_task_group() as tg:
            await tg.start(lambda task_status: serve_tree(MemoryLog(), None, task_status=task_status))
            assert "tree" in metrics.STATUS
            tg.cancel_scope.cancel()

    anyio.run(main, backend="asyncio")
    assert "tree" not in metrics.STATUS


def test_a_stopped_standby_fold_leaves_no_status() -> None:
    """A warm standby's fold (`Warm.follow`) stopped with its process: nothing holds it either."""
    from services.common.folding import Warm

    async def main() -> weakref.ref[AdmissionFolder]:
        log = MemoryLog()
        await log.append(inputs(0))
        folder = AdmissionFolder()
        warm = Warm(folder, SUBJECTS)
        async with anyio.create_task_group() as tg:
            tg.start_soon(warm.follow, log)
            while warm.folded < await log.last_seq():
                await anyio.sleep(0.01)
            assert metrics.STATUS["admission"].folder is folder
            tg.cancel_scope.cancel()
        return weakref.ref(folder)

    folder = anyio.run(main, backend="asyncio")
    assert "admission" not in metrics.STATUS
    gc.collect()
    assert folder() is None
