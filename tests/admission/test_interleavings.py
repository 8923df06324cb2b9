"""Random logs in which decisions land late, in batches, sometimes out of order, with two trees,
packs of enqueues that start cycles (`cycle_gangs` 3), ticks, task reports, cancels, and a
live preemption service: whatever the interleaving, a reader of admission's fold
(`PreemptionFolder`, through `CycleOrder`) ends in admission's state holding nothing, the `gangs`
read model holds admission's gangs and tasks, and replay re-derives every decision. (These found
the bugs of the first version of cycles at their triggers: a reader stuck when two trees' cycles
landed out of order, a requeue applied after the re-admission it came before.)"""

from __future__ import annotations

import random

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
    encode,
    encode_pack,
)
from events.subjects import for_event
from projections import ProjectionStore
from projections.gangs import GangsProjection
from services.admission.folder import AdmissionFolder
from services.common.folding import fold_batch
from services.common.log import Stored
from services.preemption.folder import PreemptionFolder
from services.replay import verify
from tests.admission.builders import host, pool, tree, without_slot_waits

TREES = ("default", "t2")


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

    def add_pack(self, events: list[GangEnqueued], dt: float) -> None:
        self.time += dt
        parts = [encode(self.envelope(e)) for e in events]
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


def _random_log(seed: int, out_of_order: bool) -> Log:
    rng = random.Random(seed)
    log = Log()
    for name in TREES:
        log.add(tree(name=name, cycle_gangs=3), 0.0, source="tree")
        log.add(pool("/a", tree_name=name), 0.0, source="tree")
    log.add(host(cpu=6.0), 0.0, source="tree")
    outbox: list[list[Envelope]] = []  # batches of decisions on their way
    preemption = PreemptionFolder()
    read = 0
    gid = 0
    for _ in range(rng.randint(10, 80)):
        roll = rng.random()
        dt = rng.choice([0.0, 0.5, 2.0, 20.0])
        rts = [(name, rt) for name in TREES if (rt := log.admission.state.trees.get(name)) is not None]
        if roll < 0.3:
            name = rng.choice(TREES)
            gangs: list[GangEnqueued] = []
            for _ in range(1 if rng.random() < 0.6 else rng.randint(2, 5)):
                gid += 1
                n = rng.choice([1, 1, 2])
                gangs.append(GangEnqueued(tree=name, gang=f"g{gid}", pool="/a", job=f"j{gid % 3}",
                                          size=n if rng.random() < 0.85 else n + 1,
                                          tasks=[TaskSpec(id=f"g{gid}/{i}", resources={"cpu": 1.0}) for i in range(n)],
                                          timeout=rng.choice([None, 5.0])))
            if len(gangs) == 1:
                log.add(gangs[0], dt)
            else:
                log.add_pack(gangs, dt)
        elif roll < 0.5:
            tasks = [(name, g.id, t.id) for name, rt in rts for g in rt.gangs.values() for t in g.tasks]
            if tasks:
                name, gang, task = rng.choice(tasks)
                log.add(TaskStateChanged(tree=name, gang=gang, task=task, state=rng.choice(  # type: ignore[arg-type]
                    ["running", "placed", "succeeded", "preempted", "failed"])), dt)
        elif roll < 0.55:
            known = [(name, g) for name, rt in rts for g in rt.gangs]
            if known:
                name, gang = rng.choice(known)
                log.add(GangCancelled(tree=name, gang=gang), dt)
        elif roll < 0.7:
            log.add(ClockTicked(), dt, source="admission:clock")
        elif roll < 0.85:
            outbox.append(log.fold())
        elif roll < 0.95:
            if out_of_order and len(outbox) > 1 and rng.random() < 0.5:
                log.land(outbox.pop(rng.randrange(1, len(outbox))))
            else:
                k = rng.randint(1, max(1, len(outbox)))
                for batch in outbox[:k]:
                    log.land(batch)
                del outbox[:k]
        else:
            result = fold_batch(preemption, log.messages[read:], read)
            read = result.last_seq
            log.land(result.decisions)
    for batch in [*outbox, log.fold()]:  # everything lands, then a last tick, and both services finish
        log.land(batch)
    log.add(ClockTicked(), 0.0, source="admission:clock")
    for _ in range(10):
        decided = log.fold()
        log.land(decided)
        result = fold_batch(preemption, log.messages[read:], read)
        read = result.last_seq
        log.land(result.decisions)
        if not decided and not result.decisions:
            break
    return log


@pytest.mark.parametrize("out_of_order", [False, True], ids=["in-order", "out-of-order"])
def test_a_reader_ends_in_admissions_state_whatever_the_interleaving(out_of_order: bool) -> None:
    for seed in range(60):
        log = _random_log(seed, out_of_order)
        reader = PreemptionFolder()
        fold_batch(reader, log.messages, 0)
        assert (reader.order.holding, reader.order.kept) == (0, 0), seed
        assert without_slot_waits(reader.state.admission) == without_slot_waits(log.admission.state), seed


def test_the_gangs_read_model_holds_admissions_gangs_and_replay_re_derives_every_decision() -> None:
    for seed in range(20):
        log = _random_log(1000 + seed, out_of_order=False)
        with ProjectionStore(":memory:", [GangsProjection()]) as store:
            store.apply(log.messages)
            gangs = {(t, g): (s, a) for t, g, s, a in store.query("SELECT tree, gang, state, attempt FROM gangs")[1]}
            tasks = {(t, k): s for t, k, s in store.query("SELECT tree, task, state FROM tasks")[1]}
            held = store.query("SELECT count(*) FROM gangs_held")[1][0][0]
        state = log.admission.state
        expected = {(n, g.id): (g.state, g.attempt) for n, rt in state.trees.items() for g in rt.gangs.values()}
        assert gangs == expected, seed
        assert tasks == {(n, t.id): t.state for n, rt in state.trees.items() for t in rt.tasks.values()}, seed
        assert held == 0, seed
        report = verify(log.messages)
        assert report.ok, (seed, [f.line() for f in report.findings[:3]])


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
