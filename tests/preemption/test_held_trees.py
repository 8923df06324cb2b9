"""A preemption instance deciding per tree (`services.preemption.held_trees.HeldTreesPreemption`)
decides the passes of the trees it holds and reads the others' from the log, and whatever it
holds, and whenever its trees change (a tree taken over while its pass is parked: its holder
published part of it, or none), it decides exactly what one service-wide instance decided: every
decision it makes is in the log with the same id and content, and its fold ends in the same
state, what the passes remember (since when each pool is over, each pool's starvation) included.

The logs are test_interleavings' random ones (three trees, one configured late; two pools with
preemption at grace 0; admission's decisions landing late, in batches, sometimes out of order;
a service-wide preemption instance that folds in random cuts and sometimes restarts), folded in
random batch cuts while the trees held change at random."""

from __future__ import annotations

import pickle
import random
from collections import deque
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import pytest

from events import (
    ClockTicked,
    CycleCompleted,
    Envelope,
    GangEnqueued,
    InputRejected,
    PreemptionRequested,
    TaskSpec,
    TaskStateChanged,
)
from services.admission.domain.runtime import TreeRuntime
from services.common.folding import fold_batch
from services.common.log import Stored
from services.common.memlog import subject_filter
from services.preemption.domain import lower_priority
from services.preemption.domain import passes as passes_module
from services.preemption.domain.state import PreemptionState
from services.preemption.folder import SUBJECTS, PreemptionFolder
from services.preemption.held_trees import HeldTreesPreemption
from services.tools.replay import verify
from tests.admission.builders import host, pool, tree, without_slot_waits
from tests.admission.test_interleavings import TREES, Log, random_log
from tests.held_trees import fold_in_random_cuts, recorded


def same(made: Envelope, found: Envelope) -> bool:
    return (made.basis, made.source, made.causation, made.time, made.event.model_dump(mode="json")) == (
        found.basis, found.source, found.causation, found.time, found.event.model_dump(mode="json"))


def folded(state: PreemptionState) -> dict[str, Any]:
    """What a pass reads and what the folder answers: not `last_pass` (a pass not decided here
    picked nothing) nor the admitted index (a superset, swept when read)."""
    return {"admission": without_slot_waits(state.admission),
            "memory": {name: asdict(memory) for name, memory in state.memory.items()
                       if memory.over or memory.starvation},
            "in_flight": state.in_flight, "deferred": state.deferred,
            "records": [r.to_dict() for r in state.records], "open": sorted(state.open)}


def whole(messages: list[Stored]) -> PreemptionFolder:
    """A service-wide instance's fold of the log (of what it reads: `SUBJECTS`)."""
    folder = PreemptionFolder()
    read = subject_filter(SUBJECTS)
    fold_batch(folder, [m for m in messages if read(m.subject)], 0)
    return folder


class OneInstance:
    """Preemption as one service-wide instance: it folds what is new and publishes all it decides."""

    def __init__(self) -> None:
        self.folder = PreemptionFolder()
        self.read = 0

    def __call__(self, messages: list[Stored]) -> list[Envelope]:
        result = fold_batch(self.folder, messages[self.read:], self.read)
        self.read = result.last_seq
        return result.decisions


def contended_log(seed: int, preemption: Callable[[list[Stored]], list[Envelope]] | None = None) -> Log:
    """Three trees whose two pools take turns at wanting the whole cluster: the one that holds it
    is over its entitlement when the other's gangs come, and gives back (grace 0); the executor
    stops what is asked for, sometimes late. Admission's and a service-wide preemption's
    decisions land late, in batches; preemption's sometimes after a trigger whose cycle has not
    landed yet (a reader holds them behind it)."""
    rng = random.Random(seed)
    log = Log()
    for name in TREES:
        log.add(tree(name=name, grace=0.0), 0.0, source="tree")
        for path in ("/a", "/b"):
            log.add(pool(path, tree_name=name), 0.0, source="tree")
    log.add(host(cpu=6.0), 0.0, source="tree")
    publish = preemption or OneInstance()
    gid = 0
    late: list[Envelope] = []  # preemption's decisions on their way: some land after the next trigger

    def settle() -> None:
        for _ in range(rng.randint(1, 3)):
            decided = log.fold()
            if late and rng.random() < 0.5:  # after a trigger whose cycle has not landed yet
                log.land(late)
                late.clear()
            log.land(decided)
            late.extend(publish(log.messages))
            if rng.random() < 0.5:
                log.land(late)
                late.clear()

    for turn in range(rng.randint(4, 8)):
        for name in rng.sample(TREES, rng.randint(1, len(TREES))):
            path = ("/a", "/b")[(turn + TREES.index(name)) % 2]
            for _ in range(rng.randint(2, 6)):
                gid += 1
                log.add(GangEnqueued(tree=name, gang=f"g{gid}", pool=path, job=f"j{gid % 3}", size=1,
                                     tasks=[TaskSpec(id=f"g{gid}/0", resources={"cpu": 1.0})]), rng.choice([0.0, 1.0]))
        log.add(ClockTicked(), 1.0, source="admission:clock")
        settle()
        for name in TREES:  # the executor: admitted tasks run, asked-for ones stop (some later)
            rt = log.admission.state.trees.get(name)
            for gang in [] if rt is None else list(rt.gangs.values()):
                for task in gang.tasks if gang.state == "admitted" else []:
                    if task.preemption_requested and rng.random() < 0.8:
                        log.add(TaskStateChanged(tree=name, gang=gang.id, task=task.id, state="preempted"), 0.5)
                    elif task.state in ("ready", "placed"):
                        log.add(TaskStateChanged(tree=name, gang=gang.id, task=task.id, state="running"), 0.0)
        log.add(ClockTicked(), 1.0, source="admission:clock")
        settle()
    log.add(ClockTicked(), 1.0, source="admission:clock")
    for _ in range(4):
        settle()
    log.land(late)
    return log


LOGS = [("random", seed) for seed in range(12)] + [("contended", seed) for seed in range(6)]


@pytest.mark.parametrize("out_of_order", [False, True], ids=["in-order", "out-of-order"])
def test_deciding_the_trees_held_and_reading_the_others_decides_what_one_instance_did(out_of_order: bool) -> None:
    taken_over = picked = 0
    for kind, seed in LOGS:
        log = random_log(seed, out_of_order) if kind == "random" else contended_log(seed + out_of_order)
        folder = HeldTreesPreemption()
        # a tree taken over while its pass is parked is decided at once (the shell's look), not read from the log
        cuts = fold_in_random_cuts(folder, log.messages, TREES, seed, same, folder.take_over)
        taken_over += cuts.taken_over
        picked += sum(isinstance(d.event, PreemptionRequested) for d in cuts.decisions)
        assert folded(folder.state) == folded(whole(log.messages).state), seed
    assert taken_over > 5 and picked > 5  # (takeovers of a parked pass, and picks, were exercised)


def test_an_instance_picks_no_victim_of_a_tree_it_does_not_hold_and_remembers_what_its_holder_does() -> None:
    for seed in range(10):
        log = random_log(seed, out_of_order=False)
        folder = HeldTreesPreemption()
        folder.give_up_seconds = float("inf")  # (the logs' time is synthetic: a close may land minutes late)
        folder.held = frozenset({"default"})
        result = fold_batch(folder, log.messages, 0)
        assert {getattr(d.event, "tree", None) for d in result.decisions} <= {"default"}, seed
        assert set(folder.decided) <= {"default"}
        assert folder.settled(), seed
        assert folded(folder.state) == folded(whole(log.messages).state), seed
    assert set(folder.read) - {"default"}  # the other trees' passes were read from the log


def test_a_snapshot_of_a_parked_fold_is_not_taken_and_either_mode_starts_from_the_others() -> None:
    log = random_log(3, out_of_order=False)
    folder = HeldTreesPreemption()
    told: list[str] = []
    folder.on_waiting = told.extend
    for stored in log.messages:  # up to the first pass left to another instance
        fold_batch(folder, [stored], stored.seq - 1)
        if folder.waiting_trees():
            break
    assert not folder.settled() and told == sorted(folder.waiting_trees())
    fold_batch(folder, log.messages[stored.seq:], stored.seq)
    assert folder.settled()
    service_wide = PreemptionFolder()  # a service-wide start from a per-tree instance's snapshot
    service_wide.load(folder.export())
    assert service_wide.state.held is None
    per_tree = HeldTreesPreemption()
    per_tree.held = frozenset({"t2"})
    per_tree.load(whole(log.messages).export())  # and the other way round
    assert per_tree.state.held == frozenset({"t2"}) and isinstance(per_tree.order, type(folder.order))


def test_a_per_tree_start_from_a_snapshot_holding_pass_closes_behind_a_cycle_ends_where_one_instance_does() -> None:
    """A service-wide instance's snapshot may hold events behind an open admission cycle
    (`CycleOrder`), preemption passes' closes among them (read, not folded): a per-tree instance
    that starts from it, holding no tree, parks the passes that follow and goes on as each close
    is read, and ends in the state of one instance's fold of the whole log."""
    starts = 0
    for seed in range(12):
        messages = contended_log(seed).messages
        expected = folded(whole(messages).state)
        plain = PreemptionFolder()
        for cut in range(1, len(messages)):
            fold_batch(plain, messages[cut - 1:cut], cut - 1)
            held = plain.order.export()[2]
            assert isinstance(held, deque)
            if not any(e.source == "preemption" and isinstance(e.event, CycleCompleted) for e, _, _ in held):
                continue
            starts += 1
            per_tree = HeldTreesPreemption()
            per_tree.load(pickle.loads(pickle.dumps(plain.export())))  # (a copy, as a snapshot is)
            fold_batch(per_tree, messages[cut:], cut)
            assert per_tree.settled(), (seed, cut)
            assert folded(per_tree.state) == expected, (seed, cut)
    assert starts > 3


def test_a_pass_whose_holder_raised_is_remembered_as_far_as_the_holder_got(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pass that raises (a bug) is refused and closed with no decisions (`failed_cycle`), and
    what it remembers is what it had set before it raised: an instance that picks nothing for the
    tree would remember the whole pass. Seeing the holder's refusal, it runs the pass whole (and
    drops its decisions), so it remembers the same. Each folds what its service reads (the
    refusal is on `poolwise.rejected.<tree>`, which a service-wide instance does not read: a
    per-tree one reads it, `HeldTreesPreemption.subjects`, and folds none of it)."""
    real = lower_priority.make_room

    def make_room(rt: TreeRuntime, pools: Any, holdings: Any) -> Any:
        if len(rt.gangs) % 3 == 1:  # (a function of the state: the same passes raise everywhere)
            raise RuntimeError("a bug in make_room")
        return real(rt, pools, holdings)

    monkeypatch.setattr(passes_module, "make_room", make_room)
    failed = 0
    for seed in range(8):
        messages = contended_log(seed).messages
        failed += sum(isinstance(e.event, InputRejected) and e.source == "preemption"
                      for e in recorded(messages).values())
        rng = random.Random(seed)
        folder = HeldTreesPreemption()
        folder.held = frozenset(rng.sample(TREES, rng.randint(0, 1)))
        read = subject_filter(folder.subjects)  # (as the service's `run_folder` is given them)
        fold_batch(folder, [m for m in messages if read(m.subject)], 0)
        assert folder.settled(), seed
        assert not folder.given_up, seed
        assert folded(folder.state) == folded(whole(messages).state), seed
    assert failed > 3


class TwoInstances:
    """Preemption as two per-tree instances, each publishing its trees' passes (a decision both
    publish is stored once, as JetStream's duplicate window does); now and then one dies before
    publishing what it just decided, the other takes its trees over, and a new instance starts
    from the log, holding nothing, and may be given a tree back."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.instances = [HeldTreesPreemption(), HeldTreesPreemption()]
        self.instances[0].held, self.instances[1].held = frozenset(TREES[:2]), frozenset(TREES[2:])
        self.read = [0, 0]
        self.sent: set[str] = set()
        self.deaths = self.takeovers = 0

    def __call__(self, messages: list[Stored]) -> list[Envelope]:
        out: list[Envelope] = []
        for i in range(2):
            folder = self.instances[i]
            result = fold_batch(folder, messages[self.read[i]:], self.read[i])
            self.read[i] = result.last_seq
            if self.rng.random() < 0.08:  # it dies before publishing: the other takes its trees
                self.deaths += 1
                other = self.instances[1 - i]
                self.takeovers += bool(other.waiting_trees() & folder.held)
                other.held = frozenset(TREES)
                out += self._sent(other, other.take_over())
                self.instances[i], self.read[i] = HeldTreesPreemption(), 0
                if self.rng.random() < 0.5:
                    give = frozenset(self.rng.sample(TREES, 1))
                    other.held -= give
                    self.instances[i].held = give
                continue
            out += self._sent(folder, folder.take_over() + result.decisions)
        return out

    def _sent(self, folder: HeldTreesPreemption, made: list[Envelope]) -> list[Envelope]:
        """What the tree gate lets out: the held trees' decisions (the others' are their holders')."""
        out = [d for d in made if getattr(d.event, "tree", None) in folder.held and d.id not in self.sent]
        self.sent.update(d.id for d in out)
        return out


def test_a_log_made_by_two_per_tree_instances_replays() -> None:
    """Two per-tree instances make preemption's part of the log, dying and taking over now and
    then: `replay --verify` (one service-wide fold) re-derives every decision of it, and misses
    none."""
    deaths = takeovers = 0
    for seed in range(8):
        two = TwoInstances(random.Random(seed))
        log = contended_log(seed, two)
        for _ in range(20):  # the instances alive fold the log until they decide nothing more
            extra = two(log.messages)
            if not extra:
                break
            log.land(extra)
        deaths, takeovers = deaths + two.deaths, takeovers + two.takeovers
        report = verify(log.messages)
        assert report.ok, (seed, [f.line() for f in report.findings[:3]])
        assert any(isinstance(e.event, PreemptionRequested) for e in recorded(log.messages).values()), seed
    assert deaths > 3 and takeovers > 0
