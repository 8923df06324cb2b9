"""Random logs in which admission's decisions land late, in batches, sometimes out of order:
three trees (one configured late), `cycle_gangs` of 1-4 that changes on the way, packs of
enqueues (their parts sometimes stamped seconds apart) that start cycles, ticks naming a tree or
none, waiting and placement timeouts, task reports and cancels, two pools with preemption at
grace 0, and a live preemption service that sometimes restarts (folds the whole log and
publishes what it lacks). Whatever the interleaving:

- a reader of admission's fold (`PreemptionFolder`, through `CycleOrder`) ends in admission's
  state, holding nothing, and replay re-derives every decision;
- the `gangs` read model, applied while the log grows in random batch cuts to a file that is
  reopened and has batches rolled back, and applied in one batch at the end, holds admission's
  gangs and tasks and nothing waiting (decisions in order: docs/projections known limits).

These found the bugs of the first versions of cycles at their triggers: a reader stuck when two
trees' cycles landed out of order, a requeue applied after the re-admission it came before, a
timer applied before a whole pack instead of the part that fired it, a pass that never ran."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from events import (
    ClockTicked,
    CycleCompleted,
    Envelope,
    Event,
    GangCancelled,
    GangEnqueued,
    TaskSpec,
    TaskStateChanged,
    at_seconds,
    decode_all,
    encode,
    encode_pack,
    read_envelope,
)
from events.subjects import for_event
from projections import ProjectionStore
from projections.base import Connection, Item, Projection
from projections.gangs import GangsProjection
from services.admission.folder import AdmissionFolder
from services.common.folding import fold_batch
from services.common.log import Stored
from services.preemption.folder import PreemptionFolder
from services.tools.replay import verify
from tests.admission.builders import host, pool, tree, without_slot_waits

TREES = ("default", "t2", "t3")
ENDED = ("succeeded", "failed", "preempted", "killed", "lost")


class Failing(Projection):
    """A projection that fails the batch it is armed for (the store rolls the batch back)."""

    name = "failing"
    schema_version = 1

    def __init__(self) -> None:
        self.armed = False

    def create(self, conn: Connection) -> None:
        pass

    def apply(self, conn: Connection, items: Sequence[Item]) -> None:
        if self.armed:
            self.armed = False
            raise RuntimeError("this batch fails")


class Log:
    """A log in a list; admission folds what is new in one batch when asked, and its decisions
    land when the test says (late, or out of order)."""

    def __init__(self) -> None:
        self.messages: list[Stored] = []
        self.admission = AdmissionFolder()
        self.folded = 0
        self.count = 0
        self.time = 1_700_000_000.0

    def put(self, envelope: Envelope) -> None:
        event = envelope.event
        subject = for_event(event.type, getattr(event, "tree", None), envelope.source)
        self.messages.append(Stored(len(self.messages) + 1, subject, encode(envelope), envelope.id))

    def envelope(self, event: Event, source: str = "sdk") -> Envelope:
        self.count += 1
        return Envelope(id=f"in-{self.count}", time=at_seconds(self.time), source=source, event=event)

    def add(self, event: Event, dt: float, source: str = "sdk") -> None:
        self.time += dt
        self.put(self.envelope(event, source))

    def add_pack(self, events: list[GangEnqueued], dt: float, spread: bool) -> None:
        self.time += dt
        parts = []
        for event in events:
            parts.append(encode(self.envelope(event)))
            if spread:  # each part stamped when it was made, as `Submitter.enqueue_many` does
                self.time += 1.5
        seq = len(self.messages) + 1
        self.messages.append(Stored(seq, for_event("GangEnqueued", events[0].tree, "sdk"), encode_pack(parts),
                                    f"pack-{seq}"))

    def fold(self) -> list[Envelope]:
        result = fold_batch(self.admission, self.messages[self.folded:], self.folded)
        self.folded = result.last_seq
        return result.decisions

    def land(self, decisions: list[Envelope]) -> None:
        for decision in decisions:
            self.put(decision)

    def ids(self) -> set[str]:
        found = {s.msg_id for s in self.messages if s.msg_id}
        for stored in self.messages:
            found.update(e.id for e in decode_all(stored.data, read_envelope))
        return found


class LiveStore:
    """The `gangs` read model applied while the log grows: random cuts, failed (rolled back)
    batches, the store closed and opened again."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.applied = 0
        self.failing = Failing()
        self.store = ProjectionStore(path, [GangsProjection(), self.failing])

    def step(self, rng: random.Random, messages: list[Stored]) -> None:
        end = rng.randint(self.applied, len(messages))
        batch = messages[self.applied:end]
        if batch and rng.random() < 0.2:
            self.failing.armed = True
            with pytest.raises(RuntimeError):
                self.store.apply(batch)
        if batch and rng.random() < 0.8:
            self.store.apply(batch)
            self.applied = end
        if rng.random() < 0.2:
            self.store.close()
            self.failing = Failing()
            self.store = ProjectionStore(self.path, [GangsProjection(), self.failing])

    def finish(self, messages: list[Stored]) -> ProjectionStore:
        self.store.apply(messages[self.applied:])
        return self.store


def _gangs(log: Log, rng: random.Random, name: str, first: int, pools: str) -> list[GangEnqueued]:
    gangs = []
    for gid in range(first, first + (1 if rng.random() < 0.6 else rng.randint(2, 5))):
        n = rng.choice([1, 1, 2])
        gangs.append(GangEnqueued(tree=name, gang=f"g{gid}", pool="/a" if rng.random() < 0.9 else pools,
                                  job=f"j{gid % 3}", size=n if rng.random() < 0.8 else n + 1,
                                  tasks=[TaskSpec(id=f"g{gid}/{i}", resources={"cpu": 1.0}) for i in range(n)],
                                  timeout=rng.choice([None, None, None, None, 3.0, 8.0])))
    if rng.random() < 0.2:  # a member more for a waiting gang
        rt = log.admission.state.trees.get(name)
        waiting = [g for g in rt.gangs.values() if g.state == "waiting"] if rt is not None else []
        if waiting:
            g = rng.choice(waiting)
            gangs.append(GangEnqueued(tree=name, gang=g.id, pool=g.pool, job=g.job, size=g.size,
                                      tasks=[TaskSpec(id=f"{g.id}/{len(g.tasks)}", resources={"cpu": 1.0})]))
    return gangs


def _report(log: Log, rng: random.Random, dt: float) -> None:
    rts = [(name, rt) for name in TREES if (rt := log.admission.state.trees.get(name)) is not None]
    live = [(name, g.id, t) for name, rt in rts for g in rt.gangs.values() if g.state == "admitted"
            for t in g.tasks if t.state not in ENDED]
    tasks = [(name, g.id, t) for name, rt in rts for g in rt.gangs.values() for t in g.tasks]
    if live and rng.random() < 0.8:
        name, gang, task = rng.choice(live)
        state: Any = {"ready": "placed", "placing": "placed", "placed": "running", "launching": "running",
                      "running": "succeeded"}.get(task.state, "running")
        if task.preemption_requested or rng.random() < 0.1:
            state = rng.choice(["preempted", "failed"])
        log.add(TaskStateChanged(tree=name, gang=gang, task=task.id, state=state), dt)
    elif tasks:
        name, gang, task = rng.choice(tasks)
        log.add(TaskStateChanged(tree=name, gang=gang, task=task.id, state=rng.choice(
            ["running", "placed", "succeeded", "preempted", "failed"])), dt)  # some refused: backward


def _finish(log: Log, preemption: PreemptionFolder, read: int) -> None:
    """A last tick; admission and preemption fold until neither decides anything."""
    log.add(ClockTicked(), 0.0, source="admission:clock")
    for _ in range(20):
        decided = log.fold()
        log.land(decided)
        result = fold_batch(preemption, log.messages[read:], read)
        read = result.last_seq
        log.land(result.decisions)
        if not decided and not result.decisions:
            return


def random_log(seed: int, out_of_order: bool, live: LiveStore | None = None) -> Log:
    rng = random.Random(seed)
    log = Log()
    configured = list(TREES[:2])
    for name in configured:
        log.add(tree(name=name, cycle_gangs=rng.randint(1, 4), grace=0.0), 0.0, source="tree")
        log.add(pool("/a", tree_name=name), 0.0, source="tree")
        log.add(pool("/b", tree_name=name), 0.0, source="tree")
    log.add(host(cpu=6.0), 0.0, source="tree")
    outbox: list[list[Envelope]] = []  # batches of decisions on their way
    preemption = PreemptionFolder()
    read = 0
    gid = 0
    for _ in range(rng.randint(20, 120)):
        roll = rng.random()
        dt = rng.choice([0.0, 0.0, 0.5, 1.0, 2.0, 4.0, 40.0 if rng.random() < 0.2 else 1.0])
        if roll < 0.25:
            gangs = _gangs(log, rng, rng.choice(configured), gid + 1, "/b")
            gid += len(gangs)
            if len(gangs) == 1:
                log.add(gangs[0], dt)
            else:
                log.add_pack(gangs, dt, spread=rng.random() < 0.3)
        elif roll < 0.42:
            _report(log, rng, dt)
        elif roll < 0.46:
            known = [(name, g) for name in TREES if (rt := log.admission.state.trees.get(name)) for g in rt.gangs]
            if known:
                name, gang = rng.choice(known)
                log.add(GangCancelled(tree=name, gang=gang), dt)
        elif roll < 0.60:
            named = rng.choice(TREES) if rng.random() < 0.4 else None
            log.add(ClockTicked(tree=named) if named else ClockTicked(), dt, source="admission:clock")
        elif roll < 0.62 and "t3" not in configured:
            log.add(tree(name="t3", cycle_gangs=rng.randint(1, 4), grace=0.0), 0.0, source="tree")
            log.add(pool("/a", tree_name="t3"), 0.0, source="tree")
            log.add(pool("/b", tree_name="t3"), 0.0, source="tree")
            configured.append("t3")
        elif roll < 0.64:
            log.add(tree(name=rng.choice(configured), cycle_gangs=rng.randint(1, 4), grace=0.0), 0.0, source="tree")
        elif roll < 0.76:
            outbox.append(log.fold())
        elif roll < 0.86:
            if out_of_order and len(outbox) > 1 and rng.random() < 0.5:
                log.land(outbox.pop(rng.randrange(1, len(outbox))))
            else:
                k = rng.randint(1, max(1, len(outbox)))
                for batch in outbox[:k]:
                    log.land(batch)
                del outbox[:k]
        elif roll < 0.94:
            result = fold_batch(preemption, log.messages[read:], read)
            read = result.last_seq
            log.land(result.decisions)
        elif roll < 0.96:  # preemption restarts: folds the whole log, publishes what it lacks
            preemption = PreemptionFolder()
            present = log.ids()
            result = fold_batch(preemption, log.messages, 0)
            read = result.last_seq
            log.land([d for d in result.decisions if d.id not in present])
        elif live is not None:
            live.step(rng, log.messages)
    for batch in [*outbox, log.fold()]:
        log.land(batch)
    _finish(log, preemption, read)
    return log


def _rows(store: ProjectionStore) -> tuple[dict[Any, Any], dict[Any, Any], int]:
    gangs = {(t, g): (s, a) for t, g, s, a in store.query("SELECT tree, gang, state, attempt FROM gangs")[1]}
    tasks = {(t, k): s for t, k, s in store.query("SELECT tree, task, state FROM tasks")[1]}
    return gangs, tasks, store.query("SELECT count(*) FROM gangs_held")[1][0][0]


def _admissions(log: Log) -> tuple[dict[Any, Any], dict[Any, Any], int]:
    state = log.admission.state
    gangs = {(n, g.id): (g.state, g.attempt) for n, rt in state.trees.items() for g in rt.gangs.values()}
    tasks = {(n, t.id): t.state for n, rt in state.trees.items() for t in rt.tasks.values()}
    return gangs, tasks, 0


@pytest.mark.parametrize("out_of_order", [False, True], ids=["in-order", "out-of-order"])
def test_a_reader_ends_in_admissions_state_and_replay_re_derives_every_decision(out_of_order: bool) -> None:
    for seed in range(40):
        log = random_log(seed, out_of_order)
        reader = PreemptionFolder()
        fold_batch(reader, log.messages, 0)
        assert (reader.order.holding, reader.order.kept) == (0, 0), seed
        assert without_slot_waits(reader.state.admission) == without_slot_waits(log.admission.state), seed
        report = verify(log.messages)
        assert report.ok, (seed, [f.line() for f in report.findings[:3]])


def test_the_gangs_read_model_holds_admissions_gangs_however_it_is_cut_rolled_back_and_reopened(
        tmp_path: Path) -> None:
    for seed in range(25):
        live = LiveStore(tmp_path / f"gangs-{seed}.duckdb")
        log = random_log(1000 + seed, out_of_order=False, live=live)
        expected = _admissions(log)
        with live.finish(log.messages) as store:
            assert _rows(store) == expected, seed
        with ProjectionStore(":memory:", [GangsProjection()]) as whole:
            whole.apply(log.messages)
            assert _rows(whole) == expected, seed


def test_a_cycle_applied_while_a_pass_is_in_flight_gets_its_pass_when_that_one_is_read() -> None:
    log = Log()
    for event in (tree(), pool("/a"), host(cpu=6.0)):
        log.add(event, 0.0, source="tree")

    def enqueue(gang: str) -> None:
        log.add(GangEnqueued(tree="default", gang=gang, pool="/a", job=gang, size=1,
                             tasks=[TaskSpec(id=f"{gang}/0", resources={"cpu": 1.0})]), 1.0)

    enqueue("g1")
    log.add(ClockTicked(), 0.0, source="admission:clock")
    log.land(log.fold())
    preemption = PreemptionFolder()
    first = fold_batch(preemption, log.messages, 0)  # the first cycle's pass: its close not in the log yet
    assert [(d.event.type, getattr(d.event, "service", None)) for d in first.decisions][-1:] == [
        ("CycleCompleted", "preemption")]
    enqueue("g2")
    log.add(ClockTicked(), 0.0, source="admission:clock")
    second_tick = len(log.messages)
    log.land(log.fold())
    second = fold_batch(preemption, log.messages[first.last_seq:], first.last_seq)
    assert second.decisions == []  # a pass is in flight: this cycle's waits
    log.land(first.decisions)
    third = fold_batch(preemption, log.messages[second.last_seq:], second.last_seq)
    closes = [d.event for d in third.decisions if isinstance(d.event, CycleCompleted)]
    assert [(c.service, c.trigger_seq) for c in closes] == [("preemption", second_tick)]
