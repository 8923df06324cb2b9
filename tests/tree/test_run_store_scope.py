"""The id records of one context (a replay's task: `used_ids.storing_in`) seal into a store of
their own, for good, while the process's store and the records made elsewhere are left as they
are; a snapshot of a record finds its runs in whichever store holds them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from services.common import folding, snapshots
from services.common.id_runs import FileRun, FileRuns
from services.tree.domain import used_ids
from services.tree.domain.used_ids import MemoryRun, MemoryRuns, UsedIds

SEAL = 100


@pytest.fixture(autouse=True)
def small_runs(monkeypatch: pytest.MonkeyPatch) -> Iterator[MemoryRuns]:
    monkeypatch.setattr(used_ids, "SEAL_AT", SEAL)
    process = MemoryRuns()
    before = used_ids.use_store(process)
    yield process
    used_ids.use_store(before)


def _filled(ids: UsedIds, prefix: str, count: int = 3 * SEAL) -> UsedIds:
    for i in range(count):
        ids.add(f"{prefix}{i}")
    return ids


def test_a_scope_keeps_its_records_in_its_store_and_leaves_the_others(tmp_path: Path,
                                                                     small_runs: MemoryRuns) -> None:
    service = _filled(UsedIds(), "a")  # the process's (a service's) record
    replay_store = FileRuns(tmp_path / "id-runs")
    with used_ids.storing_in(replay_store):
        assert used_ids.current_store() is replay_store
        replayed = _filled(UsedIds(), "r")
        _filled(service, "b")  # the service goes on meanwhile
    assert used_ids.current_store() is small_runs
    _filled(replayed, "s")  # (after the scope: still its own store)
    assert all(isinstance(run, FileRun) for run in replayed.runs)
    assert all(isinstance(run, MemoryRun) for run in service.runs)
    assert "a1" in service and "b1" in service and "r1" in replayed and "s1" in replayed


def test_overlapping_scopes_in_two_tasks_are_each_their_own(tmp_path: Path, small_runs: MemoryRuns) -> None:
    """Two replays whose lifetimes overlap (A starts, B starts, A ends, B ends), each in its task."""
    stores = {name: FileRuns(tmp_path / name) for name in "AB"}
    made: dict[str, UsedIds] = {}

    async def run() -> None:
        b_started, a_ended = anyio.Event(), anyio.Event()

        async def replay_a() -> None:
            with used_ids.storing_in(stores["A"]):
                await b_started.wait()
                made["A"] = _filled(UsedIds(), "a")
            a_ended.set()

        async def replay_b() -> None:
            with used_ids.storing_in(stores["B"]):
                b_started.set()
                await a_ended.wait()
                made["B"] = _filled(UsedIds(), "b")
                assert used_ids.current_store() is stores["B"]

        async with anyio.create_task_group() as tg:
            tg.start_soon(replay_a)
            tg.start_soon(replay_b)

    anyio.run(run, backend="asyncio")
    assert used_ids.current_store() is small_runs
    for name, record in made.items():
        assert record.runs and all(run.path.parent == stores[name].directory for run in record.runs)  # type: ignore[attr-defined]
    assert all(isinstance(run, MemoryRun) for run in _filled(UsedIds(), "c").runs)


def test_a_snapshot_finds_the_runs_of_a_record_sealing_into_a_store_of_its_own(tmp_path: Path) -> None:
    record = _filled(UsedIds(store=FileRuns(tmp_path / "own")), "x")
    pickling = folding.pickled_later(record)
    state = anyio.run(lambda: _awaited(pickling), backend="asyncio")
    keys = snapshots.split_pickled(state)[0]
    assert keys
    found = snapshots.runs_to_save(pickling, keys)
    assert set(found) == set(keys)
    assert set(snapshots.runs_to_save(None, keys)) == set(keys)  # (found in its store, not only held)


async def _awaited(pickling: folding.Pickling) -> bytes:
    return await pickling
