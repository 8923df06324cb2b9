"""Given events, when a tick, then decisions: small builders for the admission domain tests.

`Log` is the log in a list, folded into an `AdmissionState` as the admission service folds it:
every event gets the next sequence and a time; what the fold announces (timeouts, requeues,
refusals, finished gangs) is appended right after the event that caused it, and a tick's cycle
(`run_cycles`: decided and applied at the tick) is appended after the tick, its decisions not
read again (read back, they change nothing).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from events import (
    ClockTicked,
    CycleCompleted,
    EntitlementsComputed,
    Event,
    GangAdmitted,
    GangCancelled,
    GangEnqueued,
    GangFinished,
    GangMovedToQueue,
    GangRequeued,
    GangTimedOut,
    HostRegistered,
    InputRejected,
    PoolConfig,
    PoolConfigChanged,
    PoolDeleted,
    PreemptionRequested,
    TaskSpec,
    TaskStateChanged,
    TreeConfigured,
    TreeOptions,
)
from events.config import GangTimeoutOptions, PreemptionOptions
from events.views import as_model
from services.admission.domain.decide import run_cycles
from services.admission.domain.model import Gang, Ledger, Task
from services.admission.domain.runtime import TreeRuntime
from services.admission.domain.state import AdmissionState

TREE = "default"
NO_JITTER = GangTimeoutOptions(default=30, limit=100, jitter=0)

# --- inputs ------------------------------------------------------------------------------------


def tree(*, resources: Sequence[str] = ("cpu",), preemption: bool = True, grace: float = 30.0,
         gang_timeout: GangTimeoutOptions = NO_JITTER, name: str = TREE, **options: Any) -> TreeConfigured:
    """A tree over `resources` (cpu only by default), gang timeouts 30/100 s with no jitter."""
    return TreeConfigured(tree=name, options=TreeOptions(
        resources=list(resources), preemption=PreemptionOptions(enabled=preemption, grace=grace),
        gang_timeout=gang_timeout, **options))


def host(name: str = "cluster", revocable: Mapping[str, float] | None = None, **resources: float) -> HostRegistered:
    return HostRegistered(host=name, resources=resources, revocable=dict(revocable or {}))


def pool(path: str, *, tree_name: str = TREE, **config: Any) -> PoolConfigChanged:
    return PoolConfigChanged(tree=tree_name, path=path, config=PoolConfig(**config), created=True)


def delete_pool(path: str) -> PoolDeleted:
    return PoolDeleted(tree=TREE, path=path)


def gang(gang_id: str, to: str, *, tasks: int = 1, cpu: float = 1.0, resources: Mapping[str, float] | None = None,
         size: int | None = None, job: str | None = None, first: int = 0, **flags: Any) -> GangEnqueued:
    """`tasks` members `<gang>/<first>`... each needing `resources` (default: `cpu` only); size
    defaults to `tasks`, job to the gang id."""
    need = {"cpu": cpu} if resources is None else dict(resources)
    return GangEnqueued(tree=TREE, gang=gang_id, pool=to, job=job or gang_id, size=size or tasks,
                        tasks=[TaskSpec(id=f"{gang_id}/{first + i}", resources=need) for i in range(tasks)], **flags)


def task(task_id: str, state: str, gang_id: str | None = None) -> TaskStateChanged:
    return TaskStateChanged(tree=TREE, gang=gang_id or task_id.split("/")[0], task=task_id,
                            state=state)


def cancel(gang_id: str) -> GangCancelled:
    return GangCancelled(tree=TREE, gang=gang_id)


def preempt(gang_id: str, pool_path: str, *task_ids: str) -> PreemptionRequested:
    return PreemptionRequested(tree=TREE, pool=pool_path, gang=gang_id, tasks=list(task_ids), reason="test")


# --- the log -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Entry:
    seq: int
    time: float
    event: Event


@dataclass(slots=True)
class Log:
    """The log of one admission service, folded as it grows."""

    state: AdmissionState = field(default_factory=AdmissionState)
    entries: list[Entry] = field(default_factory=list)
    time: float = 0.0

    @property
    def seq(self) -> int:
        return len(self.entries)

    def append(self, event: Event, at: float | None = None) -> list[Event]:
        """Append one event and fold it; what the fold announces is appended (and folded) after it.
        Returns the announcements."""
        if at is not None:
            self.time = max(self.time, at)
        self.entries.append(Entry(self.seq + 1, self.time, event))
        announced = [o.event for o in self.state.apply(event, self.seq, self.time)]
        self.land(announced)
        return announced

    def feed(self, *events: Event, at: float | None = None) -> list[Event]:
        """Append inputs; returns everything the fold announced for them."""
        out: list[Event] = []
        for event in events:
            out += self.append(event, at)
        return out

    def tick(self, at: float | None = None, *, land: bool = True) -> list[Event]:
        """A clock tick: what the fold announces (timers), then the cycles it starts, decided and
        applied at the tick. With `land` the cycles' decisions are appended to the log (not read
        again: they took effect at the tick); without, they are only returned."""
        if at is not None:
            self.time = max(self.time, at)
        self.entries.append(Entry(self.seq + 1, self.time, ClockTicked()))
        tick_seq = self.seq
        out = [o.event for o in self.state.apply(ClockTicked(), tick_seq, self.time)]
        self.land(out)  # the timers' announcements land first, then the cycles' decisions
        decided = [o.event for o in run_cycles(self.state, tick_seq)]
        if land:
            for event in decided:
                self.entries.append(Entry(self.seq + 1, self.time, event))
        return out + decided

    def land(self, events: Iterable[Event]) -> None:
        for event in events:
            self.append(event)

    # --- reading the state ---

    @property
    def rt(self) -> TreeRuntime:
        return self.state.runtime(TREE)

    def gang(self, gang_id: str) -> Gang:
        return self.rt.gangs[gang_id]

    def task(self, task_id: str) -> Task:
        return self.rt.tasks[task_id]

    def ledger(self, path: str) -> Ledger:
        return self.rt.ledgers.get(path) or Ledger()

    def states(self, *gang_ids: str) -> dict[str, str]:
        return {g: self.gang(g).state for g in gang_ids}

    def queue(self, path: str, name: str = "pending") -> list[str]:
        queues = self.rt.queues.get(path)
        return [] if queues is None else [g.id for g in queues[name]]


def world(*events: Event, resources: Sequence[str] = ("cpu",), capacity: Mapping[str, float] | None = None,
          revocable: Mapping[str, float] | None = None, **options: Any) -> Log:
    """A log holding a tree (options as `tree`), one host of `capacity` (default cpu 100) and
    then `events` (pools, usually), all at time 0."""
    log = Log()
    amounts: dict[str, float] = dict(capacity or {"cpu": 100.0})
    log.feed(tree(resources=resources, **options), host("cluster", revocable, **amounts),
             *events, at=0.0)
    return log


# --- reading decisions -------------------------------------------------------------------------


def admitted(events: Iterable[Event]) -> list[str]:
    return [e.gang for e in events if isinstance(e, GangAdmitted)]


def moved(events: Iterable[Event]) -> dict[str, str]:
    return {e.gang: e.queue for e in events if isinstance(e, GangMovedToQueue)}


def rejected(events: Iterable[Event]) -> list[tuple[str, str]]:
    """(ref, rule) of every refusal."""
    return [(e.ref, e.rule) for e in events if isinstance(e, InputRejected)]


def refusal(events: Iterable[Event]) -> InputRejected:
    (found,) = [e for e in events if isinstance(e, InputRejected)]
    return found


def timed_out(events: Iterable[Event]) -> list[str]:
    return [e.gang for e in events if isinstance(e, GangTimedOut)]


def requeued(events: Iterable[Event]) -> list[str]:
    return [e.gang for e in events if isinstance(e, GangRequeued)]


def finished(events: Iterable[Event]) -> dict[str, str]:
    return {e.gang: e.outcome for e in events if isinstance(e, GangFinished)}


def entitlements(events: Iterable[Event]) -> dict[str, dict[str, float]]:
    """Per pool, the non-slack entitlement of the (one) cycle among `events`."""
    (computed,) = [e for e in events if isinstance(e, EntitlementsComputed)]
    return {p.path: dict(p.non_slack_entitlement) for p in computed.pools}


def slack_entitlements(events: Iterable[Event]) -> dict[str, dict[str, float]]:
    (computed,) = [e for e in events if isinstance(e, EntitlementsComputed)]
    return {p.path: dict(p.slack_entitlement) for p in computed.pools}


def cycles(events: Iterable[Event]) -> list[CycleCompleted]:
    return [e for e in events if isinstance(e, CycleCompleted)]


def kinds(events: Iterable[Event]) -> list[str]:
    return [e.type for e in events]


# --- comparing states ---------------------------------------------------------------------------


def snapshot(state: AdmissionState) -> dict[str, Any]:
    """Everything the fold keeps, as plain values (for "the same state" comparisons)."""
    trees: dict[str, Any] = {}
    for name, rt in sorted(state.trees.items()):
        trees[name] = {
            "gangs": {g.id: {"pool": g.pool, "job": g.job, "state": g.state, "queue": g.queue, "arrival": g.arrival,
                             "attempt": g.attempt, "head_rank": g.head_rank, "admitted_at": g.admitted_at,
                             "timeout": g.timeout, "slot_wait": g.slot_wait,
                             "tasks": [(t.id, t.state, t.started_at, t.preemption_requested) for t in g.tasks]}
                      for g in sorted(rt.gangs.values(), key=lambda g: g.id)},
            "queues": {p: {n: [g.id for g in q] for n, q in qs.items()} for p, qs in sorted(rt.queues.items())},
            "ledgers": {p: {"allocation": _clean(lg.allocation), "non_preemptible": _clean(lg.non_preemptible),
                            "controller": _clean(lg.controller), "slack": _clean(lg.slack),
                            "demand": _clean(lg.demand), "slack_demand": _clean(lg.slack_demand)}
                        for p, lg in sorted(rt.ledgers.items())},
            "running": {p: dict(sorted(j.items())) for p, j in sorted(rt.running.items()) if j},
            "jobs": {p: dict(sorted(j.items())) for p, j in sorted(rt.jobs.items()) if j},
            "entitlements": {p: as_model(e).model_dump() for p, e in sorted(rt.entitlements.items())},
            "fresh": rt.fresh,
        }
    config = {name: {"pools": sorted(t.pools), "unfinished": {g: r.pool for g, r in sorted(t.unfinished.items())}}
              for name, t in sorted(state.config.trees.items())}
    return {"now": state.now, "trees": trees, "config": config}


def without_slot_waits(state: AdmissionState) -> dict[str, Any]:
    """`snapshot` without the gangs' `slot_wait` (a reader's copy of the fold marks none)."""
    found = snapshot(state)
    for rt in found["trees"].values():
        for row in rt["gangs"].values():
            row.pop("slot_wait")
    return found


def _clean(vector: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 9) for k, v in sorted(vector.items()) if abs(v) > 1e-9}
