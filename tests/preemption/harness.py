"""Given events, when a tick, then decisions: the log in a list, folded by admission and by
preemption as the two services fold it.

`System.append(event)` gives the event the next sequence and the current time, then folds it
into an `AdmissionState` (the admission service: its announcements, and at a tick its cycle,
`decide_tree`) and into a `PreemptionState` (the preemption service: after an admission
`CycleCompleted`, its pass). Whatever either decides is appended after it, in order, and folded
in turn, as the log would: a tick lands its whole chain (entitlements, admissions, the cycle's
close, the pass's preemptions and starvation changes, the pass's close).

`on_pass(system, tree, result)` is called when a pass has decided, before its decisions land:
the state is then exactly the state the pass saw.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from events import (
    ClockTicked,
    CycleCompleted,
    Event,
    GangCancelled,
    GangEnqueued,
    HostRegistered,
    PoolConfig,
    PoolConfigChanged,
    PoolStarvationChanged,
    PreemptionRequested,
    TaskSpec,
    TaskStateChanged,
    TreeConfigured,
    TreeOptions,
)
from events.config import GangTimeoutOptions, PreemptionOptions
from services.admission.domain.decide import decide_tree
from services.admission.domain.model import TERMINAL, Gang, Ledger, Task
from services.admission.domain.runtime import TreeRuntime
from services.admission.domain.state import AdmissionState
from services.preemption.domain.model import PassResult
from services.preemption.domain.state import PreemptionState

TREE = "default"
LONG_TIMEOUTS = GangTimeoutOptions(default=1000, limit=1000, jitter=0)  # no timeouts within a test

# --- inputs ------------------------------------------------------------------------------------


def tree(*, resources: Sequence[str] = ("cpu",), enabled: bool = True, grace: float = 0.0, **options: Any
         ) -> TreeConfigured:
    return TreeConfigured(tree=TREE, options=TreeOptions(
        resources=list(resources), preemption=PreemptionOptions(enabled=enabled, grace=grace),
        gang_timeout=LONG_TIMEOUTS, **options))


def host(name: str = "cluster", revocable: dict[str, float] | None = None, **resources: float) -> HostRegistered:
    return HostRegistered(host=name, resources=resources, revocable=revocable or {})


def host_of(resources: dict[str, float], revocable: dict[str, float] | None = None) -> HostRegistered:
    return HostRegistered(host="cluster", resources=resources, revocable=revocable or {})


def pool(path: str, **config: Any) -> PoolConfigChanged:
    return PoolConfigChanged(tree=TREE, path=path, config=PoolConfig(**config), created=True)


def gang(gang_id: str, to: str, *, tasks: int = 1, cpu: float = 1.0, resources: dict[str, float] | None = None,
         job: str | None = None, **flags: Any) -> GangEnqueued:
    """`tasks` members `<gang>/0`... each needing `resources` (default: `cpu` only)."""
    need = {"cpu": cpu} if resources is None else resources
    return GangEnqueued(tree=TREE, gang=gang_id, pool=to, job=job or gang_id, size=tasks,
                        tasks=[TaskSpec(id=f"{gang_id}/{i}", resources=need) for i in range(tasks)], **flags)


def gangs(prefix: str, count: int, to: str, **kwargs: Any) -> list[GangEnqueued]:
    return [gang(f"{prefix}{i}", to, **kwargs) for i in range(count)]


def task(task_id: str, state: str) -> TaskStateChanged:
    return TaskStateChanged(tree=TREE, gang=task_id.rsplit("/", 1)[0], task=task_id, state=state)  # type: ignore[arg-type]


def cancel(gang_id: str) -> GangCancelled:
    return GangCancelled(tree=TREE, gang=gang_id)


# --- the log -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Entry:
    seq: int
    time: float
    event: Event


PassHook = Callable[["System", str, PassResult], None]


@dataclass(slots=True)
class System:
    admission: AdmissionState = field(default_factory=AdmissionState)
    preemption: PreemptionState = field(default_factory=PreemptionState)
    entries: list[Entry] = field(default_factory=list)
    time: float = 0.0
    on_pass: PassHook | None = None

    def append(self, event: Event, at: float | None = None) -> list[Event]:
        """Append one event and everything it leads to; returns what the services decided."""
        if at is not None:
            self.time = max(self.time, at)
        pending: deque[Event] = deque([event])
        decided: list[Event] = []
        while pending:
            current = pending.popleft()
            seq = len(self.entries) + 1
            self.entries.append(Entry(seq, self.time, current))
            follow = [o.event for o in self.admission.apply(current, seq, self.time)]
            for name in self.admission.take_due():
                follow += [o.event for o in decide_tree(self.admission, name, seq)]
            passed = [o.event for o in self.preemption.apply(current, seq, self.time)]
            if passed and self.on_pass is not None:
                assert isinstance(passed[-1], CycleCompleted)
                self.on_pass(self, passed[-1].tree, self.preemption.last_pass[passed[-1].tree])
            follow += passed
            pending.extend(follow)
            decided += follow
        return decided

    def feed(self, *events: Event | Iterable[Event], at: float | None = None) -> list[Event]:
        out: list[Event] = []
        for item in events:
            for event in ([item] if isinstance(item, Event) else item):
                out += self.append(event, at)
        return out

    def tick(self, at: float | None = None) -> list[Event]:
        """A clock tick: one admission cycle, then one preemption pass, all landed."""
        return self.append(ClockTicked(), at)

    def ack(self, at: float | None = None) -> list[Event]:
        """Every task with a preemption request outstanding reports `preempted`."""
        return self.feed([task(t.id, "preempted") for t in self.requested()], at=at)

    def set_state(self, state: str, *gang_ids: str, at: float | None = None) -> list[Event]:
        """Every live task of the gangs reports `state`."""
        return self.feed([task(t.id, state) for g in gang_ids for t in self.gang(g).tasks
                          if t.state not in TERMINAL and t.state != "pending"], at=at)

    # --- reading the state ---

    @property
    def rt(self) -> TreeRuntime:
        return self.preemption.admission.runtime(TREE)

    def gang(self, gang_id: str) -> Gang:
        return self.rt.gangs[gang_id]

    def ledger(self, path: str) -> Ledger:
        return self.rt.ledgers.get(path) or Ledger()

    def requested(self) -> list[Task]:
        return sorted((t for t in self.rt.tasks.values() if t.preemption_requested and t.state not in TERMINAL),
                      key=lambda t: t.id)

    def state_of(self, *gang_ids: str) -> dict[str, str]:
        return {g: self.gang(g).state for g in gang_ids}


# --- reading decisions -------------------------------------------------------------------------


def preempted(events: Iterable[Event]) -> list[str]:
    """The gangs asked to give back, in order."""
    return [e.gang for e in events if isinstance(e, PreemptionRequested)]


def requests(events: Iterable[Event]) -> list[PreemptionRequested]:
    return [e for e in events if isinstance(e, PreemptionRequested)]


def starvation(events: Iterable[Event]) -> list[PoolStarvationChanged]:
    return [e for e in events if isinstance(e, PoolStarvationChanged)]


def admitted(events: Iterable[Event]) -> list[str]:
    from events import GangAdmitted

    return [e.gang for e in events if isinstance(e, GangAdmitted)]
