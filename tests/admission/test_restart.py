"""Crash and restart of the admission service (ARCHITECTURE invariants 1, 3, 4), on the in-memory
log and on a real JetStream log.

The service (`run_folder` + `AdmissionFolder`) is fed phases of inputs, each closed by a clock
tick, and dies in the middle of publishing one cycle's decisions: some of them are in the log,
its `CycleCompleted` is not. Restarted with nothing but the log, it must finish that cycle and go
on, so that in the end no decision is lost (every tick's cycle is completed), none is repeated (no
two events with one id, no gang admitted twice for one attempt), and its state is the state of a
run that never crashed (on the memory log, the very same log, byte for byte)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import anyio
import pytest
from anyio.abc import TaskGroup

import services.common.log
from events import (
    ClockTicked,
    CycleCompleted,
    EntitlementsComputed,
    Envelope,
    Event,
    GangAdmitted,
    at_seconds,
    decode_all,
)
from services.admission.folder import SUBJECTS, AdmissionFolder
from services.common.folding import fold_batch, run_folder
from services.common.log import Appended, EventLog, Stored
from services.common.memlog import MemoryLog
from tests.admission.builders import cancel, gang, host, pool, snapshot, task, tree

pytestmark = pytest.mark.anyio

SAFETY = 60.0  # seconds: a hung test fails instead of hanging the run (not a timing assertion)


def _phases() -> list[list[Envelope]]:
    """Inputs in phases, each closed by a tick; ids and times fixed, so every run sees the same."""
    def at(t: float, *events: Event) -> list[Envelope]:
        return [Envelope(id=f"in-{t:g}-{i}", time=at_seconds(t), source="test", event=e)
                for i, e in enumerate([*events, ClockTicked()])]

    return [
        at(0, tree(), host(cpu=20), pool("/a", limit={"cpu": 12}, max_running_jobs=2),
           pool("/b", reservation={"cpu": 6})),
        at(1, gang("a1", "/a", cpu=4, job="A"), gang("a2", "/a", cpu=4, job="B"), gang("a3", "/a", cpu=4, job="C"),
           gang("a4", "/a", cpu=2, job="A"), gang("b1", "/b", cpu=3, preemptible=False),
           gang("b2", "/b", cpu=3, preemptible=False), gang("b3", "/b", cpu=4, preemptible=False),
           gang("b4", "/b", cpu=1), gang("bad", "/a", resources={"gpu": 1}),
           gang("w", "/b", tasks=1, size=2, timeout=5)),
        at(2, task("a1/0", "running"), task("a2/0", "succeeded"), task("b1/0", "placed"), cancel("b3")),
        at(40, task("a1/0", "succeeded"), task("b4/0", "running")),
        at(41, gang("late", "/a", cpu=1, job="A")),
    ]


CRASH_PHASE = 1  # the phase whose cycle decides the most


class Service:
    """One incarnation of the admission service on a log."""

    def __init__(self, log: EventLog) -> None:
        self.log = log
        self.folder = AdmissionFolder()
        self.handled = 0

    async def start(self, tg: TaskGroup) -> None:
        async def on_batch(last: int) -> None:
            self.handled = max(self.handled, last)

        folded = await tg.start(lambda task_status: run_folder(
            self.log, self.folder, SUBJECTS, durable="admission", on_batch=on_batch, task_status=task_status))
        self.handled = max(self.handled, folded)  # batches may have been handled before start returns

    async def settled(self, log: EventLog) -> None:
        """Wait until the service has handled everything it reads (its own decisions too)."""
        with anyio.fail_after(SAFETY):
            while True:
                mine = await log.read(1, SUBJECTS)
                last = mine[-1].seq if mine else 0
                if self.handled >= last:
                    return
                await anyio.sleep(0.005)


class Crash(Exception):
    """The service dies here."""


class CrashingLog:
    """The service's view of the log: the first append that closes a cycle stores what precedes
    the cycle in the batch and the first `keep` decisions of the cycle (from `EntitlementsComputed`;
    negative: all but that many; None: all of it), then the service dies (before acknowledging)."""

    def __init__(self, inner: EventLog, keep: int | None) -> None:
        self.inner = inner
        self.keep = keep
        self.armed = False  # set when the phase whose cycle it dies in is about to be appended
        self.crashed = False

    async def append(self, envelopes: Sequence[Envelope]) -> list[Appended]:
        events = [e.event for e in envelopes]
        if not self.armed or self.crashed or not any(isinstance(e, CycleCompleted) for e in events):
            return await self.inner.append(envelopes)
        start = next(i for i, e in enumerate(events) if isinstance(e, EntitlementsComputed))
        cycle = len(envelopes) - start
        keep = cycle if self.keep is None else self.keep if self.keep >= 0 else cycle + self.keep
        assert 0 <= keep <= cycle
        await self.inner.append(envelopes[:start + keep])
        self.crashed = True
        raise Crash(f"died after {keep} of the {cycle} decisions of the cycle")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.fixture(params=["memory", pytest.param("jetstream", marks=pytest.mark.nats)])
def log(request: pytest.FixtureRequest) -> EventLog:
    if request.param == "memory":
        return MemoryLog()
    found: EventLog = request.getfixturevalue("jetstream_log")
    return found


async def _clean_run(log: EventLog) -> Service:
    async with anyio.create_task_group() as tg:
        service = Service(log)
        await service.start(tg)
        for phase in _phases():
            await log.append(phase)
            await service.settled(log)
        tg.cancel_scope.cancel()
    return service


async def _contents(log: EventLog) -> list[tuple[str, Envelope, int]]:
    """(subject, event, log position) of every event (a pack of decisions: each of its events)."""
    return [(s.subject, e, s.seq) for s in await log.read() for e in decode_all(s.data)]


def _check_nothing_lost_or_repeated(stored: list[tuple[str, Envelope, int]], ticks: int) -> None:
    ids = Counter(e.id for _, e, _ in stored)
    assert [i for i, n in ids.items() if n > 1] == []
    seqs = {e.id: seq for _, e, seq in stored}
    tick_seqs = [seqs[e.id] for _, e, _ in stored if isinstance(e.event, ClockTicked)]
    completed = Counter(e.event.trigger_seq for _, e, _ in stored
                        if isinstance(e.event, CycleCompleted) and e.event.service == "admission")
    assert len(tick_seqs) == ticks
    assert completed == Counter(tick_seqs)  # every tick's cycle closed, once
    admissions = Counter((e.event.gang, e.event.attempt) for _, e, _ in stored if isinstance(e.event, GangAdmitted))
    assert [k for k, n in admissions.items() if n > 1] == []


def _by_order(state: dict[str, Any]) -> dict[str, Any]:
    """A snapshot with each gang's `arrival` (a log position) replaced by its rank among the
    arrivals of its tree: the same state, on two logs whose positions differ (a crash cut a pack of
    decisions in two, so what follows it lands one position later)."""
    out = dict(state)
    trees = {}
    for name, held in state["trees"].items():
        gangs = held["gangs"]
        arrivals = sorted({g["arrival"] for g in gangs.values() if g.get("arrival") is not None})
        ranks = {a: i for i, a in enumerate(arrivals)}
        trees[name] = {**held, "gangs": {k: {**g, "arrival": ranks.get(g.get("arrival"))} for k, g in gangs.items()}}
    out["trees"] = trees
    return out


def _replayed(stored: list[Stored]) -> dict[str, Any]:
    """The state a fresh service folds from this log (what replay would see)."""
    folder = AdmissionFolder()
    fold_batch(folder, [s for s in stored if _reads(s.subject)], 0)
    return snapshot(folder.state)


def _reads(subject: str) -> bool:
    from services.common.memlog import subject_filter

    return subject_filter(SUBJECTS)(subject)


def _decisions(stored: list[tuple[str, Envelope, int]]) -> list[str]:
    """What was decided, without ids, log positions or times (the same on every bus, and after a
    crash that cut a pack of decisions in two)."""
    return sorted(e.event.model_dump_json(exclude={"input_seq"}) for _, e, _ in stored
                  if e.source == "admission" and not isinstance(e.event, EntitlementsComputed | CycleCompleted))


SOME = 3  # the entitlements and two admissions of the crash phase's cycle: its pack of admissions is cut in two


@pytest.mark.parametrize("keep", [0, 1, SOME, -1, None], ids=["none", "entitlements", "some", "all-but-closing",
                                                          "all-then-no-ack"])
async def test_a_service_that_dies_mid_cycle_finishes_it_after_a_restart(log: EventLog, keep: int | None) -> None:
    await _dies_mid_cycle_and_finishes_it(log, keep)


@pytest.mark.parametrize("keep", [1, SOME, None], ids=["entitlements", "some", "all-then-no-ack"])
async def test_a_restart_that_reads_the_log_a_few_positions_at_a_time_finishes_the_cycle_too(
        log: EventLog, keep: int | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A restart reads the log in pieces (`read_in_chunks`): the decisions made again are matched with
    what the log holds across pieces (a decision lands pieces after its basis) and only the
    missing ones are published."""
    monkeypatch.setattr(services.common.log, "READ_CHUNK", 2)
    await _dies_mid_cycle_and_finishes_it(log, keep)


async def _dies_mid_cycle_and_finishes_it(log: EventLog, keep: int | None) -> None:
    clean_log = MemoryLog()
    clean = await _clean_run(clean_log)
    phases = _phases()
    with anyio.fail_after(SAFETY):
        # 1. the service runs until it dies publishing the crash phase's cycle
        crashing = CrashingLog(log, keep)
        first = Service(crashing)
        with pytest.raises(BaseExceptionGroup) as died:
            async with anyio.create_task_group() as tg:
                await first.start(tg)
                for number, phase in enumerate(phases[:CRASH_PHASE + 1]):
                    crashing.armed = number == CRASH_PHASE
                    await log.append(phase)
                    await first.settled(log)
        assert died.group_contains(Crash)
        assert crashing.crashed
        partial = await _contents(log)
        closed = [e for _, e, _ in partial if isinstance(e.event, CycleCompleted) and e.event.service == "admission"
                  and e.event.trigger_seq == _tick_seq(partial, CRASH_PHASE)]
        assert len(closed) == (1 if keep is None else 0)
        # 2. a new incarnation, with nothing but the log, finishes the cycle and goes on
        async with anyio.create_task_group() as tg:
            second = Service(log)
            await second.start(tg)
            await second.settled(log)
            for phase in phases[CRASH_PHASE + 1:]:
                await log.append(phase)
                await second.settled(log)
            tg.cancel_scope.cancel()
    stored = await _contents(log)
    _check_nothing_lost_or_repeated(stored, ticks=len(phases))
    # Two logs: positions differ where a pack of decisions was cut by the crash, the order does not.
    assert _by_order(snapshot(second.folder.state)) == _by_order(snapshot(clean.folder.state))
    assert _replayed(await log.read()) == snapshot(second.folder.state)
    assert _decisions(stored) == _decisions(await _contents(clean_log))
    if isinstance(log, MemoryLog) and keep != SOME:  # one process, one batch per phase: the very same log
        # (SOME cuts the cycle's pack of admissions in two: one message more, later positions shift)
        assert [(s, e.model_dump_json()) for s, e, _ in stored] == \
            [(s, e.model_dump_json()) for s, e, _ in await _contents(clean_log)]


def _tick_seq(stored: list[tuple[str, Envelope, int]], phase: int) -> int:
    ticks = [seq for _, e, seq in stored if isinstance(e.event, ClockTicked)]
    return ticks[phase]


async def test_inputs_that_arrive_while_the_service_is_down_come_after_the_unfinished_cycle(log: EventLog) -> None:
    phases = _phases()
    down = [Envelope(id=f"down-{i}", time=at_seconds(1.5), source="test", event=e)
            for i, e in enumerate([gang("d1", "/b", cpu=1), cancel("a3"), ClockTicked()])]
    with anyio.fail_after(SAFETY):
        crashing = CrashingLog(log, 2)  # entitlements and a1's admission are out, the rest is not
        first = Service(crashing)
        with pytest.raises(BaseExceptionGroup):
            async with anyio.create_task_group() as tg:
                await first.start(tg)
                for number, phase in enumerate(phases[:CRASH_PHASE + 1]):
                    crashing.armed = number == CRASH_PHASE
                    await log.append(phase)
                    await first.settled(log)
        await log.append(down)  # nobody folds these now
        async with anyio.create_task_group() as tg:
            second = Service(log)
            await second.start(tg)
            await second.settled(log)
            # the tick that came while it was down ran its cycle (after the unfinished one); once more
            await log.append([Envelope(id="again", time=at_seconds(1.5), source="test", event=ClockTicked())])
            await second.settled(log)
            tg.cancel_scope.cancel()
    stored = await _contents(log)
    ids = Counter(e.id for _, e, _ in stored)
    assert [i for i, n in ids.items() if n > 1] == []
    ticks = [seq for _, e, seq in stored if isinstance(e.event, ClockTicked)]
    closed = Counter(e.event.trigger_seq for _, e, _ in stored
                     if isinstance(e.event, CycleCompleted) and e.event.service == "admission")
    assert closed == Counter(ticks)  # every tick's cycle, the one that came while down too, closed once
    admissions = [(e.event.gang, e.event.attempt) for _, e, _ in stored if isinstance(e.event, GangAdmitted)]
    assert sorted(admissions) == [("a1", 1), ("a2", 1), ("b1", 1), ("b2", 1), ("b4", 1), ("d1", 1)]
    state = second.folder.state
    assert {g.id: g.state for g in state.runtime("default").gangs.values()} == {
        "a1": "admitted", "a2": "admitted", "a3": "cancelled", "a4": "pending", "b1": "admitted",
        "b2": "admitted", "b3": "pending", "b4": "admitted", "bad": "rejected", "w": "waiting", "d1": "admitted"}
    assert _replayed(await log.read()) == snapshot(state)


async def test_a_restart_after_a_clean_stop_publishes_nothing_again(log: EventLog) -> None:
    phases = _phases()
    with anyio.fail_after(SAFETY):
        async with anyio.create_task_group() as tg:
            first = Service(log)
            await first.start(tg)
            for phase in phases[:3]:
                await log.append(phase)
                await first.settled(log)
            tg.cancel_scope.cancel()
        before = await _contents(log)
        async with anyio.create_task_group() as tg:
            second = Service(log)
            await second.start(tg)
            await second.settled(log)
            assert await _contents(log) == before
            assert snapshot(second.folder.state) == snapshot(first.folder.state)
            for phase in phases[3:]:
                await log.append(phase)
                await second.settled(log)
            tg.cancel_scope.cancel()
    _check_nothing_lost_or_repeated(await _contents(log), ticks=len(phases))


class _Recording(MemoryLog):
    """A memory log that remembers what each `append` asked to store, duplicates included."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[Envelope] = []
        self.reads: list[int] = []  # how many positions each read asked for

    async def read(self, start_seq: int = 1, subjects: Sequence[str] = (), end_seq: int | None = None
                   ) -> list[Stored]:
        self.reads.append((end_seq if end_seq is not None else await self.last_seq()) - start_seq + 1)
        return await super().read(start_seq, subjects, end_seq)

    async def append(self, envelopes: Sequence[Envelope]) -> list[Appended]:
        self.asked += envelopes
        return await super().append(envelopes)


@pytest.mark.parametrize("chunk", [None, 1, 3])
async def test_a_restart_asks_to_publish_nothing_the_log_already_has(chunk: int | None,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    if chunk is not None:  # read back a piece at a time: a decision and its basis in different pieces
        monkeypatch.setattr(services.common.log, "READ_CHUNK", chunk)
    log = _Recording()
    async with anyio.create_task_group() as tg:
        first = Service(log)
        await first.start(tg)
        for phase in _phases()[:2]:  # phase 1 holds a refused gang ("bad")
            await log.append(phase)
            await first.settled(log)
        tg.cancel_scope.cancel()
    stored = {e.id for _, e, _ in await _contents(log)}
    log.asked, log.reads = [], []
    async with anyio.create_task_group() as tg:
        second = Service(log)
        await second.start(tg)  # ready once it has folded the log again
        rebuilt = list(log.reads)
        await second.settled(log)
        tg.cancel_scope.cancel()
    assert [e.event.type for e in log.asked if e.id in stored] == []
    if chunk is not None:  # the restart held at most `chunk` positions of the log at a time
        assert rebuilt and max(rebuilt) <= chunk
