"""The tree service's snapshot saves are the service's to end (`folding.Saves`): stopped while a
save runs, the service's stop kills and reaps the pickling child and closes the file it wrote,
whoever still holds the pickling and whatever the save's task did (a task cancelled before its
first step may never run its `finally`: here a save that never gets to its own cleanup stands for
it). Before, only the pickling's finaliser did that, whenever the save's task was let go."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import anyio
import pytest

from events import PoolConfig
from events.commands import PoolUpsert
from services.common import folding
from services.common.folding import Pickling
from services.common.memlog import MemoryLog
from services.common.snapshots import MemorySnapshots, SnapshotPolicy
from services.tree import service as tree_service
from services.tree.service import TreeService, serve_tree
from tests.snapshots.test_pickling_cleanup import _children


@pytest.fixture
def temp(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("POOLWISE_SNAPSHOT_FORK", "1")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def test_a_save_cancelled_with_the_service_leaves_nothing(temp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[Pickling] = []

    def recorded(state: object) -> Pickling:
        pickling = folding.pickled_later(state)
        made.append(pickling)  # (held here: the finaliser cannot be what closes it)
        return pickling

    monkeypatch.setattr(tree_service, "pickled_later", recorded)
    real_save = folding.save_snapshot
    hung: list[bool] = []

    async def save_never_cleaning_up(*args: Any) -> None:
        if hung:
            return await real_save(*args)
        hung.append(True)
        await anyio.sleep_forever()  # (cancelled with the service, without a `finally` of its own)

    monkeypatch.setattr(folding, "save_snapshot", save_never_cleaning_up)
    monkeypatch.setattr(tree_service, "save_snapshot", save_never_cleaning_up)
    due = TreeService.snapshot_if_due
    scopes: list[anyio.CancelScope] = []

    def stopped_once_due(self: TreeService, tg: anyio.abc.TaskGroup) -> None:
        before = len(made)
        due(self, tg)
        if len(made) > before:  # a save started (its child forked): the service stops now
            scopes[0].cancel()

    monkeypatch.setattr(TreeService, "snapshot_if_due", stopped_once_due)
    children = _children()

    async def run() -> None:
        log = MemoryLog()
        policy = SnapshotPolicy(MemorySnapshots(), every=1, least=1)
        svc = TreeService(log, None, policy)
        with anyio.fail_after(30), anyio.CancelScope() as scope:
            scopes.append(scope)
            async with anyio.create_task_group() as tg:
                await tg.start(lambda task_status: serve_tree(log, None, service=svc, task_status=task_status))
                upsert = PoolUpsert(path="/a", config=PoolConfig(), require="new")
                assert (await svc.handle(upsert)).ok
                await anyio.sleep_forever()

    anyio.run(run, backend="asyncio")
    assert made, "no save was started"
    assert all(pickling.closed for pickling in made)
    assert _children() - children == set()
    assert list(temp.iterdir()) == []
