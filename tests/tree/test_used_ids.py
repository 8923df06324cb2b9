"""`UsedIds`: a grow-only set of ids, ~1.3 bytes an id in memory and its runs in a store; the
same answers as a set of strings, whatever the store, across seals, merges, copies and pickles."""

from __future__ import annotations

import copy
import itertools
import math
import os
import pickle
import random
import subprocess
import sys
import tracemalloc
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.common.id_runs import FileRun, FileRuns
from services.tree.domain import used_ids
from services.tree.domain.used_ids import MemoryRuns, UsedIds, digest, digests_of


@given(st.lists(st.binary(max_size=40), min_size=1, max_size=30))
def test_the_vectorised_digest_is_the_scalar_one(ids: list[bytes]) -> None:
    assert [int(d) for d in digests_of(ids)] == [digest(i) for i in ids]


@given(st.lists(st.binary(max_size=60), min_size=1, max_size=30))
def test_the_vectorised_digest_is_the_scalar_one_with_long_ids_alone(ids: list[bytes]) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(used_ids, "LONG_ID", 20)  # (ids of 21 bytes and more digested alone)
        assert [int(d) for d in digests_of(ids)] == [digest(i) for i in ids]


def test_digests_are_fixed_numbers() -> None:
    """The same in every process and every version: a log's readers must agree (a change here
    changes which ids read as used after a restart from a snapshot)."""
    assert digest(b"") == 0
    assert digest(b"gang-00000001") == 990701455465918358
    assert digest(b"12345678") == 7784157390450890505


@given(st.lists(st.text(max_size=12), max_size=200), st.lists(st.text(max_size=12), max_size=50))
def test_membership_is_a_sets_across_seals(added: list[str], asked: list[str]) -> None:
    ids = UsedIds()
    for id_ in added:
        ids.add(id_)
        ids._seal() if len(added) % 3 == 0 else None  # sealed often (runs merged), or left as strings
    for id_ in [*added, *asked]:
        assert (id_ in ids) == (id_ in set(added))
    assert len(ids) == len(set(added))


@pytest.fixture
def small_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs of a few ids, blocks of 4 and a small filter: every path taken with few ids."""
    monkeypatch.setattr(used_ids, "SEAL_AT", 16)
    monkeypatch.setattr(used_ids, "BLOCK", 4)
    monkeypatch.setattr(used_ids, "MIN_FILTER_IDS", 8)
    monkeypatch.setattr(used_ids, "CHUNK", 8)


@pytest.mark.usefixtures("small_runs")
@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(max_size=6), max_size=400), st.lists(st.text(max_size=6), max_size=100),
       st.booleans())
def test_with_runs_in_files_or_memory_the_answers_are_a_sets(added: list[str], asked: list[str],
                                                             files: bool) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        store = FileRuns(Path(directory)) if files else MemoryRuns()
        ids = UsedIds(store=store)
        for id_ in added:
            ids.add(id_)
        for id_ in [*added, *asked]:
            assert (id_ in ids) == (id_ in set(added))
        assert len(ids) == len(set(added))
        assert ids == set(added)
        assert sum(run.count for run in ids.runs) <= len(set(added))


@pytest.mark.usefixtures("small_runs")
def test_runs_merge_geometrically(tmp_path: Path) -> None:
    """Each run is more than twice the size of the next one (newer): O(log n) runs; a run merged
    away is deleted, and the files left are the runs held."""
    ids = UsedIds(store=FileRuns(tmp_path))
    for i in range(5_000):
        ids.add(f"g{i}")
    counts = [run.count for run in ids.runs]
    assert all(a > 2 * b for a, b in itertools.pairwise(counts)), counts
    assert len(counts) <= math.log2(5_000 / 16) + 1
    assert sorted(p.name for p in tmp_path.glob("*.run")) == sorted(f"{run.key}.run" for run in ids.runs)
    assert all(f"g{i}" in ids for i in range(5_000)) and not any(f"h{i}" in ids for i in range(5_000))


def test_a_fresh_id_is_turned_away_by_the_filter_most_of_the_time(tmp_path: Path) -> None:
    """200,000 ids: ~1.3 bytes an id in memory (the filter and the indexes), the runs in files;
    of 20,000 fresh ids at most ~2% are looked up in the runs."""
    ids = UsedIds((f"gang-{i:08d}" for i in range(200_000)), store=FileRuns(tmp_path))
    ids._seal()
    assert all(f"gang-{i:08d}" in ids for i in range(0, 200_000, 101))
    assert sum(f"new-{i}" in ids for i in range(20_000)) == 0
    passed = sum(ids._maybe_sealed(zlib.crc32(f"new-{i}".encode())) for i in range(20_000))
    assert passed < 0.025 * 20_000
    assert ids.nbytes < 2.5 * 200_000  # the filter made for 1.5x the ids: 15 bits an id at most
    assert sum(p.stat().st_size for p in tmp_path.glob("*.run")) >= 12 * 200_000


def test_equality_with_a_set() -> None:
    ids = UsedIds(["a", "b"])
    assert ids == {"a", "b"} and ids != {"a"} and "c" not in ids


@pytest.mark.usefixtures("small_runs")
def test_copies_and_pickles_answer_the_same_and_part_ways(tmp_path: Path) -> None:
    """A what-if's copy shares the runs (immutable) and adds on its own; a plain pickle holds the
    runs' arrays (a snapshot's holds their keys: tests/snapshots/test_id_runs.py)."""
    ids = UsedIds((f"g{i}" for i in range(300)), store=FileRuns(tmp_path))
    copied = copy.deepcopy(ids)
    copied.add("new")
    assert "new" in copied and "new" not in ids and all(f"g{i}" in copied for i in range(300))
    loaded = pickle.loads(pickle.dumps(ids))
    assert loaded == ids and all(f"g{i}" in loaded for i in range(300)) and "new" not in loaded


@pytest.mark.usefixtures("small_runs")
def test_a_run_file_that_does_not_match_its_key_is_not_used(tmp_path: Path) -> None:
    ids = UsedIds((f"g{i}" for i in range(100)), store=FileRuns(tmp_path))
    run = ids.runs[0]
    path = tmp_path / f"{run.key}.run"
    data = bytearray(path.read_bytes())
    data[0] ^= 1
    fresh = FileRuns(tmp_path)  # a new process: nothing alive
    path.unlink()
    path.write_bytes(bytes(data))
    assert fresh.local(run.key) is None and not path.exists()
    assert fresh.local("0" * 32) is None


@pytest.mark.usefixtures("small_runs")
@pytest.mark.parametrize("files", [False, True])
def test_a_stored_filter_is_taken_only_by_the_ids_it_was_made_for(tmp_path: Path, files: bool) -> None:
    """`freeze` stores the filter as it stands (once while unchanged); a record loaded with it
    takes it as its own; with the filter of fewer sealed ids (one that would turn the newer ones
    away) it makes its own from the runs."""
    store = FileRuns(tmp_path) if files else MemoryRuns()
    ids = UsedIds((f"g{i}" for i in range(300)), store=store)
    assert "h" not in ids
    ids.freeze()
    old = ids._frozen
    assert old is not None and old.sealed == ids._sealed and bytes(old.bits()) == bytes(ids._bits)
    ids.freeze()
    assert ids._frozen is old
    if files:
        assert (tmp_path / f"{old.key}.filter").stat().st_size == len(b"".join(old.byte_chunks()))
    loaded = UsedIds.__new__(UsedIds)
    loaded.__setstate__(ids.__getstate__())
    assert loaded._frozen is old and loaded._capacity == ids._capacity
    for i in range(300, 400):
        ids.add(f"g{i}")
    assert ids._frozen is None  # (sealed since: changed)
    recent, runs, sealed, _ = ids.__getstate__()
    stale = UsedIds.__new__(UsedIds)
    stale.__setstate__((recent, runs, sealed, old))
    assert stale._frozen is None and stale._capacity == 0
    assert all(f"g{i}" in stale for i in range(400)) and not any(f"h{i}" in stale for i in range(400))
    copied = copy.deepcopy(loaded)
    copied.add("new")
    assert "new" in copied and "new" not in loaded and all(f"g{i}" in copied for i in range(300))


# --- an I/O error while sealing, a long id, the same answers everywhere, keys, a large filter ----


class FailingOnce(MemoryRuns):
    """A store whose `fail`-th write raises OSError (a disk full): the first seal's, or a merge's."""

    def __init__(self, fail: int) -> None:
        super().__init__()
        self.fail, self.writes = fail, 0

    def write(self, digests: Any, crcs: Any) -> Any:
        self.writes += 1
        if self.writes == self.fail:
            raise OSError(28, "No space left on device")
        return super().write(digests, crcs)


class FilesFailingOnce(FileRuns):
    fail = 1
    writes = 0

    def write(self, digests: Any, crcs: Any) -> Any:
        self.writes += 1
        if self.writes == self.fail:
            raise OSError(24, "Too many open files")
        return super().write(digests, crcs)


@pytest.mark.usefixtures("small_runs")
@pytest.mark.parametrize("fail", [1, 2, 3], ids=["the first run", "the second run", "their merge"])
@pytest.mark.parametrize("files", [False, True], ids=["memory", "files"])
def test_an_io_error_while_sealing_loses_no_id(tmp_path: Path, fail: int, files: bool) -> None:
    """A write that fails once (the new run's, or a merge's): every id added still reads as used,
    through the filter too (made before the failure and after it), and nothing of the add raises;
    later seals go on (a run held in memory is merged into the store's later)."""
    if files:
        store: MemoryRuns | FileRuns = FilesFailingOnce(tmp_path)
        store.fail = fail  # type: ignore[union-attr]
    else:
        store = FailingOnce(fail)
    ids = UsedIds(store=store)
    added = [f"gang-{i}" for i in range(32)]
    for id_ in added:
        ids.add(id_)
        assert "fresh" not in ids  # (the filter made as the seals go)
    assert all(id_ in ids for id_ in added) and not any(f"gang-{i}" in ids for i in range(32, 200))
    assert ids._sealed == 32 and not ids._recent and ids == set(added)
    assert {run.key for run in ids.runs} <= {run.key for run in store.alive()}  # (what a snapshot may name)
    rebuilt = pickle.loads(pickle.dumps(ids))  # the filter made again from the runs
    assert all(id_ in rebuilt for id_ in added)
    more = [f"more-{i}" for i in range(64)]
    for id_ in more:
        ids.add(id_)
    assert all(id_ in ids for id_ in [*added, *more]) and ids == {*added, *more}
    if files:
        assert all(isinstance(run, FileRun) for run in ids.runs)  # (what was held in memory, merged)


@pytest.mark.usefixtures("small_runs")
def test_a_failed_write_of_forgotten_task_ids_does_not_free_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """Admission forgets a finished gang while the disk is full: its task ids stay used, a new gang
    that reuses one is refused."""
    from tests.admission.builders import gang, pool, rejected, task, world

    monkeypatch.setattr(used_ids, "SEAL_AT", 2)
    store = FailingOnce(fail=1)
    before = used_ids.use_store(store)
    try:
        log = world(pool("/a", reservation={"cpu": 10}), gang_retention=60)
        log.feed(gang("g", "/a", tasks=2))
        log.tick(0)
        log.feed(task("g/0", "succeeded"), task("g/1", "succeeded"), at=10)
        log.tick(100)  # g forgotten: its task ids sealed, the write fails
        assert store.writes >= 1 and "g" not in log.rt.gangs
        assert "g/0" in log.rt.forgotten_tasks and "g/1" in log.rt.forgotten_tasks
        reuse = gang("h", "/a", tasks=1)
        reuse = reuse.model_copy(update={"tasks": [reuse.tasks[0].model_copy(update={"id": "g/1"})]})
        assert rejected(log.feed(reuse)) == [("h", "duplicate_task")]
    finally:
        used_ids.use_store(before)


def test_a_long_id_is_digested_in_bounded_memory() -> None:
    """One id of 200 KB among 2,000 short ones: the digests are the scalar ones, and what is made
    is about the ids' own size (not every id laid out at 200 KB: 400 MB)."""
    ids = [f"gang-{i}".encode() for i in range(1_000)] + [b"x" * 200_000] + [f"t-{i}/0".encode() for i in range(1_000)]
    ids += [bytes(range(n)) for n in range(0, 40)] + [b"y" * used_ids.LONG_ID, b"z" * (used_ids.LONG_ID + 1)]
    total = sum(map(len, ids))
    tracemalloc.start()
    try:
        found = digests_of(ids)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [int(d) for d in found] == [digest(i) for i in ids]
    assert peak < 4 * total + (1 << 20), (peak, total)


def _colliding(target: bytes, rng: random.Random) -> bytes:
    """An ASCII id of 16 bytes, not `target`, with `target`'s digest (the mix is invertible: the
    second word solved for a random first)."""
    m = (1 << 64) - 1
    k1_inverse, k2_inverse = pow(used_ids._K1, -1, 1 << 64), pow(used_ids._K2, -1, 1 << 64)

    def unxorshift(y: int, s: int) -> int:
        x = y
        for _ in range(64 // s + 1):
            x = y ^ (x >> s)
        return x & m

    h = digest(target) & m
    h = unxorshift(unxorshift(unxorshift(h, 31) * k2_inverse & m, 27) * k1_inverse & m, 30)
    h = unxorshift(h, 31) * k1_inverse & m  # what the second word was mixed into
    while True:
        first = bytes(rng.randrange(32, 127) for _ in range(8))
        h1 = ((16 * used_ids._K0 & m) ^ int.from_bytes(first, "little")) * used_ids._K1 & m
        second = (h1 ^ (h1 >> 31) ^ h).to_bytes(8, "little")
        if all(b < 128 for b in second) and first + second != target:
            assert digest(first + second) == digest(target)
            return first + second


@pytest.mark.usefixtures("small_runs")
def test_a_crafted_colliding_id_reads_the_same_live_restored_and_replayed() -> None:
    """An id whose digest is a used one's reads as used only if its CRC passes the filter: so the
    filter must be the same in a record grown live (asked about as it grew), one restored from its
    snapshot and one replayed (the same adds, nothing asked): its size follows from the ids sealed
    alone. Hundreds of crafted ids: each reads the same in all three."""
    from services.common.snapshots import Snapshot

    added = [f"gang-{i:011d}" for i in range(3 * 16 + 5)]
    live, replayed = UsedIds(), UsedIds()
    rng = random.Random(3)
    for at, id_ in enumerate(added):
        live.add(id_)
        replayed.add(id_)
        if at in (16, 40):
            assert "probe" not in live  # asked: the filter made then
    restored = Snapshot.decode(Snapshot("tree", 1, "test", live).encode()).state
    assert "probe" not in live
    live.freeze()  # (a snapshot naming the filter as it stands: a start takes it)
    assert live._frozen is not None and used_ids.fits(live._frozen, live._sealed)
    with_filter = Snapshot.decode(Snapshot("tree", 1, "test", live).encode()).state
    assert with_filter._frozen is live._frozen
    crafted = [_colliding(rng.choice(added).encode(), rng).decode() for _ in range(400)]
    answers = [(id_ in live, id_ in restored, id_ in replayed, id_ in with_filter) for id_ in crafted]
    assert all(a == b == c == d for a, b, c, d in answers)
    assert 0 < sum(a for a, _, _, _ in answers) < len(crafted)  # (some pass the filter, some do not)
    assert live._size == restored._size == replayed._size == used_ids._filter_size(
        used_ids._capacity_for(live._sealed))
    # a stored filter of another size for the same ids (made by other code) is not taken
    other = used_ids.MemoryFilter("x", bytes(live._bits), live._size, live._capacity + 1, live._sealed)
    assert not used_ids.fits(other, live._sealed)


@pytest.mark.usefixtures("small_runs")
def test_a_filter_that_cannot_be_stored_leaves_the_snapshot_without_it() -> None:
    """A disk full when a snapshot's shell stores the filters (`freeze_filters`): no error, the
    snapshot names no filter, and a start makes it from the runs."""
    from services.common.snapshots import Snapshot

    class NoRoom(MemoryRuns):
        def write_filter(self, bits: bytes, size: int, capacity: int, sealed: int) -> Any:
            raise OSError(28, "No space left on device")

    before = used_ids.use_store(NoRoom())
    try:
        ids = UsedIds(f"g{i}" for i in range(100))
        assert "h" not in ids and ids._capacity
        used_ids.freeze_filters()
        assert ids._frozen is None
        restored = Snapshot.decode(Snapshot("tree", 1, "test", ids).encode()).state
        assert all(f"g{i}" in restored for i in range(100)) and "h" not in restored
    finally:
        used_ids.use_store(before)


def test_a_runs_key_is_the_same_in_every_process() -> None:
    """The same ids make the same run, byte for byte, whatever PYTHONHASHSEED orders the set by."""
    script = ("from services.tree.domain import used_ids\n"
              "used_ids.SEAL_AT = 200\n"
              "ids = used_ids.UsedIds(f'gang-{i}' for i in range(200))\n"
              "print(*(run.key for run in ids.runs))\n")
    root = Path(__file__).resolve().parents[2]
    keys = {subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True, cwd=root,
                           env={**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(root)}).stdout.strip()
            for seed in ("1", "2", "3")}
    assert len(keys) == 1 and len(next(iter(keys))) == 32, keys


def test_a_large_filter_places_ids_as_the_scalar_check_does() -> None:
    """At 290M ids sealed the filter would pass 2^32 bits, where NumPy's uint64 product of a CRC
    and the size wraps: the size is capped, and the vectorised positions (sealing) are the scalar
    ones (checking)."""
    size = used_ids._filter_size(used_ids._capacity_for(290_000_000))
    assert 0 < size <= 1 << 32
    crcs = [0, 1, 0x7FFFFFFF, 0xFFFFFFF0, 0xFFFFFFFF]
    vectorised = used_ids._positions(np.array(crcs, dtype=np.uint32), size)
    for i, crc in enumerate(crcs):
        step = (crc * used_ids._PHI32 & used_ids._M32) | 1
        scalar = [((crc + k * step) & used_ids._M32) * size >> 32 for k in range(used_ids.FILTER_K)]
        assert [int(positions[i]) for positions in vectorised] == scalar
        assert all(at < size for at in scalar)
