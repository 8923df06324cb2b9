"""A cycle's decisions take effect at its trigger, wherever they land in the log (`CycleOrder`): a
reader of admission's fold holds what comes after a trigger until the cycle is read whole, and so
goes through admission's states, however late the decisions land."""

from __future__ import annotations

import random

from events import (
    ClockTicked,
    CycleCompleted,
    EntitlementsComputed,
    Envelope,
    Event,
    GangAdmitted,
    at_seconds,
    encode,
    encode_pack,
    read_envelope,
)
from services.admission.domain.cycle_order import CycleOrder
from services.admission.folder import AdmissionFolder
from services.common.folding import fold_batch
from services.common.log import Stored
from services.preemption.folder import PreemptionFolder
from tests.admission.builders import cancel, gang, host, pool, task, tree, without_slot_waits

# --- the order, with a recording step -------------------------------------------------------------


def _admission(event: Event, basis: int) -> Envelope:
    return Envelope(id=f"{event.type}-{basis}-{id(event)}", time=at_seconds(1.0), source="admission", basis=basis,
                    event=event)


def _input(event: Event, n: int) -> Envelope:
    return Envelope(id=f"in-{n}", time=at_seconds(1.0), source="test", event=event)


def _entitled(basis: int) -> Envelope:
    return _admission(EntitlementsComputed(tree="t", capacity={}, pools=[]), basis)


def _admitted(basis: int, gang_id: str = "g") -> Envelope:
    return _admission(GangAdmitted(tree="t", gang=gang_id, pool="/a", queue="pending", attempt=1, tasks=[]), basis)


def _closed(basis: int) -> Envelope:
    return _admission(CycleCompleted(tree="t", service="admission", trigger_seq=basis), basis)


class Recorder:
    """A step that notes (position, type) of what it folds; a tick makes tree `t` due."""

    def __init__(self) -> None:
        self.folded: list[tuple[int, str]] = []
        self.ticked = False

    def step(self, envelope: Envelope, seq: int) -> list[tuple[int, str]]:
        self.folded.append((seq, envelope.event.type))
        self.ticked = isinstance(envelope.event, ClockTicked)
        return [(seq, envelope.event.type)]

    def due(self) -> list[str]:
        ticked, self.ticked = self.ticked, False
        return ["t"] if ticked else []


def _fed(*log: tuple[int, Envelope]) -> tuple[Recorder, CycleOrder[tuple[int, str]], list[tuple[int, str]]]:
    recorder = Recorder()
    order = CycleOrder(recorder.step, recorder.due)
    out: list[tuple[int, str]] = []
    for seq, envelope in log:
        out += order.feed(envelope, seq)
    return recorder, order, out


def test_what_comes_after_a_trigger_waits_for_its_cycle_which_takes_effect_at_the_trigger() -> None:
    recorder, order, out = _fed(
        (1, _input(ClockTicked(), 1)),
        (2, _input(task("g/0", "running"), 2)),
        (3, _input(ClockTicked(), 3)),
        (4, _entitled(1)), (5, _admitted(1)),
    )
    assert recorder.folded == [(1, "ClockTicked")] and order.holding == 2  # 2 and 3 wait; 4, 5 are set aside
    _, order, out = _fed(
        (1, _input(ClockTicked(), 1)),
        (2, _input(task("g/0", "running"), 2)),
        (3, _input(ClockTicked(), 3)),
        (4, _entitled(1)), (5, _admitted(1)), (6, _closed(1)),
        (7, _input(cancel("g"), 7)),
        (8, _entitled(3)), (9, _closed(3)),
        (10, _input(cancel("h"), 10)),
    )
    assert out == [(1, "ClockTicked"), (1, "EntitlementsComputed"), (1, "GangAdmitted"), (1, "CycleCompleted"),
                   (2, "TaskStateChanged"), (3, "ClockTicked"), (3, "EntitlementsComputed"), (3, "CycleCompleted"),
                   (7, "GangCancelled"), (10, "GangCancelled")]
    assert order.holding == 0


def test_decisions_that_land_before_their_trigger_is_folded_wait_for_it() -> None:
    _, order, out = _fed(
        (1, _input(ClockTicked(), 1)),
        (2, _input(ClockTicked(), 2)),  # held: cycle 1 is open
        (3, _entitled(2)), (4, _closed(2)),  # cycle 2's decisions first (a batch that landed out of order)
        (5, _entitled(1)), (6, _closed(1)),
    )
    assert out == [(1, "ClockTicked"), (1, "EntitlementsComputed"), (1, "CycleCompleted"),
                   (2, "ClockTicked"), (2, "EntitlementsComputed"), (2, "CycleCompleted")]
    assert order.holding == 0


def _of(tree: str, envelope: Envelope) -> Envelope:
    return envelope.model_copy(update={"event": envelope.event.model_copy(update={"tree": tree})})


def test_two_trees_whose_cycles_landed_before_their_trigger_are_both_applied_before_what_follows() -> None:
    recorder = Recorder()
    order: CycleOrder[tuple[int, str]] = CycleOrder(recorder.step, lambda: ["A", "B"] if recorder.due() else [])
    out: list[tuple[int, str]] = []
    log = [
        (1, _input(ClockTicked(), 1)),  # cycles (A, 1), (B, 1)
        (2, _input(ClockTicked(), 2)),  # held; will start (A, 2), (B, 2)
        (3, _input(task("x/0", "running"), 3)),  # held
        (4, _of("A", _closed(2))), (5, _of("B", _closed(2))),  # cycle 2's, landed before cycle 1's
        (6, _of("B", _closed(2))),  # and a copy of one of them
        (7, _of("A", _closed(1))), (8, _of("B", _closed(1))),
    ]
    for seq, envelope in log:
        out += order.feed(envelope, seq)
    assert out == [(1, "ClockTicked"), (1, "CycleCompleted"), (1, "CycleCompleted"), (2, "ClockTicked"),
                   (2, "CycleCompleted"), (2, "CycleCompleted"), (3, "TaskStateChanged")]
    assert (order.holding, order.kept) == (0, 0)


def test_decisions_kept_for_a_trigger_that_started_no_cycle_are_dropped_when_it_is_folded() -> None:
    _, order, out = _fed(
        (1, _input(ClockTicked(), 1)),
        (2, _input(ClockTicked(), 2)),  # held
        (3, _closed(2)),  # kept for 2
        (4, _closed(7)),  # kept for 7, a message that will start no cycle here
        (5, _closed(1)),  # cycle 1 applied; then 2 (its kept decisions: applied at once)
        (7, _input(task("g/0", "running"), 7)),
    )
    assert out == [(1, "ClockTicked"), (1, "CycleCompleted"), (2, "ClockTicked"), (2, "CycleCompleted"),
                   (7, "TaskStateChanged")]
    assert order.kept == 0


def test_a_cycles_decisions_read_again_change_nothing() -> None:
    _, _, out = _fed(
        (1, _input(ClockTicked(), 1)),
        (2, _entitled(1)), (3, _closed(1)),
        (4, _admitted(1)), (5, _closed(1)),  # a duplicate that slipped through
        (6, _closed(9)),  # a cycle that no trigger the fold folded started (its trigger is yet to come)
    )
    assert out == [(1, "ClockTicked"), (1, "EntitlementsComputed"), (1, "CycleCompleted")]


# --- admission and a reader, decisions landing late ------------------------------------------------


def _inputs(rng: random.Random) -> list[list[Event]]:  # one event each
    """Messages of inputs: config, then gangs, task reports, cancels and ticks."""
    messages: list[list[Event]] = [[tree()], [host(cpu=40)], [pool("/a", reservation={"cpu": 20})],
                                   [pool("/b", max_running_jobs=3)]]
    for i in range(120):
        roll = rng.random()
        if roll < 0.55:
            messages.append([gang(f"g{i}", rng.choice(["/a", "/b"]), tasks=rng.randint(1, 2),
                                  cpu=rng.choice([1.0, 3.0]), job=f"j{i % 5}")])
        elif roll < 0.7:
            messages.append([ClockTicked()])
        elif roll < 0.85:
            messages.append([task(f"g{rng.randrange(i + 1)}/0", rng.choice(["placed", "running", "succeeded"]))])
        else:
            messages.append([cancel(f"g{rng.randrange(i + 1)}")])
    return messages


class LateLog:
    """A log and the admission service on it, its decisions landing `lag` messages late."""

    def __init__(self, lag: int) -> None:
        self.admission = AdmissionFolder()
        self.messages: list[Stored] = []
        self.late: list[list[Envelope]] = []  # decisions on their way
        self.lag = lag

    def land(self, envelope: Envelope, subject: str) -> None:
        stored = Stored(len(self.messages) + 1, subject, encode(envelope))
        self.messages.append(stored)
        self.late.append(fold_batch(self.admission, [stored], stored.seq - 1, read_envelope).decisions)

    def add(self, event: Event, n: int) -> None:
        self.land(_input(event, n), "poolwise.gang.default")
        while len(self.late) > self.lag:
            self._land_decisions()

    def flush(self) -> None:
        while self.late:
            self._land_decisions()

    def _land_decisions(self) -> None:
        for decided in self.late.pop(0):
            self.land(decided, "poolwise.decision.default.admission")


def test_a_reader_goes_through_admissions_states_however_late_the_decisions_land() -> None:
    for seed in range(6):
        rng = random.Random(seed)
        log = LateLog(lag=rng.randint(0, 4))
        for n, events in enumerate(_inputs(rng)):
            log.add(events[0], n)
        log.flush()
        reader = PreemptionFolder()
        fold_batch(reader, log.messages, 0, read_envelope)
        assert reader.order.holding == 0, seed
        assert without_slot_waits(reader.state.admission) == without_slot_waits(log.admission.state), seed
        closed = [e for e in map(read_envelope, (s.data for s in log.messages)) if isinstance(e.event, CycleCompleted)]
        assert len(closed) >= 5, seed


def test_a_pack_that_makes_a_tree_full_starts_a_cycle_at_its_end() -> None:
    folder = AdmissionFolder()
    config = [tree(cycle_gangs=50), host(cpu=100.0), pool("/a")]
    messages = [Stored(n + 1, "poolwise.config.default", _input(e, n).model_dump_json().encode())
                for n, e in enumerate(config)]
    pack = encode_pack([encode(_input(gang(f"g{i}", "/a"), 100 + i)) for i in range(55)])
    messages.append(Stored(4, "poolwise.gang.default", pack))
    result = fold_batch(folder, messages, 0, read_envelope)
    cycles = [d for d in result.decisions if isinstance(d.event, CycleCompleted)]
    assert [(c.event.trigger_seq, c.basis) for c in cycles] == [(4, 4)]  # once, after the whole pack
    assert sum(isinstance(d.event, GangAdmitted) for d in result.decisions) == 55
    assert folder.state.runtime("default").fresh == 0
