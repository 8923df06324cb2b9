"""Snapshots with the id record's runs stored apart (format 3): a snapshot names its runs by key,
and a start takes them from its data dir when they are there (checked) or fetches them once from
the snapshot store; either way, snapshot and tail give the very decisions and state of the whole
fold. The golden workload of `test_snapshot_and_tail`, with runs of 16 ids (so that the gang ids
of the trees and the forgotten tasks are sealed into many runs and merged)."""

from __future__ import annotations

import contextlib
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from services.common.id_runs import FileRuns
from services.common.snapshots import (
    MemorySnapshots,
    Snapshot,
    load_newest,
    named_in,
    optional_named,
    pickled,
    runs_named,
    runs_to_save,
    split_pickled,
)
from services.tree.domain import used_ids
from services.tree.domain.used_ids import MemoryRuns
from tests.snapshots.test_snapshot_and_tail import Folders, Log, log, monkeypatch_module

__all__ = ["log", "monkeypatch_module"]  # (fixtures used here)


@pytest.fixture(scope="module")
def small_runs(monkeypatch_module: pytest.MonkeyPatch) -> None:
    monkeypatch_module.setattr(used_ids, "SEAL_AT", 16)
    monkeypatch_module.setattr(used_ids, "BLOCK", 4)
    monkeypatch_module.setattr(used_ids, "MIN_FILTER_IDS", 8)
    monkeypatch_module.setattr(used_ids, "CHUNK", 8)


@pytest.fixture
def store_in_use() -> Iterator[None]:
    before = used_ids.current_store()
    yield
    used_ids.use_store(before)


@pytest.fixture(scope="module")
def straight(log: Log, small_runs: None) -> tuple[list[str], list[str]]:
    before = used_ids.use_store(MemoryRuns())
    try:
        folders = Folders()
        decisions = folders.fold(log, 0, len(log))
        return decisions, folders.state_lines()
    finally:
        used_ids.use_store(before)


class Counting(MemorySnapshots):
    def __init__(self) -> None:
        super().__init__()
        self.fetched: list[str] = []

    async def fetch_run(self, key: str) -> bytes | None:
        self.fetched.append(key)
        return await super().fetch_run(key)


def save(store: MemorySnapshots, folders: Folders, at: int) -> dict[str, list[str]]:
    """Each folder's snapshot at `at`, saved as a service saves it: the keys of the runs named."""
    named = {}
    used_ids.freeze_filters()  # (as `folding.pickled_later` does: the snapshots name the filters)
    for folder in (folders.admission, folders.preemption):
        state = pickled(folder.export())
        keys = split_pickled(state)[0]
        data = Snapshot.encode_pickled(folder.service, at, "test", state)
        anyio.run(store.save, folder.service, at, data, runs_to_save(None, keys))
        named[folder.service] = keys
    return named


def load(store: MemorySnapshots) -> Folders:
    new = Folders()
    for theirs in (new.admission, new.preemption):
        found, skipped = anyio.run(load_newest, store, theirs.service, "test")
        assert found is not None, skipped
        theirs.load(found.state)
    return new


@pytest.mark.usefixtures("small_runs", "store_in_use")
@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("data_dir", ["fresh", "has the runs"])
def test_a_snapshot_with_runs_loads_on_any_data_dir_and_folds_as_the_whole(
        log: Log, straight: tuple[list[str], list[str]], tmp_path: Path, seed: int, data_dir: str) -> None:
    decisions, lines = straight
    cut = random.Random(seed).randrange(len(log) // 2, len(log))
    made_in = tmp_path / "made"
    used_ids.use_store(FileRuns(made_in))
    before = Folders()
    made = before.fold(log, 0, cut)
    store = Counting()
    named = save(store, before, cut)
    assert len(named["admission"]) >= 3  # sealed runs of gang ids (per tree) and forgotten tasks
    assert set(store.runs) == {key for keys in named.values() for key in keys}
    # a start: a new process (no run alive in it) on a data dir without the runs, or with them
    directory = tmp_path / "fresh" if data_dir == "fresh" else made_in
    used_ids.use_store(FileRuns(directory))
    after = load(store)
    if data_dir == "fresh":
        assert sorted(store.fetched) == sorted({key for keys in named.values() for key in keys})
        assert {p.stem for p in [*directory.glob("*.run"), *directory.glob("*.filter")]} >= set(store.fetched)
    else:
        assert store.fetched == []
    del before
    made += after.fold(log, cut, len(log))
    assert made == decisions
    assert after.state_lines() == lines


@pytest.mark.usefixtures("small_runs", "store_in_use")
def test_a_run_that_is_gone_or_altered_makes_the_snapshot_passed_over(log: Log, tmp_path: Path) -> None:
    used_ids.use_store(FileRuns(tmp_path / "made"))
    before = Folders()
    before.fold(log, 0, len(log) // 2)
    store = Counting()
    named = save(store, before, len(log) // 2)
    used_ids.use_store(FileRuns(tmp_path / "fresh"))
    key = named["admission"][0]
    store.runs[key] = store.runs[key][:-1] + bytes([store.runs[key][-1] ^ 1])
    found, skipped = anyio.run(lambda: load_newest(store, "admission", "test"))
    assert found is None and f"id run {key}" in skipped[0]
    del store.runs[key]
    found, skipped = anyio.run(lambda: load_newest(store, "admission", "test"))
    assert found is None and "gone" in skipped[0]


@pytest.mark.usefixtures("small_runs", "store_in_use")
def test_runs_no_kept_snapshot_names_are_deleted(log: Log) -> None:
    """Each run is stored once, and deleted with the last snapshot that names it."""
    used_ids.use_store(MemoryRuns())
    folders, store = Folders(), MemorySnapshots()
    cuts = sorted(random.Random(5).sample(range(100, len(log)), 6))
    start = 0
    for cut in cuts:
        folders.fold(log, start, cut)
        save(store, folders, cut)
        start = cut
        kept = {key for data in store.objects.values() for key in runs_named(Snapshot.header(data))}
        assert set(store.runs) == kept
    assert len(store.objects) == 2 * 3  # the newest three of each service


@pytest.mark.nats
@pytest.mark.anyio
@pytest.mark.usefixtures("small_runs", "store_in_use")
async def test_runs_in_the_object_store_are_stored_once_fetched_and_deleted(
        nats_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On JetStream: the runs beside the snapshots (`<stream>.id-runs.<key>`), named in each
    snapshot's description; a start on a fresh data dir fetches them; a save deletes the runs no
    kept snapshot names (here at once: no grace)."""
    import nats
    from nats.js.errors import NotFoundError

    from services.common import snapshot_stores
    from services.common.snapshots import ObjectStoreSnapshots

    monkeypatch.setattr(snapshot_stores, "RUN_GRACE", 0.0)
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    bucket = "poolwise_snapshots_id_runs_test"
    try:
        with contextlib.suppress(NotFoundError, Exception):
            await js.delete_object_store(bucket)
        store = ObjectStoreSnapshots(js, "S", bucket=bucket)
        used_ids.use_store(FileRuns(tmp_path / "made"))
        ids = used_ids.UsedIds()
        kept: list[list[str]] = []
        for seq in range(1, 6):
            for i in range(seq * 200):
                ids.add(f"s{seq}-{i}")
            state = pickled(ids)
            keys = split_pickled(state)[0]
            await store.save("admission", seq, Snapshot.encode_pickled("admission", seq, "test", state),
                             runs_to_save(None, keys))
            kept = [*kept, keys][-snapshot_stores.KEEP:]
            infos = await store._infos()
            runs = {str(i.name).rsplit(".", 1)[-1] for i in infos if ".id-runs." in str(i.name)}
            assert runs == {key for keys in kept for key in keys}
        used_ids.use_store(FileRuns(tmp_path / "fresh"))
        found, skipped = await load_newest(store, "admission", "test")
        assert found is not None, skipped
        assert found.state == ids and all(f"s5-{i}" in found.state for i in range(1000))
        assert {p.name for p in (tmp_path / "fresh").glob("*.run")} == {f"{key}.run" for key in kept[-1]}
    finally:
        with contextlib.suppress(Exception):
            await js.delete_object_store(bucket)
        await nc.close()


def _record_snapshot(tmp_path: Path, store: MemorySnapshots) -> tuple[used_ids.UsedIds, str]:
    """A record of 1,000 ids (runs and a filter in `<tmp_path>/made`), saved in `store` as a
    service saves it: its filter stored first; the filter's key."""
    used_ids.use_store(FileRuns(tmp_path / "made"))
    ids = used_ids.UsedIds(f"g{i}" for i in range(1_000))
    assert "h0" not in ids  # (the filter made, as checks make it)
    used_ids.freeze_filters()
    state = pickled(ids)
    data = Snapshot.encode_pickled("admission", 1, "test", state)
    anyio.run(store.save, "admission", 1, data, runs_to_save(None, split_pickled(state)[0]))
    optional = optional_named(Snapshot.header(data))
    assert ids._frozen is not None and optional == [ids._frozen.key]
    return ids, optional[0]


def _answers_as_made(found: Snapshot | None, skipped: list[str]) -> used_ids.UsedIds:
    assert found is not None, skipped
    loaded = found.state
    assert all(f"g{i}" in loaded for i in range(1_000)) and not any(f"h{i}" in loaded for i in range(1_000))
    return loaded


@pytest.mark.usefixtures("small_runs", "store_in_use")
@pytest.mark.parametrize("data_dir", ["fresh", "made"])
def test_a_start_takes_the_stored_filter_instead_of_making_it(tmp_path: Path, data_dir: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    store = Counting()
    ids, key = _record_snapshot(tmp_path, store)
    assert key in store.runs and key in runs_named(Snapshot.header(store.objects[("admission", 1)]))
    used_ids.use_store(FileRuns(tmp_path / data_dir))  # a new process: nothing alive in it
    made = []
    monkeypatch.setattr(used_ids.UsedIds, "_filter", lambda self: made.append(self))
    loaded = _answers_as_made(*anyio.run(lambda: load_newest(store, "admission", "test")))
    assert made == [] and bytes(loaded._bits) == bytes(ids._bits)
    assert (key in store.fetched) == (data_dir == "fresh")
    assert (tmp_path / data_dir / f"{key}.filter").exists()


@pytest.mark.usefixtures("small_runs", "store_in_use")
@pytest.mark.parametrize("how", ["altered in the store", "gone from the store", "altered in the data dir"])
def test_a_filter_gone_or_altered_is_made_again_from_the_runs(tmp_path: Path, how: str) -> None:
    """A filter is a cache of the runs: one that does not match its key is not used (the snapshot
    is, and the filter is made from its runs), never one that could turn a used id away."""
    store = Counting()
    ids, key = _record_snapshot(tmp_path, store)
    data_dir = tmp_path / "fresh"
    if how == "altered in the store":
        store.runs[key] = bytes([store.runs[key][0] ^ 0xFF]) + store.runs[key][1:]
    elif how == "gone from the store":
        del store.runs[key]
    else:
        data_dir = tmp_path / "made"
        path = data_dir / f"{key}.filter"
        altered = bytearray(path.read_bytes())
        altered[0] ^= 0xFF
        del ids  # (its files deleted when let go: written again as a process killed would leave them)
        path.write_bytes(bytes(altered))
        store.runs.pop(key)  # (so that only the data dir could give it)
    used_ids.use_store(FileRuns(data_dir))
    loaded = _answers_as_made(*anyio.run(lambda: load_newest(store, "admission", "test")))
    assert loaded._frozen is None  # made from the runs
    assert not (data_dir / f"{key}.filter").exists()


@pytest.mark.usefixtures("small_runs", "store_in_use")
def test_a_filter_that_cannot_be_stored_leaves_it_out_of_the_snapshot(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A filter is a cache: a disk too full for it costs the start that needs it a filter made
    from the runs, never the snapshot (nor the service: the snapshot is taken as it comes)."""
    from services.common.folding import pickled_later

    used_ids.use_store(FileRuns(tmp_path))
    ids = used_ids.UsedIds(f"g{i}" for i in range(1_000))
    assert "h0" not in ids

    def full(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(FileRuns, "write_filter", full)

    async def pickle_it() -> bytes:
        return await pickled_later(ids)

    runs, filters, _ = named_in(anyio.run(pickle_it))
    assert runs and filters == [] and ids._frozen is None


def test_a_snapshot_naming_thousands_of_runs_reads_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """1,900 records of one run each (a few hundred trees): a header of ~68 KB, read back whole
    (a limit of 64 KiB made it "no header": every start folded the whole log)."""
    monkeypatch.setattr(used_ids, "SEAL_AT", 4)
    state = [used_ids.UsedIds(f"t{t}-g{i}" for i in range(4)) for t in range(1_900)]
    data = Snapshot("admission", 10, "test", state).encode()
    assert data.index(b"\n") > 1 << 16
    assert len(runs_named(Snapshot.header(data))) == 1_900
    loaded = Snapshot.decode(data).state
    assert loaded == state and all(f"t{t}-g3" in loaded[t] for t in range(0, 1_900, 7))


@pytest.mark.parametrize("how", ["local", "adopt", "write"])
@pytest.mark.parametrize("kind", ["run", "filter"])
def test_a_file_deleted_by_another_process_as_it_is_taken_stays_readable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, how: str) -> None:
    """Another process sharing the data dir deletes a run's file, or a stored filter's (its sweep,
    or one it let go), right after this one checked or wrote it: it is read through the file this
    one opened."""
    from services.common import id_runs

    memory = MemoryRuns()
    bits = bytes(range(256)) * 4
    if kind == "run":
        ids = used_ids.UsedIds((f"g{i}" for i in range(40)), store=memory)
        ids._seal()
        made: Any = ids.runs[0]
    else:
        made = memory.write_filter(bits, 8 * 1024, 800, 700)
    data = b"".join(made.byte_chunks())
    path = tmp_path / f"{made.key}.{kind}"
    if how == "local":
        path.write_bytes(data)
        name = "_checked" if kind == "run" else "_checked_filter"
        checked = getattr(id_runs, name)

        def checked_then_gone(*args: object) -> object:
            found = checked(*args)
            path.unlink()
            return found

        monkeypatch.setattr(id_runs, name, checked_then_gone)
    else:
        replace = os.replace

        def replaced_then_gone(source: str, target: Path) -> None:
            replace(source, target)
            Path(target).unlink()

        monkeypatch.setattr(os, "replace", replaced_then_gone)
    store = FileRuns(tmp_path)
    if how == "local":
        found = store.local(made.key)
    elif how == "adopt":
        found = store.adopt(made.key, data)
    elif kind == "run":
        found = store.write(made.digest_chunks(), made.crc_chunks())
    else:
        found = store.write_filter(bits, 8 * 1024, 800, 700)
    assert found is not None and found.key == made.key and not path.exists()
    assert b"".join(found.byte_chunks()) == data
    if kind == "run":
        assert isinstance(found, id_runs.FileRun)
        assert [list(found.read_block(i)) for i in range(len(found.index))] == [
            list(made.read_block(i)) for i in range(len(made.index))]
    else:
        assert isinstance(found, id_runs.FileFilter) and found.bits() == bits


def test_a_service_start_raises_the_soft_limit_of_open_files(tmp_path: Path) -> None:
    """Each run held keeps its file open: a start (`id_runs.install`) raises the soft limit of
    open files (1,024 on most machines) to the hard one."""
    script = ("import resource, sys\n"
              "from pathlib import Path\n"
              "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
              "resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))\n"
              "from services.common import id_runs\n"
              "id_runs.install(Path(sys.argv[1]))\n"
              "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
              "print(soft, hard)\n")
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path)], check=True, capture_output=True, text=True,
                         cwd=root, env={**os.environ, "PYTHONPATH": str(root)}).stdout.split()
    soft, hard = int(out[0]), int(out[1])
    assert soft == min(hard, 1 << 20) and soft > 256, out


def test_a_reader_store_does_not_delete_the_owners_file_that_fails_its_check(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`FileRuns(..., owned=False)` (a replay's child on its parent's directory) never deletes the
    owner's files: a run whose content does not match its key is passed over (not used) and left
    where it is for its owner (session 19's review: the reader deleted it)."""
    monkeypatch.setattr(used_ids, "SEAL_AT", 100)
    directory = tmp_path / "id-runs"
    owner = FileRuns(directory)
    record = used_ids.UsedIds((f"g{i}" for i in range(300)), store=owner)
    key = record.runs[0].key
    path = owner._path(key)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] + bytes([data[len(data) // 2] ^ 0xFF]) + data[len(data) // 2 + 1:])
    assert FileRuns(directory, owned=False).local(key) is None
    assert path.exists()
    # The owner's own store still deletes a file that fails its check (a torn write of its own).
    assert FileRuns(directory).local(key) is None and not path.exists()
