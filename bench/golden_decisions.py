"""A golden record of decisions: fold a varied log through the admission and preemption folders and
write every decision they make, byte for byte, so that a change meant to be behaviour-preserving
(an optimisation) can be checked against the output of the code before it.

    python -m bench.golden_decisions OUT.txt        # then: cmp before.txt OUT.txt

The log lives in a list, as one stream would hold it. Both folders (`ExplainingFolder` around
`AdmissionFolder`, and `PreemptionFolder`) fold every entry on the subjects they consume, in log
order; whatever either decides is appended to the end of the log (ids de-duplicated, as JetStream
does with `Nats-Msg-Id`) and is read by the folders in turn, as in the services (a cycle's
decisions took effect at its trigger: read back, they change nothing).
Every envelope goes through `encode`/`decode` on its way into the log, as on the wire.

What is in the log (deterministic: a seeded generator picks inputs from the state read so far):

1. tree `bench` of `bench.workload` (a few thousand gangs over 48 leaves), some leaves given
   `fair_share`, other `fifo_sort` orders, job limits, a controller limit and
   `preempt_lower_priority`; then rounds in which admitted tasks run, finish, fail and are lost;
2. tree `var`: reservations, limits, presets, static reservations, ephemeral `pool$user` pools
   and a `default_parent_pool`, revocable hosts, running-job limits; gangs of every kind
   (revocable, controller, non-preemptible, priorities), members in several events, refusals
   of every rule, waiting and placement timeouts (jittered), cancels, task state changes (also
   refused ones), preemptions acknowledged by the "executor", hosts that come and go, pool
   and tree option changes, ticks that arrive before the previous cycle was read back;
3. tree `dom`: the dominant resource policy with fair_share pools.

Written: one line per decision (`service<TAB>basis<TAB>encoded envelope`), then `#`-prefixed
lines with the final state as the read side shows it (gang rows, explanations, pool numbers,
preemption records, starvation) and a count of decisions per type.
"""

from __future__ import annotations

import json
import random
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.workload import Workload, config_events, gang_event
from events import (
    ClockTicked,
    Envelope,
    Event,
    GangCancelled,
    GangEnqueued,
    HostRegistered,
    HostRemoved,
    PoolConfig,
    PoolConfigChanged,
    PoolDeleted,
    TaskSpec,
    TaskStateChanged,
    TreeConfigured,
    TreeOptions,
    at_seconds,
    decode,
    encode,
)
from events.config import GangTimeoutOptions, PreemptionOptions
from services.admission.domain.explain import explain
from services.admission.domain.gang_rows import gang_rows
from services.admission.domain.model import ADMITTED, TERMINAL
from services.admission.domain.views import pool_numbers
from services.admission.folder import SUBJECTS, AdmissionFolder
from services.admission.queries import ExplainingFolder
from services.common.memlog import envelope_subject, subject_filter
from services.preemption.folder import PreemptionFolder

T0 = 1_767_225_600.0
SEED = 20_261_122
ROUNDS = 120
BENCH = Workload(gangs=3000, leaves=48, hosts=12, tasks_per_gang=2, fill=0.5, group_size=8, jobs_per_leaf=4)


@dataclass
class Harness:
    """The log in a list, and the two folders reading it."""

    admission: ExplainingFolder = field(default_factory=lambda: ExplainingFolder(AdmissionFolder()))
    preemption: PreemptionFolder = field(default_factory=PreemptionFolder)
    log: list[tuple[str, Envelope]] = field(default_factory=list)
    ids: set[str] = field(default_factory=set)
    duplicates: int = 0
    cursors: list[int] = field(default_factory=lambda: [0, 0])
    lines: list[str] = field(default_factory=list)
    kinds: Counter[str] = field(default_factory=Counter)
    inputs: int = 0
    time: float = T0

    def __post_init__(self) -> None:
        self.wanted = subject_filter(tuple(SUBJECTS))

    def add(self, event: Event, *, at: float | None = None) -> None:
        """Append one input at the current time (or `at`, never earlier than the last input)."""
        if at is not None:
            self.time = max(self.time, at)
        self.inputs += 1
        self._append(Envelope(id=f"in-{self.inputs}", time=at_seconds(self.time), source="golden", event=event))

    def _append(self, envelope: Envelope) -> None:
        if envelope.id in self.ids:
            self.duplicates += 1
            return
        self.ids.add(envelope.id)
        wire = decode(encode(envelope))
        self.log.append((envelope_subject(wire), wire))

    def pump(self) -> None:
        """Both folders fold what is new in the log, until neither decides anything more."""
        folders: Sequence[ExplainingFolder | PreemptionFolder] = (self.admission, self.preemption)
        moved = True
        while moved:
            moved = False
            for index, folder in enumerate(folders):
                while self.cursors[index] < len(self.log):
                    subject, envelope = self.log[self.cursors[index]]
                    self.cursors[index] += 1
                    seq = self.cursors[index]
                    if not self.wanted(subject):
                        continue
                    moved = True
                    for decided in folder.step(envelope, seq):
                        self.lines.append(f"{folder.service}\t{seq}\t{encode(decided).decode()}")
                        self.kinds[f"{folder.service}:{decided.event.type}"] += 1
                        self._append(decided)

    def add_all(self, events: Sequence[Event], *, each: bool) -> None:
        for event in events:
            self.add(event)
            if each:
                self.pump()
        self.pump()

    def note(self, text: str) -> None:
        self.lines.append(f"# {text}")


# --- tree `bench`: the benchmark's workload, with some leaves made different -------------------


def bench_setup(h: Harness) -> None:
    h.add_all(config_events(BENCH), each=False)
    reservation = {k: v * 0.8 / BENCH.leaves for k, v in BENCH.capacity().items()}
    variants: list[dict[str, Any]] = [
        {"mode": "fair_share"},
        {"mode": "fair_share", "max_running_jobs": 2},
        {"fifo_sort": ["pending_tasks", "priority"]},
        {"fifo_sort": ["arrival"]},
        {"max_running_jobs": 1},
        {"max_jobs": 3},
        {"controller_limit": 50.0},
        {"preempt_lower_priority": True},
        {"limit": {"cpu": 6.0}},
        {"reservation_type": "static"},
    ]
    for i, extra in enumerate(variants):
        config = PoolConfig(reservation=dict(reservation), **extra)
        h.add(PoolConfigChanged(tree=BENCH.tree, path=BENCH.leaf(i * 3), config=config))
    h.pump()


def bench_gang(index: int, prefix: str, rng: random.Random) -> GangEnqueued:
    event = gang_event(BENCH, index, prefix)
    roll = rng.random()
    if roll < 0.15:
        return event.model_copy(update={"priority": rng.randrange(4)})
    if roll < 0.2:
        return event.model_copy(update={"controller": True})
    return event


def bench_progress(h: Harness, rng: random.Random) -> list[Event]:
    """Admitted tasks of tree `bench` move on: most run, some finish (freeing room), a few fail."""
    rt = h.admission.state.trees.get(BENCH.tree)
    events: list[Event] = []
    if rt is None:
        return events
    for gang in rt.gangs.values():
        if gang.state != ADMITTED or rng.random() < 0.5:
            continue
        for task in gang.tasks:
            if task.state in TERMINAL:
                continue
            if task.state == "running":
                roll = rng.random()
                state = "succeeded" if roll < 0.25 else "failed" if roll < 0.28 else None
            else:
                state = "running" if rng.random() < 0.9 else "placed"
            if task.preemption_requested:
                state = "preempted"
            if state is not None:
                events.append(TaskStateChanged(tree=BENCH.tree, gang=gang.id, task=task.id, state=state))
    return events


# --- tree `var`: every kind of gang and input ----------------------------------------------------

VAR = "var"
VAR_KINDS = ("cpu", "memory", "gpu")
USERS = ("alice", "bob", "carol", "dave", "erin", "frank")
VAR_POOLS = ("/prod/a", "/prod/a", "/prod/b", "/prod/b", "/prod/c", "/dev/x", "/dev/y", "/batch/low", "/batch/low",
             "/users", "/users", "/scratch", "/tmpA", "/tmpB", "/nope/x", "/prod", "/gone")


def var_options(**changes: Any) -> TreeOptions:
    base: dict[str, Any] = dict(
        resources=list(VAR_KINDS), node_tag_filter=["v"], default_parent_pool="/adhoc", max_ephemeral_pools_per_user=2,
        gang_timeout=GangTimeoutOptions(default=20.0, limit=60.0, jitter=5.0),
        preemption=PreemptionOptions(enabled=True, grace=6.0), starvation_timeout=15.0,
        starvation_tolerance=0.8,
        pool_config_presets={"small": PoolConfig(limit={"cpu": 20.0}), "fs": PoolConfig(mode="fair_share")})
    base.update(changes)
    return TreeOptions(**base)


def var_pool(path: str, **config: Any) -> PoolConfigChanged:
    return PoolConfigChanged(tree=VAR, path=path, config=PoolConfig(**config), created=True)


def var_setup(h: Harness) -> None:
    events: list[Event] = [
        TreeConfigured(tree=VAR, options=var_options()),
        var_pool("/prod", reservation={"cpu": 40.0, "memory": 400.0}, limit={"cpu": 100.0}),
        var_pool("/prod/a", reservation={"cpu": 20.0, "memory": 200.0}, preempt_lower_priority=True,
                 fifo_sort=["priority", "pending_tasks", "arrival"]),
        var_pool("/prod/b", reservation={"cpu": 10.0}, mode="fair_share", max_running_jobs=3),
        var_pool("/prod/c", reservation={"cpu": 5.0}, controller_limit=40.0, config_presets=["small"]),
        var_pool("/dev", reservation={"cpu": 20.0}, limit={"cpu": 60.0, "gpu": 2.0}),
        var_pool("/dev/x", reservation={"cpu": 10.0}, max_jobs=4),
        var_pool("/dev/y", reservation={"cpu": 10.0}, reservation_type="static", config_presets=["fs"]),
        var_pool("/users", reservation={"cpu": 10.0}, create_ephemeral_subpools=True,
                 ephemeral_subpool_config=PoolConfig(limit={"cpu": 10.0}, max_running_jobs=2)),
        var_pool("/adhoc", reservation={"cpu": 5.0}),
        var_pool("/batch", share=3.0),
        var_pool("/batch/low", share={"cpu": 2.0}, slack_limit=50.0),
        var_pool("/gone", reservation={"cpu": 1.0}),
        var_pool("/burst", reservation={"cpu": 15.0, "memory": 100.0}),
        HostRegistered(host="va", resources={"cpu": 60.0, "memory": 600.0, "gpu": 4.0}, revocable={"cpu": 20.0},
                       tags=["v"]),
        HostRegistered(host="vb", resources={"cpu": 40.0, "memory": 400.0}, revocable={"cpu": 10.0}, tags=["v", "b"]),
    ]
    h.add_all(events, each=False)


@dataclass
class VarDriver:
    """Picks the inputs of tree `var` from what the folders have read so far."""

    h: Harness
    rng: random.Random
    count: int = 0
    later: dict[int, list[Event]] = field(default_factory=dict)  # round -> members held back until then
    task_ids: list[str] = field(default_factory=list)

    def new_gang(self, round_: int) -> list[Event]:
        rng = self.rng
        self.count += 1
        gang_id = f"v{self.count}"
        size = rng.choice((1, 1, 2, 2, 3, 4))
        pool = rng.choice(VAR_POOLS)
        user = rng.choice(USERS) if rng.random() > 0.03 else "bad user!"
        cpu = rng.choice((1.0, 1.0, 2.0, 2.5, 4.0, 8.0))
        resources: dict[str, float] = {"cpu": cpu, "memory": cpu * rng.choice((2.0, 8.0))}
        roll = rng.random()
        if roll < 0.08:
            resources["gpu"] = 1.0
        elif roll < 0.1:
            resources["fpga"] = 1.0  # unknown kind
        elif roll < 0.13:
            resources["cpu"] = 500.0  # above any limit
        specs = [TaskSpec(id=f"{gang_id}.{i}", resources=resources) for i in range(size)]
        if self.task_ids and rng.random() < 0.03:
            specs[0] = TaskSpec(id=rng.choice(self.task_ids), resources=resources)  # duplicate task id
        self.task_ids += [s.id for s in specs]
        fields: dict[str, Any] = dict(
            tree=VAR, gang=gang_id, pool=pool, job=f"job{rng.randrange(10)}", user=user, size=size,
            priority=rng.randrange(4), preemptible=rng.random() > 0.15, revocable=rng.random() < 0.15,
            controller=rng.random() < 0.1,
            timeout=rng.choice((None, None, None, 4.0, 12.0, 90.0)))
        if rng.random() < 0.03:
            return [GangEnqueued(**{**fields, "size": max(1, size - 1)}, tasks=specs)] if size > 1 else []
        chunks: list[list[TaskSpec]] = []
        rest = list(specs)
        while rest:
            take = rng.randint(1, len(rest))
            chunks.append(rest[:take])
            rest = rest[take:]
        events = [GangEnqueued(**fields, tasks=chunk) for chunk in chunks]
        first, others = events[0], events[1:]
        for event in others:
            if rng.random() < 0.12:
                continue  # never arrives: the gang times out waiting
            if rng.random() < 0.05:
                event = event.model_copy(update={"size": event.size + 1})  # size mismatch
            self.later.setdefault(round_ + rng.randrange(0, 4), []).append(event)
        return [first]

    def progress(self) -> list[Event]:
        """Tasks of admitted gangs move on (some stay unplaced until their placement times out);
        preemptions are acknowledged; a few reports are refused."""
        rng = self.rng
        rt = self.h.admission.state.trees.get(VAR)
        events: list[Event] = []
        if rt is None:
            return events
        for gang in rt.gangs.values():
            if gang.state != ADMITTED:
                continue
            stuck = hash_of(gang.id) % 7 == 0  # never placed: placement timeout, requeue
            for task in gang.tasks:
                if task.state in TERMINAL:
                    continue
                state: str | None = None
                if task.preemption_requested:
                    state = "preempted" if rng.random() < 0.6 else None
                elif stuck:
                    state = "placing" if task.state == "ready" and rng.random() < 0.3 else None
                elif task.state in ("ready", "placing"):
                    state = rng.choice(("placing", "placed", "running", "running"))
                elif task.state in ("placed", "launching"):
                    state = rng.choice(("launching", "running"))
                else:
                    roll = rng.random()
                    state = ("succeeded" if roll < 0.15 else "failed" if roll < 0.18 else "lost" if roll < 0.2
                             else "killed" if roll < 0.21 else None)
                if state is not None and state != task.state:
                    events.append(TaskStateChanged(tree=VAR, gang=gang.id, task=task.id, state=state))
        events += self.refused_reports(rt.gangs)
        return events

    def refused_reports(self, gangs: dict[str, Any]) -> list[Event]:
        rng = self.rng
        events: list[Event] = [TaskStateChanged(tree=VAR, gang="v0", task="no-such-task", state="running")]
        known = list(gangs.values())
        if not known:
            return events
        gang = rng.choice(known)
        if gang.tasks:
            task = gang.tasks[0]
            events.append(TaskStateChanged(tree=VAR, gang=gang.id, task=task.id, state="pending"))
            events.append(TaskStateChanged(tree=VAR, gang="wrong", task=task.id, state="running"))
            if gang.state != ADMITTED:
                events.append(TaskStateChanged(tree=VAR, gang=gang.id, task=task.id, state="running"))
            if task.state in TERMINAL:
                events.append(TaskStateChanged(tree=VAR, gang=gang.id, task=task.id, state="running"))
            if task.state == "running":
                events.append(TaskStateChanged(tree=VAR, gang=gang.id, task=task.id, state="ready"))
        return events

    def cancels(self) -> list[Event]:
        rng = self.rng
        rt = self.h.admission.state.trees.get(VAR)
        if rt is None or not rt.gangs or rng.random() < 0.3:
            return []
        known = list(rt.gangs.values())
        events: list[Event] = []
        for _ in range(rng.randrange(1, 3)):
            gang = rng.choice(known)
            events.append(GangCancelled(tree=VAR, gang=gang.id, reason=f"golden cancel of a {gang.state} gang"))
        if rng.random() < 0.2:
            events.append(GangCancelled(tree=VAR, gang="never-enqueued"))
        return events

    def config(self, round_: int) -> list[Event]:
        """Configuration changes at fixed rounds."""
        changes: dict[int, list[Event]] = {
            15: [var_pool("/prod/b", reservation={"cpu": 10.0}, mode="fifo", max_running_jobs=3)],
            22: [HostRegistered(host="vc", resources={"cpu": 30.0, "memory": 300.0, "gpu": 2.0}, tags=["v"])],
            30: [var_pool("/prod/a", reservation={"cpu": 20.0, "memory": 200.0}, preempt_lower_priority=True,
                          fifo_sort=["arrival"])],
            38: [HostRemoved(host="vb")],
            46: [TreeConfigured(tree=VAR, options=var_options(max_running_jobs_per_pool=4, max_jobs_per_pool=12))],
            55: [var_pool("/users", reservation={"cpu": 10.0}, create_ephemeral_subpools=True,
                          ephemeral_subpool_config=PoolConfig(limit={"cpu": 6.0}, mode="fair_share"))],
            60: [PoolDeleted(tree=VAR, path="/gone")],
            64: [var_pool("/dev/x", reservation={"cpu": 10.0}, max_jobs=2, max_running_jobs=1)],
            72: [HostRegistered(host="vb", resources={"cpu": 40.0, "memory": 400.0}, revocable={"cpu": 10.0},
                                tags=["v"])],
            80: [TreeConfigured(tree=VAR, options=var_options(preemption=PreemptionOptions(enabled=False)))],
            90: [TreeConfigured(tree=VAR, options=var_options(
                gang_timeout=GangTimeoutOptions(default=8.0, limit=30.0, jitter=0.0)))],
            100: [HostRemoved(host="va"), var_pool("/prod/c", reservation={"cpu": 5.0}, controller_limit=80.0)],
            108: [HostRegistered(host="va", resources={"cpu": 80.0, "memory": 800.0, "gpu": 4.0},
                                 revocable={"cpu": 20.0}, tags=["v"])],
        }
        return changes.get(round_, [])

    def filler(self, pool: str, count: int, cpu: float) -> list[Event]:
        """Plain preemptible gangs of two tasks: `/batch/low` borrows with them, and `/burst`
        takes its reservation back with them later (preemption between pools)."""
        events: list[Event] = []
        for _ in range(count):
            self.count += 1
            gang_id = f"v{self.count}"
            events.append(GangEnqueued(tree=VAR, gang=gang_id, pool=pool, job=f"fill{self.count % 3}", size=2,
                                       priority=self.rng.randrange(2), timeout=90.0,
                                       tasks=[TaskSpec(id=f"{gang_id}.{i}", resources={"cpu": cpu, "memory": 1.0})
                                              for i in range(2)]))
        return events

    def round(self, round_: int) -> list[Event]:
        events = self.config(round_)
        if round_ < 40 or 75 <= round_ < 85:
            events += self.filler("/batch/low", 3, 1.0)
        if round_ in (45, 46, 47, 90, 91):
            events += self.filler("/burst", 6, 2.0)
        for _ in range(self.rng.randrange(2, 9)):
            events += self.new_gang(round_)
        events += self.later.pop(round_, [])
        events += self.progress()
        events += self.cancels()
        return events


def hash_of(text: str) -> int:
    """A stable small hash (Python's `hash` of a str changes from run to run)."""
    return sum(text.encode()) * 31 + len(text)


# --- tree `dom`: the dominant resource policy --------------------------------------------------

DOM = "dom"


def dom_setup(h: Harness) -> None:
    options = TreeOptions(resources=["cpu", "memory"], policy="dominant", node_tag_filter=["dom"],
                          gang_timeout=GangTimeoutOptions(default=50.0, limit=50.0, jitter=0.0),
                          preemption=PreemptionOptions(enabled=True, grace=3.0))
    events: list[Event] = [
        TreeConfigured(tree=DOM, options=options),
        PoolConfigChanged(tree=DOM, path="/x", config=PoolConfig(reservation={"cpu": 10.0}, mode="fair_share")),
        PoolConfigChanged(tree=DOM, path="/y", config=PoolConfig(reservation={"memory": 100.0}, share=2.0)),
        PoolConfigChanged(tree=DOM, path="/z", config=PoolConfig()),
        HostRegistered(host="d1", resources={"cpu": 40.0, "memory": 400.0}, tags=["dom"]),
    ]
    h.add_all(events, each=False)


def dom_gangs(round_: int, rng: random.Random) -> list[Event]:
    events: list[Event] = []
    for n in range(rng.randrange(0, 4)):
        gang_id = f"d{round_}.{n}"
        cpu_heavy = rng.random() < 0.5
        need = {"cpu": 4.0, "memory": 10.0} if cpu_heavy else {"cpu": 1.0, "memory": 60.0}
        size = rng.randrange(1, 3)
        events.append(GangEnqueued(tree=DOM, gang=gang_id, pool=rng.choice(("/x", "/y", "/z")),
                                   job=f"dj{rng.randrange(5)}", size=size, priority=rng.randrange(2),
                                   tasks=[TaskSpec(id=f"{gang_id}.{i}", resources=need) for i in range(size)]))
    return events


def dom_progress(h: Harness, rng: random.Random) -> list[Event]:
    rt = h.admission.state.trees.get(DOM)
    events: list[Event] = []
    if rt is None:
        return events
    for gang in rt.gangs.values():
        if gang.state != ADMITTED:
            continue
        for task in gang.tasks:
            if task.preemption_requested and task.state not in TERMINAL:
                events.append(TaskStateChanged(tree=DOM, gang=gang.id, task=task.id, state="preempted"))
            elif task.state == "ready":
                events.append(TaskStateChanged(tree=DOM, gang=gang.id, task=task.id, state="running"))
            elif task.state == "running" and rng.random() < 0.2:
                events.append(TaskStateChanged(tree=DOM, gang=gang.id, task=task.id, state="succeeded"))
    return events


# --- the run -------------------------------------------------------------------------------------


def snapshot(h: Harness, label: str, trees: Sequence[str], every: int = 1) -> None:
    """The read side as of now: explanations of the gangs (every `every`-th of big trees)."""
    state = h.admission.state
    for tree in trees:
        rt = state.trees.get(tree)
        if rt is None:
            continue
        for i, gang_id in enumerate(rt.gangs):
            if i % every == 0:
                found = explain(state, tree, gang_id, h.admission.history).to_dict()
                h.note(f"{label} explain {json.dumps(found, sort_keys=True)}")


def final_state(h: Harness) -> None:
    state = h.admission.state
    for tree in (BENCH.tree, VAR, DOM):
        for row in gang_rows(state, tree):
            h.note(f"gang {json.dumps(row, sort_keys=True)}")
        h.note(f"pools {tree} {json.dumps(pool_numbers(state, tree), sort_keys=True)}")
        rt = state.trees[tree]
        h.note(f"slot_waiters {tree} {sorted(rt.slot_waiters)} requeues {rt.requeues} "
               f"running {json.dumps(rt.running, sort_keys=True)} jobs {json.dumps(rt.jobs, sort_keys=True)}")
        for pool in sorted(rt.queues):
            for name, queue in rt.queues[pool].items():
                h.note(f"queue {tree} {pool} {name} {[g.id for g in queue.ordered()]}")
    snapshot(h, "final", (VAR, DOM))
    snapshot(h, "final", (BENCH.tree,), every=37)
    pre = h.preemption.state
    for record in pre.preemptions():
        h.note(f"preemption {json.dumps(record.to_dict(), sort_keys=True)}")
    for row in pre.starvation():
        h.note(f"starvation {json.dumps(row, sort_keys=True)}")
    pre_rt = pre.admission.trees
    for tree in (BENCH.tree, VAR, DOM):
        mine = {g.id: (g.state, g.attempt, g.queue) for g in state.trees[tree].gangs.values()}
        theirs = {g.id: (g.state, g.attempt, g.queue) for g in pre_rt[tree].gangs.values()}
        h.note(f"preemption's fold agrees on {tree}: {mine == theirs}")
    h.note(f"log {len(h.log)} entries, {h.inputs} inputs, {sum(h.kinds.values())} decisions, "
           f"{h.duplicates} dropped as duplicates")
    for kind, count in sorted(h.kinds.items()):
        h.note(f"decisions {kind} {count}")


def tick_all(h: Harness, at: float) -> None:
    """One tick per tree. (A tick naming no tree starts every tree's cycle at one basis, and the
    cycles' `entitlements` and `cycle` decisions then share their derived ids across trees: the
    log keeps only the first tree's, and the others' cycles never close. So ticks name a tree.)"""
    for tree in (BENCH.tree, VAR, DOM):
        h.add(ClockTicked(tree=tree), at=at)
    h.pump()


def run(rounds: int = ROUNDS, progress: Callable[[str], None] | None = None) -> list[str]:
    rng = random.Random(SEED)
    h = Harness()
    bench_setup(h)
    var_setup(h)
    dom_setup(h)
    tick_all(h, at=T0 + 1.0)
    # The workload's gangs, folded one by one (each read by both folders before the next arrives),
    # with a tick every 500 gangs.
    for index in range(BENCH.gangs):
        h.add(bench_gang(index, "g", rng))
        h.pump()
        if index % 500 == 499:
            h.add(ClockTicked(tree=BENCH.tree), at=h.time + 0.5)
            h.pump()
    driver = VarDriver(h, rng)
    extra = BENCH.gangs
    for round_ in range(rounds):
        h.time += 3.0
        events: list[Event] = driver.round(round_)
        events += dom_gangs(round_, rng)
        events += dom_progress(h, rng)
        events += bench_progress(h, rng)
        if round_ % 5 == 0:
            events += [bench_gang(extra + i, "x", rng) for i in range(150)]
            extra += 150
        rng.shuffle(events)
        h.add_all(events, each=rng.random() < 0.6)
        trees = [BENCH.tree, VAR, DOM]
        rng.shuffle(trees)
        for tree in trees:
            h.add(ClockTicked(tree=tree))
            if rng.random() < 0.15:
                h.add(ClockTicked(tree=tree))  # before the cycle it follows is read back: a cycle of its own
        h.pump()
        if round_ % 25 == 24:
            snapshot(h, f"round {round_}", (VAR,))
        if progress is not None and round_ % 20 == 0:
            progress(f"round {round_}: {len(h.log)} log entries")
    tick_all(h, at=h.time + 200.0)  # every timer due fires
    final_state(h)
    return h.lines


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        raise SystemExit("usage: python -m bench.golden_decisions OUT.txt")
    lines = run(progress=lambda text: print(text, file=sys.stderr))
    with open(argv[0], "w", encoding="utf-8") as out:
        for line in lines:
            out.write(line + "\n")
    decisions = sum(1 for line in lines if not line.startswith("#"))
    print(f"{decisions} decisions, {len(lines) - decisions} state lines -> {argv[0]}")


if __name__ == "__main__":
    main(sys.argv[1:])
