"""Snapshots in the running service (`run_folder` with a `SnapshotPolicy`), on the in-memory log
and on JetStream's object store: a clean stop leaves a snapshot, a start folds only the tail after
it and decides what the whole fold decides; a corrupt snapshot, one made by other code, or one
made from another log (a stream deleted and made again under its name) is passed over, never
trusted."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import anyio
import pytest

from events import ClockTicked, Envelope, Event, at_seconds, decode_all
from events.subjects import STREAM
from services.admission.domain.gang_rows import gang_rows
from services.admission.folder import SUBJECTS, AdmissionFolder
from services.common.folding import Folder, fold_batch, run_folder
from services.common.jetstream import JetStreamLog
from services.common.log import EventLog
from services.common.memlog import MemoryLog
from services.common.snapshots import MemorySnapshots, ObjectStoreSnapshots, SnapshotPolicy, SnapshotStore
from services.tools.replay import verify
from services.tree.domain.used_ids import IdFilter, MemoryRuns, Run
from tests.admission.builders import gang, host, pool, task, tree
from tests.conftest import reset_stream

pytestmark = pytest.mark.anyio
SAFETY = 60.0


def inputs(phase: int) -> list[Envelope]:
    events: list[Event] = []
    if phase == 0:
        events += [tree(), host(cpu=100), pool("/a", reservation={"cpu": 50}), pool("/b", reservation={"cpu": 50})]
    events += [gang(f"g{phase}-{i}", "/a" if i % 2 else "/b", tasks=2, cpu=1) for i in range(6)]
    if phase:
        events += [task(f"g{phase - 1}-{i}/{k}", "succeeded", f"g{phase - 1}-{i}") for i in range(3) for k in range(2)]
    events.append(ClockTicked())
    return [Envelope(id=f"in-{phase}-{i}", time=at_seconds(10.0 * phase + 1), source="test", event=e)
            for i, e in enumerate(events)]


async def run_until_caught_up(log: EventLog, store: SnapshotStore) -> AdmissionFolder:
    """One incarnation of admission: start (from a snapshot if there is one), fold what is in the
    log, stop cleanly (which leaves a snapshot)."""
    folder = AdmissionFolder()
    await fold_until_quiet(log, store, folder)
    return folder


async def fold_until_quiet(log: EventLog, store: SnapshotStore, folder: Folder,
                           policy: SnapshotPolicy | None = None) -> None:
    """`folder` run as a service on `log` until the log is quiet, then stopped cleanly (a
    snapshot every 10 positions unless `policy` says otherwise)."""
    policy = policy or SnapshotPolicy(store, every=10, least=1)
    with anyio.fail_after(SAFETY):
        async with anyio.create_task_group() as tg:
            await tg.start(lambda task_status: run_folder(log, folder, SUBJECTS, durable="admission",
                                                          snapshots=policy, task_status=task_status))
            # caught up: the log has stopped growing (its decisions published) for a while
            end, quiet = -1, 0
            while quiet < 6:
                now = await log.last_seq()
                quiet = quiet + 1 if now == end else 0
                end = now
                await anyio.sleep(0.05)
            tg.cancel_scope.cancel()


def whole_fold(messages: Sequence[object]) -> AdmissionFolder:
    folder = AdmissionFolder()
    fold_batch(folder, messages, 0)  # type: ignore[arg-type]
    return folder


async def decisions_of(log: EventLog) -> list[str]:
    return [e.id for s in await log.read(1) for e in decode_all(s.data) if e.source == "admission"]


@pytest.fixture(params=["memory", "nats"])
async def setup(request: pytest.FixtureRequest) -> AsyncIterator[tuple[EventLog, SnapshotStore]]:
    if request.param == "memory":
        yield MemoryLog(), MemorySnapshots()
        return
    url = request.getfixturevalue("nats_url")
    log = await JetStreamLog.connect(url, stream=STREAM)
    await reset_stream(log)
    from nats.js import JetStreamContext

    js = JetStreamContext(log.nc)
    with contextlib.suppress(Exception):  # (none yet)
        await js.delete_object_store("poolwise_snapshots")
    try:
        yield log, ObjectStoreSnapshots(js, log.stream)
    finally:
        await log.close()


async def test_a_start_folds_only_the_tail_after_its_snapshot(setup: tuple[EventLog, SnapshotStore],
                                                              caplog: pytest.LogCaptureFixture) -> None:
    log, store = setup
    caplog.set_level(logging.INFO, logger="services.common.folding")
    await log.append(inputs(0))
    first = await run_until_caught_up(log, store)
    saved = await store.candidates("admission")
    assert saved and saved[0] >= first.state.last_seq  # the clean stop's snapshot, where it stopped
    await log.append(inputs(1))
    await log.append(inputs(2))
    caplog.clear()
    second = await run_until_caught_up(log, store)
    assert f"admission: started from its snapshot at {saved[0]}" in caplog.text
    # the same state and the same decisions as a fold of the whole log; nothing published twice
    messages = await log.read(1)
    reference = whole_fold(messages)
    assert gang_rows(second.state, "default") == gang_rows(reference.state, "default")
    assert {r["state"] for r in gang_rows(second.state, "default")} >= {"admitted", "done"}
    ids = await decisions_of(log)
    assert len(ids) == len(set(ids))
    report = verify(messages)  # (admission's decisions: preemption does not run here)
    assert [f.line() for f in report.findings if f.source == "admission"] == []
    assert report.counts["GangAdmitted"].matched == 18


async def test_a_corrupt_snapshot_is_passed_over(setup: tuple[EventLog, SnapshotStore],
                                                 caplog: pytest.LogCaptureFixture) -> None:
    log, store = setup
    await log.append(inputs(0))
    await run_until_caught_up(log, store)
    newest = (await store.candidates("admission"))[0]
    data = await store.fetch("admission", newest)
    assert data is not None
    await store.save("admission", newest + 1, data[:-50] + b"x" * 50)  # a newer one, broken
    await log.append(inputs(1))
    caplog.set_level(logging.INFO, logger="services.common.folding")
    second = await run_until_caught_up(log, store)
    assert f"admission@{newest + 1}: corrupt" in caplog.text
    assert f"started from its snapshot at {newest}" in caplog.text
    assert gang_rows(second.state, "default") == gang_rows(whole_fold(await log.read(1)).state, "default")


async def test_a_snapshot_of_another_log_is_passed_over(setup: tuple[EventLog, SnapshotStore],
                                                        caplog: pytest.LogCaptureFixture) -> None:
    log, store = setup
    await log.append(inputs(0))
    await run_until_caught_up(log, store)
    assert await store.candidates("admission")
    # the stream deleted and made again, with other inputs: the snapshot's position exists again
    if isinstance(log, JetStreamLog):
        await log.delete_stream()
        await log.ensure_stream()
    else:
        log = MemoryLog()  # another log, the same snapshots
    other = [e.model_copy(update={"id": "other-" + e.id}) for e in inputs(0)]
    await log.append([*other, *[e.model_copy(update={"id": "more-" + e.id}) for e in inputs(1)]])
    caplog.set_level(logging.INFO, logger="services.common.folding")
    second = await run_until_caught_up(log, store)
    assert "made from another log" in caplog.text
    assert "started from its snapshot" not in caplog.text
    assert gang_rows(second.state, "default") == gang_rows(whole_fold(await log.read(1)).state, "default")


async def test_a_snapshot_of_other_code_is_passed_over(setup: tuple[EventLog, SnapshotStore],
                                                       caplog: pytest.LogCaptureFixture,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import services.common.folding as folding

    log, store = setup
    await log.append(inputs(0))
    await run_until_caught_up(log, store)
    monkeypatch.setattr(folding, "code_fingerprint", lambda: "changed-code")
    import services.common.snapshots as snapshots

    monkeypatch.setattr(snapshots, "code_fingerprint", lambda: "changed-code")
    caplog.set_level(logging.INFO, logger="services.common.folding")
    await run_until_caught_up(log, store)
    assert "made by other code" in caplog.text
    assert "started from its snapshot" not in caplog.text



async def test_a_start_that_folded_the_log_again_keeps_it_at_a_clean_stop(
        setup: tuple[EventLog, SnapshotStore], caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """After an upgrade (the snapshots made by other code), a start folds the log from the start;
    a clean stop keeps that fold although nothing new came meanwhile, so the start after it
    loads a snapshot instead of folding the whole history once more (a quiet 1M-gang system
    folded it at every restart)."""
    import services.common.folding as folding
    import services.common.snapshots as snapshots

    log, store = setup
    await log.append(inputs(0))
    await log.append(inputs(1))
    await run_until_caught_up(log, store)
    end = await log.last_seq()
    monkeypatch.setattr(folding, "code_fingerprint", lambda: "upgraded")
    monkeypatch.setattr(snapshots, "code_fingerprint", lambda: "upgraded")
    caplog.set_level(logging.INFO, logger="services.common.folding")
    await run_until_caught_up(log, store)  # folds everything again, then stops with nothing new
    assert "made by other code" in caplog.text
    assert await log.last_seq() == end  # (nothing was decided or appended meanwhile)
    caplog.clear()
    await run_until_caught_up(log, store)
    assert f"admission: started from its snapshot at {end}" in caplog.text

@pytest.mark.nats
@pytest.mark.parametrize("saving", ["as_usual", "held"])
async def test_the_tree_service_starts_from_its_snapshot(nats_url: str, caplog: pytest.LogCaptureFixture,
                                                         monkeypatch: pytest.MonkeyPatch, saving: str) -> None:
    """A clean stop leaves a snapshot, also when it comes while a snapshot is being saved: the
    tree snapshots right after a batch, so the stop that follows the batch finds one started at
    its own position, and cancels it with the service. (It once counted as kept: no snapshot at
    all when the stop beat the save, which a loaded machine made likely; `held` makes it certain.)"""
    from services.tree.service import TreeView, serve_tree

    monkeypatch.setenv("POOLWISE_SNAPSHOT_EVERY", "5")
    cancelled: list[int] = []  # the saves a stop cut short (in `held`; for the failure's message)
    if saving == "held":  # every save takes a while: a stop always comes while one is saved
        original = ObjectStoreSnapshots.save

        async def held(self: ObjectStoreSnapshots, service: str, seq: int, data: bytes,
                       runs: Mapping[str, Run] | None = None) -> None:
            try:
                await anyio.sleep(0.5)
            except anyio.get_cancelled_exc_class():
                cancelled.append(seq)
                raise
            await original(self, service, seq, data, runs)

        monkeypatch.setattr(ObjectStoreSnapshots, "save", held)
    log = await JetStreamLog.connect(nats_url, stream=STREAM)
    await reset_stream(log)
    from nats.js import JetStreamContext

    js = JetStreamContext(log.nc)
    with contextlib.suppress(Exception):  # (earlier tests' snapshots on the session's server)
        await js.delete_object_store("poolwise_snapshots")
    caplog.set_level(logging.INFO)
    try:
        await log.append(inputs(0))
        for phase in (1, 2):
            with anyio.fail_after(SAFETY):
                async with anyio.create_task_group() as tg:
                    svc = await tg.start(lambda task_status: serve_tree(log, None, task_status=task_status))
                    await log.append(inputs(phase))
                    while not all(f"g{phase}-{i}" in svc.state.tree().seen_gangs for i in range(6)):
                        await anyio.sleep(0.05)
                    tg.cancel_scope.cancel()
        found = await ObjectStoreSnapshots(js, log.stream).candidates("tree")
        # the first run's snapshot (its clean stop's, if not one saved while it ran)
        assert svc.started_from is not None and svc.started_from > 0, (found, cancelled, caplog.text)
        reference = TreeView()
        reference.fold(await log.read(1))
        assert svc.view.position == reference.position and svc.view.subject_seq == reference.subject_seq
        assert svc.state.tree().unfinished == reference.state.tree().unfinished
        assert all(f"g2-{i}" in svc.state.tree().seen_gangs for i in range(6))
    finally:
        await log.close()


async def test_snapshots_of_an_older_log_do_not_push_out_the_new_ones(setup: tuple[EventLog, SnapshotStore]) -> None:
    """A stream made again under its name starts at position 1: snapshots of the old log at higher
    positions must not count among the newest kept (they once pushed every new snapshot out)."""
    log, store = setup
    for stale in (900_000, 900_001, 900_002, 900_003):
        await store.save("admission", stale, b"stale")
    await log.append(inputs(0))
    await run_until_caught_up(log, store)
    saved = await store.candidates("admission")
    assert saved and max(saved) < 900_000  # the new log's snapshot kept, the old log's gone


async def test_a_rebuild_cut_short_resumes_from_the_snapshot_it_saved(caplog: pytest.LogCaptureFixture,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A start that folds the log again saves snapshots as it goes (every `every` positions); one
    stopped after a snapshot (a crash, a kill) starts next from it, not from the start, and
    publishes and holds what the whole fold does. The log holds inputs only, so that the fold's
    decisions are all still to publish when the snapshot is taken (its pending)."""
    import services.common.log as log_module
    from services.common.folding import rebuild

    monkeypatch.setattr(log_module, "READ_CHUNK", 4)  # (pieces of 4 positions: a snapshot every 10)
    reference, log = MemoryLog(), MemoryLog()
    for phase in range(4):
        await reference.append(inputs(phase))
        await log.append(inputs(phase))
    end = await log.last_seq()
    await run_until_caught_up(reference, MemorySnapshots())

    store = MemorySnapshots()
    real_read = log.read

    async def stalls_once_saved(start: int, subjects: Sequence[str] = (), end_seq: int | None = None) -> list[Any]:
        if start > 20:  # (past the first snapshot, due at 12: killed here once it is saved)
            await anyio.sleep_forever()
        return await real_read(start, subjects, end_seq)

    monkeypatch.setattr(log, "read", stalls_once_saved)
    finished = False

    async def first_start() -> None:
        nonlocal finished
        await rebuild(log, AdmissionFolder(), SUBJECTS, store, policy=SnapshotPolicy(store, every=10, least=1))
        finished = True

    with anyio.fail_after(SAFETY):
        async with anyio.create_task_group() as tg:
            tg.start_soon(first_start)
            while not store.objects:
                await anyio.sleep(0.01)
            await anyio.sleep(0.05)
            tg.cancel_scope.cancel()
    assert not finished and await log.last_seq() == end  # cut short: nothing published
    saved = await store.candidates("admission")
    assert saved and 10 <= saved[0] < end
    monkeypatch.setattr(log, "read", real_read)
    caplog.set_level(logging.INFO, logger="services.common.folding")
    second = await run_until_caught_up(log, store)
    assert f"admission: started from its snapshot at {saved[0]}" in caplog.text
    assert await decisions_of(log) == await decisions_of(reference)
    assert gang_rows(second.state, "default") == gang_rows(whole_fold(await log.read(1)).state, "default")
    report = verify(await log.read(1))
    assert [f.line() for f in report.findings if f.source == "admission"] == []


class Recording(MemorySnapshots):
    """Which stored objects each save had to store itself (those not stored before it)."""

    def __init__(self) -> None:
        super().__init__()
        self.saves: list[tuple[int, list[str]]] = []

    async def save(self, service: str, seq: int, data: bytes, runs: Mapping[str, Run | IdFilter] | None = None,
                   ) -> None:
        self.saves.append((seq, [key for key in runs or {} if key not in self.runs]))
        await super().save(service, seq, data, runs)


async def test_runs_are_stored_as_they_seal_and_a_stop_after_many_ids_stores_little(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The id runs sealed while the service runs are put in the snapshot store then, so that the
    clean stop's save (in a budget) stores only the filters and the state; the start after it
    takes that snapshot, on a process with none of the runs (fetched), and holds what the whole
    fold holds."""
    import services.common.folding as folding
    from services.common.snapshots import Snapshot, optional_named, runs_named
    from services.tree.domain import used_ids

    for name, value in (("SEAL_AT", 4), ("BLOCK", 4), ("MIN_FILTER_IDS", 8), ("CHUNK", 8)):
        monkeypatch.setattr(used_ids, name, value)
    monkeypatch.setattr(folding, "RUNS_STORED_EVERY", 0.01)
    before = used_ids.use_store(MemoryRuns())
    try:
        log, store = MemoryLog(), Recording()
        for phase in range(6):
            await log.append(inputs(phase))
        # (no snapshot but the stop's)
        await fold_until_quiet(log, store, AdmissionFolder(), SnapshotPolicy(store, every=10**9, least=10**9))
        end = await log.last_seq()
        [(seq, stored_by_the_stop)] = store.saves
        head = Snapshot.header(store.objects[("admission", seq)])
        runs = set(runs_named(head)) - set(optional_named(head))
        assert seq == end and len(runs) >= 2 and set(optional_named(head))
        assert set(stored_by_the_stop) <= set(optional_named(head))  # the runs were there already
        used_ids.use_store(MemoryRuns())  # a new process: no run alive
        caplog.set_level(logging.INFO, logger="services.common.folding")
        second = AdmissionFolder()
        await fold_until_quiet(log, store, second)
        assert f"admission: started from its snapshot at {end}" in caplog.text
        assert gang_rows(second.state, "default") == gang_rows(whole_fold(await log.read(1)).state, "default")
    finally:
        used_ids.use_store(before)


async def test_a_rebuild_that_saves_snapshots_raises_what_its_fold_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its snapshots are saved in a task group of its own; what the fold raises comes out as it
    was (the service's callers handle a log's errors by type), not in an exception group."""
    from services.common.folding import rebuild

    log = MemoryLog()
    await log.append(inputs(0))

    async def fails(*args: object, **kwargs: object) -> list[Any]:
        raise ConnectionError("the log went away")

    monkeypatch.setattr(log, "read", fails)
    store = MemorySnapshots()
    with pytest.raises(ConnectionError, match="went away"):
        await rebuild(log, AdmissionFolder(), SUBJECTS, store, policy=SnapshotPolicy(store, every=10, least=1))


def test_a_rebuild_starts_no_snapshot_in_its_last_every_positions(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rebuild waits for a save it started before the service goes live (and the live service
    snapshots at once what the rebuild folded since its last): none is started within `every`
    positions of the log's end, where one would only hold the start up."""
    from services.common.folding import Saving

    monkeypatch.setenv("POOLWISE_SNAPSHOT_FORK", "0")
    started: list[int] = []

    class Recording:
        def start_soon(self, save: object, folder: object, folded: int, pending: object, pickling: Any) -> None:
            started.append(folded)
            pickling.close()  # (not saved here)

    policy = SnapshotPolicy(MemorySnapshots(), every=10, least=1)
    saving = Saving(policy, MemoryLog(), Recording(), end=50)  # type: ignore[arg-type]
    folder = AdmissionFolder()
    saving.if_due(folder, 44, {})
    assert started == []  # due (44 folded since 0), but 6 positions from the end
    saving.if_due(folder, 40, {})
    assert started == [40]
