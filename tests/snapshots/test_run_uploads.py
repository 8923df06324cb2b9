"""The id runs a snapshot names are in the bucket once it is saved, whatever another service
collects meanwhile; and a run is put once however many services' looks offer it at once."""

from __future__ import annotations

import io
from collections.abc import Iterator
from datetime import timedelta

import anyio
import pytest

from services.common import snapshot_stores, snapshots
from services.common.snapshots import ObjectStoreSnapshots, Snapshot
from services.tree.domain import used_ids
from services.tree.domain.used_ids import MemoryRuns, UsedIds
from tests.snapshots.fake_bucket import FakeBucket


@pytest.fixture(autouse=True)
def small_runs(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(used_ids, "SEAL_AT", 100)
    before = used_ids.use_store(MemoryRuns())
    yield
    used_ids.use_store(before)


def _store(bucket: FakeBucket, name: str = snapshots.BUCKET) -> ObjectStoreSnapshots:
    store = ObjectStoreSnapshots(None, "S", bucket=name)
    store._store = bucket
    return store


@pytest.mark.parametrize("tree_in", ["this process", "another process"])
def test_a_run_stored_ahead_and_collected_while_its_snapshot_is_saved_is_put_again(tree_in: str) -> None:
    bucket = FakeBucket()
    # in another process the tree's store has its own lock on the bucket's uploads (another name here)
    admission = _store(bucket)
    tree = _store(bucket) if tree_in == "this process" else _store(bucket, "another process")
    record = UsedIds(f"g{i}" for i in range(300))
    state = snapshots.pickled(record)
    runs = snapshots.runs_to_save(None, snapshots.split_pickled(state)[0])
    assert runs

    async def run() -> None:
        # stored as they sealed (`store_runs_as_they_seal`), longer ago than RUN_GRACE
        bucket.clock -= timedelta(seconds=snapshots.RUN_GRACE + 60)
        await admission.store_runs(runs)
        bucket.clock += timedelta(seconds=snapshots.RUN_GRACE + 60)
        tree_data = Snapshot.encode_pickled("tree", 5, "fp", snapshots.pickled(UsedIds(["t1"])))

        async def tree_saves_meanwhile(name: str) -> None:  # after admission listed, before its put
            await tree.save("tree", 5, tree_data, {})

        bucket.before_put = tree_saves_meanwhile
        await admission.save("admission", 7, Snapshot.encode_pickled("admission", 7, "fp", state), runs)

    anyio.run(run, backend="asyncio")
    named = snapshots.runs_named(Snapshot.header(bucket.objects["S.admission.7"][0]))
    assert named and all(f"S.id-runs.{key}" in bucket.objects for key in named)

    async def load() -> Snapshot | None:
        before = used_ids.use_store(MemoryRuns())  # a new process: the runs fetched
        try:
            loaded, skipped = await snapshots.load_newest(admission, "admission", "fp")
        finally:
            used_ids.use_store(before)
        assert not skipped
        return loaded

    assert anyio.run(load, backend="asyncio") is not None


def test_a_run_offered_by_several_looks_at_once_is_put_once() -> None:
    bucket = FakeBucket()
    record = UsedIds(f"g{i}" for i in range(300))
    runs = {run.key: run for run in record.runs}
    looks = [_store(bucket) for _ in range(3)]  # each service's, in one process

    async def run() -> None:
        async with anyio.create_task_group() as tg:
            for look in looks:
                tg.start_soon(look.store_runs, runs)
            tg.start_soon(looks[0].save, "admission", 1, Snapshot.encode_pickled(
                "admission", 1, "fp", snapshots.pickled(record)), runs)

    anyio.run(run, backend="asyncio")
    assert not bucket.overlapped
    run_puts = [name for name in bucket.puts if ".id-runs." in name]
    assert sorted(run_puts) == sorted(f"S.id-runs.{key}" for key in runs)


def test_a_filter_that_cannot_be_fetched_is_made_again_rather_than_failing_the_start() -> None:
    bucket = FakeBucket()
    store = _store(bucket)
    record = UsedIds(f"g{i}" for i in range(300))
    assert "g1" in record  # (its filter made)
    used_ids.freeze_filters()
    state = snapshots.pickled(record)
    keys, optional, _ = snapshots.named_in(state)
    assert keys and optional
    get = bucket.get

    async def flaky(name: str, writeinto: io.BytesIO) -> None:
        if any(name.endswith(key) for key in optional):
            raise ConnectionError("the server went away")
        await get(name, writeinto)

    async def run() -> Snapshot | None:
        await store.save("admission", 7, Snapshot.encode_pickled("admission", 7, "fp", state),
                         snapshots.runs_to_save(None, keys + optional))
        bucket.get = flaky  # type: ignore[method-assign]
        before = used_ids.use_store(MemoryRuns())  # a new process: everything fetched
        try:
            loaded, skipped = await snapshots.load_newest(store, "admission", "fp")
        finally:
            used_ids.use_store(before)
        assert not skipped
        return loaded

    loaded = anyio.run(run, backend="asyncio")
    assert loaded is not None and loaded.state == record


class _SlowRunDeletes(FakeBucket):
    """Deletes of run objects wait for `go`: another process's collection that listed the bucket
    before a snapshot was put, and deletes after that save's second look."""

    def __init__(self) -> None:
        super().__init__()
        self.go = anyio.Event()

    async def delete(self, name: str) -> None:
        if ".id-runs." in name:
            await self.go.wait()
        await super().delete(name)


def test_a_run_deleted_by_another_process_just_after_the_second_look_is_put_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Session 19's review: the second look alone missed a collection (its own lock, in another
    process) that listed before the snapshot's put and deleted after the look."""
    monkeypatch.setattr(snapshot_stores, "LATE_LOOK", 0.5)
    bucket = _SlowRunDeletes()
    admission = _store(bucket)
    tree = _store(bucket, "another process")
    record = UsedIds(f"g{i}" for i in range(300))
    state = snapshots.pickled(record)
    runs = snapshots.runs_to_save(None, snapshots.split_pickled(state)[0])

    async def run() -> None:
        bucket.clock -= timedelta(seconds=snapshots.RUN_GRACE + 60)
        await admission.store_runs(runs)  # stored as they sealed, long ago
        bucket.clock += timedelta(seconds=snapshots.RUN_GRACE + 60)

        async def deletes_after_the_second_look() -> None:
            while "S.admission.7" not in bucket.objects:
                await anyio.sleep(0.005)
            await anyio.sleep(0.1)
            bucket.go.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(tree._collect, set())  # lists now: admission's snapshot not there yet
            await anyio.sleep(0.01)
            tg.start_soon(deletes_after_the_second_look)
            await admission.save("admission", 7, Snapshot.encode_pickled("admission", 7, "fp", state), runs)

    anyio.run(run, backend="asyncio")
    named = snapshots.runs_named(Snapshot.header(bucket.objects["S.admission.7"][0]))
    assert named and all(f"S.id-runs.{key}" in bucket.objects for key in named)
