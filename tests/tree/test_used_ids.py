"""`UsedIds`: a grow-only set of ids, ~1.3 bytes an id in memory and its runs in a store; the
same answers as a set of strings, whatever the store, across seals, merges, copies and pickles."""

from __future__ import annotations

import copy
import itertools
import math
import pickle
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.common.id_runs import FileRuns
from services.tree.domain import used_ids
from services.tree.domain.used_ids import MemoryRuns, UsedIds, digest, digests_of


@given(st.lists(st.binary(max_size=40), min_size=1, max_size=30))
def test_the_vectorised_digest_is_the_scalar_one(ids: list[bytes]) -> None:
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
