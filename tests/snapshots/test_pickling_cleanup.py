"""A snapshot's state is pickled by a forked child into a temporary file with no name
(`folding.Pickling`): the child is reaped and nothing left in the temporary directory whatever
becomes of the save or its process, one cancelled before its task
took a step included (a task cancelled so never runs its `finally`)."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
import pytest

from events import Envelope
from services.admission.folder import SUBJECTS, AdmissionFolder
from services.common import log as log_module
from services.common.folding import Folder, Pickling, Saving, pickled_later, rebuild
from services.common.memlog import MemoryLog
from services.common.snapshots import MemorySnapshots, SnapshotPolicy, split_pickled
from tests.bench.test_pipeline_children import alive
from tests.replay.biglog import build


@pytest.fixture
def temp(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Where the picklings' files go (this test's own directory: others' are not counted)."""
    monkeypatch.setenv("POOLWISE_SNAPSHOT_FORK", "1")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def _reaped(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def _child_of(pickling: Pickling) -> int:
    pid = pickling._child.pid
    assert pid is not None, "the state was not pickled by a child"
    return pid


def _children() -> set[int]:
    """This process's child processes (zombies included)."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid():
            found.add(int(stat.parent.name))
    return found


def test_a_rebuild_save_cancelled_before_its_first_step_leaves_no_file_nor_child(
        temp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = MemoryLog()
    anyio.run(lambda: build(log, 300, per_round=50, leaves=3), backend="asyncio")
    monkeypatch.setattr(log_module, "READ_CHUNK", 100)  # (a rebuild looks where a piece ends)
    before = _children()
    started: list[int] = []
    due = Saving.if_due

    def stopped_once_due(self: Saving, folder: Folder, folded: int, made: dict[str, Envelope]) -> None:
        due(self, folder, folded, made)
        if self.busy:  # a save started (its child forked): the service is stopped at the next checkpoint
            started.append(folded)
            scopes[0].cancel()

    monkeypatch.setattr(Saving, "if_due", stopped_once_due)
    policy = SnapshotPolicy(MemorySnapshots(), every=200)

    scopes: list[anyio.CancelScope] = []

    async def run() -> None:
        with anyio.CancelScope() as scope:
            scopes.append(scope)
            await rebuild(log, AdmissionFolder(), SUBJECTS, policy.store, policy=policy)

    anyio.run(run, backend="asyncio")
    assert started, "no save was started"
    assert list(temp.iterdir()) == []
    assert _children() - before == set()


def test_a_save_whose_task_never_ran_is_closed_by_its_saving(temp: Path) -> None:
    """The save's task cancelled before its first step (its `finally` never runs): what `rebuild`
    does once its task group is done, `Saving.close`, reaps the child and deletes the file."""
    before = _children()

    async def run() -> None:
        policy = SnapshotPolicy(MemorySnapshots(), every=10)
        saving: Saving | None = None
        with anyio.CancelScope() as service:
            try:
                async with anyio.create_task_group() as tg:
                    saving = Saving(policy, MemoryLog(), tg, end=1000)
                    policy.started(0, 0.0, restored=0)
                    saving.if_due(AdmissionFolder(), 100, {})  # due: the child forked
                    service.cancel()  # the service is stopped ...
                    await anyio.sleep(0)  # ... at the fold's checkpoint
            finally:
                if saving is not None:
                    close = getattr(saving, "close", None)
                    if close is not None:
                        close()

    anyio.run(run, backend="asyncio")
    assert list(temp.iterdir()) == []
    assert _children() - before == set()


def test_a_pickling_let_go_unawaited_reaps_its_child_and_deletes_its_file(temp: Path) -> None:
    pickling = pickled_later({"state": list(range(1000))})
    pid = _child_of(pickling)
    del pickling
    gc.collect()
    assert list(temp.iterdir()) == []
    assert _reaped(pid)


def test_an_awaited_pickling_reads_the_state_and_leaves_nothing(temp: Path) -> None:
    pickling = pickled_later({"state": [1, 2, 3]})
    pid = _child_of(pickling)
    data = anyio.run(_awaited, pickling, backend="asyncio")
    assert data
    assert list(temp.iterdir()) == [] and _reaped(pid) and pickling.closed


async def _awaited(pickling: Pickling) -> bytes:
    return await pickling


def test_a_short_read_of_the_childs_file_is_read_on_to_its_end(temp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`pread` may return fewer bytes than asked (Linux at most 0x7ffff000 a call; POSIX anywhere):
    the parent reads on until the file's end, or a cut pickle would be saved as a snapshot that
    fails only when a start loads it (session 19's review)."""
    import pickle

    from services.common import folding

    state = {"gangs": [f"gang-{i:08d}" for i in range(100_000)]}
    real = os.pread
    monkeypatch.setattr(folding.os, "pread", lambda fd, n, at: real(fd, min(n, 1 << 16), at))
    data = anyio.run(_awaited, pickled_later(state), backend="asyncio")
    _, body = split_pickled(data)
    assert len(body) > 1 << 20 and pickle.loads(body) == state


_KILLED_PARENT = """
import os, signal, sys, tempfile
tempfile.tempdir = sys.argv[1]
os.environ["POOLWISE_SNAPSHOT_FORK"] = "1"
from services.common.folding import pickled_later
pickling = pickled_later({"state": list(range(300_000))})
print(pickling._child.pid, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_child_whose_parent_was_killed_leaves_no_file(temp: Path) -> None:
    """A service killed (kill -9) while its snapshot's child pickles: the file it writes has no
    name, so nothing is left in the temporary directory."""
    done = subprocess.run([sys.executable, "-c", _KILLED_PARENT, str(temp)], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2], check=False)
    assert done.returncode == -signal.SIGKILL, done.stderr
    child = int(done.stdout.split()[0])
    while alive(child):  # (the orphan finishes its pickle on its own)
        time.sleep(0.05)
    assert list(temp.iterdir()) == []

