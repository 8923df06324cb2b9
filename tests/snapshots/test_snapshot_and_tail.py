"""A snapshot is a cache, never a source: the state from a snapshot taken at any position and the
tail after it equals the state from the whole log, and the decisions made from both are the same,
byte for byte (so no decision depends on when a snapshot was taken).

The log is the golden-decisions workload (bench/golden_decisions.py: three trees, every kind of
input, refusals, timeouts, cancels, preemptions, option changes), made smaller, with a fourth
part where finished gangs are forgotten (`gang_retention`). Both deciding folders (admission
with explain's notes, and preemption with the events its `CycleOrder` holds) are folded over it
as recorded, once straight through and once cut at random positions: exported there, pickled
into a snapshot's bytes, loaded into new folders, and folded on."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator

import pytest

import bench.golden_decisions as golden
from bench.workload import Workload
from events import ClockTicked, Envelope, TreeConfigured, TreeOptions, encode
from events.config import GangTimeoutOptions
from services.admission.domain.explain import explain
from services.admission.domain.gang_rows import gang_rows
from services.admission.domain.views import pool_numbers
from services.admission.folder import AdmissionFolder
from services.admission.queries import ExplainingFolder
from services.common.snapshots import Snapshot
from services.preemption.folder import PreemptionFolder
from tests.admission.builders import gang, pool, task

Log = list[tuple[str, Envelope]]
FORGETFUL = "forgetful"


def forgetful_part(h: golden.Harness) -> None:
    """A tree that forgets finished gangs after 4 s: gangs run and finish, then come late inputs
    for the forgotten ones."""
    options = TreeOptions(resources=["cpu"], gang_retention=4.0,
                          gang_timeout=GangTimeoutOptions(default=30, limit=100, jitter=0))
    h.add(TreeConfigured(tree=FORGETFUL, options=options))
    h.add(pool("/f", tree_name=FORGETFUL, reservation={"cpu": 10}).model_copy(update={"tree": FORGETFUL}))
    for round_ in range(6):
        names = [f"f{round_}-{i}" for i in range(4)]
        h.add_all([gang(n, "/f", tasks=2).model_copy(update={"tree": FORGETFUL}) for n in names], each=False)
        h.add(ClockTicked(tree=FORGETFUL), at=h.time + 1.0)
        h.pump()
        events = [task(f"{n}/{k}", "succeeded", n).model_copy(update={"tree": FORGETFUL})
                  for n in names for k in range(2)]
        if round_ >= 2:  # late: for gangs finished and forgotten two rounds ago
            old = f"f{round_ - 2}-0"
            events += [gang(old, "/f").model_copy(update={"tree": FORGETFUL}),
                       task(f"{old}/1", "running", old).model_copy(update={"tree": FORGETFUL})]
        h.time += 3.0
        h.add_all(events, each=False)


@pytest.fixture(scope="module")
def log(monkeypatch_module: pytest.MonkeyPatch) -> Log:
    monkeypatch_module.setattr(golden, "BENCH", Workload(gangs=240, leaves=12, hosts=4, tasks_per_gang=2,
                                                          fill=0.5, group_size=8, jobs_per_leaf=4))
    made: list[golden.Harness] = []
    real = golden.Harness

    def harness() -> golden.Harness:
        made.append(real())
        return made[-1]

    monkeypatch_module.setattr(golden, "Harness", harness)
    golden.run(rounds=12)
    h = made[0]
    forgetful_part(h)
    golden.tick_all(h, at=h.time + 50.0)
    return list(h.log)


@pytest.fixture(scope="module")
def monkeypatch_module() -> Iterator[pytest.MonkeyPatch]:
    with pytest.MonkeyPatch.context() as patch:
        yield patch


class Folders:
    def __init__(self) -> None:
        self.admission = ExplainingFolder(AdmissionFolder())
        self.preemption = PreemptionFolder()

    def fold(self, log: Log, start: int, end: int) -> list[str]:
        """Fold entries start..end-1 (positions start+1..end); the decisions, encoded."""
        out: list[str] = []
        for index in range(start, end):
            subject, envelope = log[index]
            if not golden.subject_filter(tuple(golden.SUBJECTS))(subject):
                continue
            for folder in (self.admission, self.preemption):
                out += [f"{folder.service} {index + 1} {encode(d).decode()}" for d in folder.step(envelope, index + 1)]
        return out

    def snapshot_and_load(self, at: int) -> Folders:
        """New folders from snapshots of these (the bytes a service would store and read back)."""
        new = Folders()
        for mine, theirs in ((self.admission, new.admission), (self.preemption, new.preemption)):
            data = Snapshot(mine.service, at, "test", mine.export()).encode()
            theirs.load(Snapshot.decode(data).state)  # type: ignore[attr-defined]
        return new

    def state_lines(self) -> list[str]:
        state, history = self.admission.state, self.admission.history
        lines: list[str] = []
        for tree in sorted(state.trees):
            rt = state.trees[tree]
            lines += [f"gang {json.dumps(row, sort_keys=True)}" for row in gang_rows(state, tree)]
            lines.append(f"pools {tree} {json.dumps(pool_numbers(state, tree), sort_keys=True)}")
            lines += [f"explain {json.dumps(explain(state, tree, g, history).to_dict(), sort_keys=True)}"
                      for g in rt.gangs]
            lines.append(f"{tree} waiters {sorted(rt.slot_waiters)} running {json.dumps(rt.running, sort_keys=True)} "
                         f"jobs {json.dumps(rt.jobs, sort_keys=True)} forgotten tasks {len(rt.forgotten_tasks)} "
                         f"timers {sorted(state.timers)} forgets {sorted(state.forgets)}")
            for pool_path in sorted(rt.queues):
                for name, queue in rt.queues[pool_path].items():
                    lines.append(f"queue {tree} {pool_path} {name} {[g.id for g in queue.ordered()]}")
        pre = self.preemption.state
        lines += [f"preemption {json.dumps(r.to_dict(), sort_keys=True)}" for r in pre.preemptions()]
        lines += [f"starvation {json.dumps(r, sort_keys=True)}" for r in pre.starvation()]
        lines.append(f"in flight {sorted(pre.in_flight.items())} deferred {sorted(pre.deferred.items())} "
                     f"holding {self.preemption.order.holding} kept {self.preemption.order.kept}")
        pre_gangs = {t: {g.id: (g.state, g.attempt) for g in rt.gangs.values()}
                     for t, rt in pre.admission.trees.items()}
        lines.append(f"preemption's fold {json.dumps(pre_gangs, sort_keys=True)}")
        return lines


@pytest.fixture(scope="module")
def straight(log: Log) -> tuple[list[str], list[str]]:
    folders = Folders()
    decisions = folders.fold(log, 0, len(log))
    return decisions, folders.state_lines()


def test_the_log_is_varied(log: Log, straight: tuple[list[str], list[str]]) -> None:
    decisions, _ = straight
    text = "\n".join(decisions)
    for rule in ("gang_forgotten", "gang_closed", "pool_missing"):
        assert rule in text, rule
    for kind in ("GangAdmitted", "PreemptionRequested", "GangTimedOut", "GangRequeued", "EntitlementsComputed"):
        assert kind in text, kind
    assert len(log) > 3000


@pytest.mark.parametrize("seed", range(8))
def test_a_snapshot_anywhere_and_its_tail_equal_the_whole_fold(log: Log, straight: tuple[list[str], list[str]],
                                                              seed: int) -> None:
    decisions, lines = straight
    cut = random.Random(seed).randrange(1, len(log))
    before = Folders()
    made = before.fold(log, 0, cut)
    after = before.snapshot_and_load(cut)
    made += after.fold(log, cut, len(log))
    assert made == decisions
    assert after.state_lines() == lines


def test_snapshots_taken_again_and_again_change_nothing(log: Log, straight: tuple[list[str], list[str]]) -> None:
    decisions, lines = straight
    folders, made, start = Folders(), [], 0
    for cut in [*sorted(random.Random(99).sample(range(1, len(log)), 12)), len(log)]:
        made += folders.fold(log, start, cut)
        folders, start = folders.snapshot_and_load(cut), cut
    assert made == decisions
    assert folders.state_lines() == lines




def test_a_gang_and_a_task_pickle_with_every_field() -> None:
    """`Gang` and `Task` pickle as their fields in a tuple (faster than a slots class's default):
    every field must come back, a field added later included."""
    import dataclasses
    import pickle

    from events.inputs import TaskSpec
    from services.admission.domain.model import Gang, Task

    spec = TaskSpec(id="g/0", resources={"cpu": 2.0})
    task = Task("g/0", "g", {"cpu": 2.0}, "running", 12.5, True, spec)
    values: dict[str, object] = {}
    for index, f in enumerate(dataclasses.fields(Gang)):
        values[f.name] = {"tasks": [task], "resources": {"cpu": 2.0}}.get(f.name, f"v{index}")
    gang = Gang(**values)  # type: ignore[arg-type]
    assert pickle.loads(pickle.dumps(task)) == task
    back = pickle.loads(pickle.dumps(gang))
    assert dataclasses.asdict(back) == dataclasses.asdict(gang)
