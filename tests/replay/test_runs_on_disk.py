"""A replay keeps the id record's runs in files of a temporary directory of its own (not in its
heap, which would grow with the history), removed when it ends; a process that keeps its runs in
files already (a service's) keeps its store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from services.common import id_runs
from services.common.memlog import MemoryLog
from services.tools.replay import reader
from services.tools.replay.reader import verify_log
from services.tools.replay_process import ChildProcess
from services.tree.domain import used_ids
from tests.replay.biglog import build


def _log(gangs: int) -> MemoryLog:
    log = MemoryLog()
    anyio.run(lambda: build(log, gangs, per_round=50, leaves=3), backend="asyncio")
    return log


@pytest.fixture
def written(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The directories run files are written to; runs sealed every 32 ids (a small log has some)."""
    monkeypatch.setattr(used_ids, "SEAL_AT", 32)
    where: list[Path] = []
    write = id_runs.FileRuns.write

    def recording(self: id_runs.FileRuns, *args: Any) -> used_ids.Run:
        where.append(self.directory)
        return write(self, *args)

    monkeypatch.setattr(id_runs.FileRuns, "write", recording)
    return where


def test_the_runs_are_files_of_a_directory_removed_at_the_end(written: list[Path]) -> None:
    log = _log(300)
    before = used_ids.current_store()
    assert isinstance(before, used_ids.MemoryRuns)
    report = anyio.run(lambda: verify_log(log, process_from=10**9), backend="asyncio")
    assert report.ok and report.shared
    assert written, "no run was written to a file"
    directories = {path.parent for path in written}
    assert len(directories) == 1
    (directory,) = directories
    assert directory.name.startswith("poolwise-replay-")
    assert not directory.exists()  # removed
    assert used_ids.current_store() is before  # the process's own store again


def test_a_process_keeping_its_runs_in_files_keeps_its_store(written: list[Path], tmp_path: Path) -> None:
    log = _log(300)
    own = id_runs.FileRuns(tmp_path / "id-runs")
    before = used_ids.use_store(own)
    try:
        report = anyio.run(lambda: verify_log(log, process_from=10**9), backend="asyncio")
        assert used_ids.current_store() is own
    finally:
        used_ids.use_store(before)
    assert report.ok
    assert written and set(written) == {own.directory}


def test_the_child_keeps_its_runs_in_the_replays_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    log = _log(120)
    given: list[Path | None] = []
    exists: list[bool] = []
    send = ChildProcess.send

    def sending(self: ChildProcess, message: Any) -> None:
        if message[0] == "start":
            given.append(message[-1])
        elif message[0] == "finish" and given and given[0] is not None:
            exists.append((given[0] / id_runs.DIRECTORY).is_dir())  # the child made its store there
        send(self, message)

    monkeypatch.setattr(ChildProcess, "send", sending)
    report = anyio.run(lambda: verify_log(log, process_from=1, chunk=100), backend="asyncio")
    assert report.ok
    assert len(given) == 1 and given[0] is not None
    assert given[0].parent.name.startswith("poolwise-replay-") and given[0].name == "child"
    assert exists == [True]
    assert not given[0].parent.exists()  # removed with the replay's directory


def test_runs_on_disk_removes_its_directory_when_the_replay_fails() -> None:
    with pytest.raises(RuntimeError), reader.runs_on_disk() as directory:
        assert directory is not None and directory.is_dir()
        (directory / "id-runs" / "left.run").write_bytes(b"x")
        raise RuntimeError("the replay failed")
    assert directory is not None and not directory.exists()
    assert isinstance(used_ids.current_store(), used_ids.MemoryRuns)
