"""A replay keeps its id records' runs in a store of its own (`used_ids.storing_in`, in its task)
without swapping the process's: replays that overlap in one process, and the process's other
records, each keep theirs. Its child reads the snapshots' runs from the parent's files, sent as
keys, never as arrays (`worker._started`)."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from services.common import id_runs, snapshots
from services.common.folding import anchor_of
from services.common.log import Stored
from services.common.memlog import MemoryLog
from services.common.snapshots import MemorySnapshots, Snapshot, code_fingerprint
from services.tools.replay.reader import runs_on_disk, verify_log
from services.tools.replay.verify import Verifier, command_refusals
from services.tools.replay_process import ChildProcess
from services.tree.domain import used_ids
from services.tree.domain.used_ids import MemoryRun, MemoryRuns, UsedIds
from tests.replay.biglog import build


@pytest.fixture(autouse=True)
def small_runs(monkeypatch: pytest.MonkeyPatch) -> Iterator[MemoryRuns]:
    monkeypatch.setattr(used_ids, "SEAL_AT", 32)
    process = MemoryRuns()
    before = used_ids.use_store(process)
    yield process
    used_ids.use_store(before)


def _log(gangs: int, seconds: float = 1.0) -> MemoryLog:
    log = MemoryLog()
    anyio.run(lambda: build(log, gangs, per_round=20, leaves=3, seconds=seconds), backend="asyncio")
    return log


def test_runs_on_disk_overlapping_leave_the_process_store_as_it_was(small_runs: MemoryRuns) -> None:
    a, b = runs_on_disk(), runs_on_disk()
    a.__enter__()
    b.__enter__()
    a.__exit__(None, None, None)
    b.__exit__(None, None, None)
    assert used_ids.current_store() is small_runs


def test_overlapping_replays_and_the_process_s_records_keep_their_own_runs(small_runs: MemoryRuns) -> None:
    log = _log(200)
    service = UsedIds(f"a{i}" for i in range(100))  # a record of the process (a service's)
    reports = []

    async def run() -> None:
        async def replay() -> None:
            reports.append(await verify_log(log, process_from=10**9, chunk=200))

        async def service_goes_on() -> None:
            for i in range(200):
                service.add(f"b{i}")
                await anyio.sleep(0)

        async with anyio.create_task_group() as tg:
            tg.start_soon(replay)
            tg.start_soon(replay)
            tg.start_soon(service_goes_on)

    anyio.run(run, backend="asyncio")
    assert len(reports) == 2 and all(report.ok for report in reports)
    assert used_ids.current_store() is small_runs
    assert service.runs and all(isinstance(run, MemoryRun) for run in service.runs)
    state = snapshots.pickled(service)  # the service's next snapshot finds its runs
    assert snapshots.runs_to_save(None, snapshots.split_pickled(state)[0])
    assert all(isinstance(run, MemoryRun) for run in UsedIds(f"c{i}" for i in range(100)).runs)


def _admission_state(messages: list[Stored], cut: int) -> Any:
    verifier = Verifier(command_refusals(messages))
    verifier.feed([m for m in messages if m.seq <= cut])
    assert verifier.derivation is not None
    return verifier.derivation.admission.state  # type: ignore[attr-defined]


def test_the_child_gets_the_snapshots_runs_as_keys_of_the_parent_s_files(monkeypatch: pytest.MonkeyPatch) -> None:
    log = _log(300, seconds=900.0)  # (an hour of log time in 4 rounds: finished gangs are forgotten)
    started: list[tuple[Any, ...]] = []
    send = ChildProcess.send

    def sending(self: ChildProcess, message: Any) -> None:
        if message[0] == "start":
            started.append(message)
            _, _, _, sent, source, _, _ = message
            assert isinstance(sent, bytes) and source is not None
            (state,) = [s.state for s in snapshots.unpickled_from_files(sent, id_runs.FileRuns(source, owned=False))]
            runs = [run for rt in state.trees.values() for run in rt.forgotten_tasks.runs]
            assert runs and all(isinstance(run, id_runs.FileRun) for run in runs)
            assert b"MemoryRun" not in sent and b"MemoryRun" in pickle.dumps(runs)  # (no run's arrays sent)
        send(self, message)

    monkeypatch.setattr(ChildProcess, "send", sending)

    async def run() -> tuple[bool, dict[str, int], int]:
        messages = await log.read(1)
        cut = messages[len(messages) * 2 // 3].seq
        state = _admission_state(messages, cut)
        assert any(rt.forgotten_tasks.runs for rt in state.trees.values()), "no run to send"
        store = MemorySnapshots()
        data = Snapshot("admission", cut, code_fingerprint(), state, [], await anchor_of(log, cut)).encode()
        await store.save("admission", cut, data, snapshots.runs_to_save(None, Snapshot.header(data)["runs"]))
        report = await verify_log(log, from_seq=cut, snapshots=store, process_from=1, chunk=500)
        return report.ok, report.starts, cut

    ok, starts, cut = anyio.run(run, backend="asyncio")
    assert len(started) == 1
    assert ok and starts["admission"] == cut
