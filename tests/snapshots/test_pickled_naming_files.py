"""A state sent to another process that reads the same run files (a replay's child) goes with its
runs and filters as keys (`snapshots.pickled_naming_files`), never their arrays, and comes back
with its runs read from those files (`unpickled_from_files`), which stay the owner's."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.common import snapshots
from services.common.id_runs import FileFilter, FileRun, FileRuns
from services.tree.domain import used_ids
from services.tree.domain.used_ids import UsedIds


@pytest.fixture(autouse=True)
def small_runs(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(used_ids, "SEAL_AT", 1_000)
    yield


def _record(directory: Path) -> UsedIds:
    record = UsedIds((f"gang-{i:09d}" for i in range(20_000)), store=FileRuns(directory))
    assert "gang-000000001" in record  # (its filter made)
    record.freeze()
    return record


def test_the_runs_go_as_keys_and_come_back_from_the_files(tmp_path: Path) -> None:
    record = _record(tmp_path / "parent")
    plain = pickle.dumps(["start", record], protocol=pickle.HIGHEST_PROTOCOL)
    data = snapshots.pickled_naming_files(["start", record])
    assert len(data) < len(plain) // 20  # (the plain pickle carries 12 bytes an id)
    child = FileRuns(tmp_path / "parent", owned=False)
    kind, loaded = snapshots.unpickled_from_files(data, child)
    assert kind == "start" and loaded == record
    assert loaded.runs and all(isinstance(run, FileRun) for run in loaded.runs)
    assert isinstance(loaded._frozen, FileFilter)
    files = sorted(p.name for p in (tmp_path / "parent").iterdir())
    del loaded  # let go in the reading process: the owner's files stay
    assert sorted(p.name for p in (tmp_path / "parent").iterdir()) == files
    assert "gang-000019999" in record


def test_a_run_missing_from_the_files_is_corrupt(tmp_path: Path) -> None:
    record = _record(tmp_path / "parent")
    data = snapshots.pickled_naming_files(record)
    with pytest.raises(snapshots.Corrupt):
        snapshots.unpickled_from_files(data, FileRuns(tmp_path / "elsewhere", owned=False))
