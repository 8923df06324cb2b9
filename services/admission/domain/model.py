"""The values admission folds events into: tasks, gangs, and the per-pool ledger."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, fields

from events import TaskSpec
from services.admission.domain.vectors import Vector, add_all_into, add_into

# Queues of a leaf pool, in the order an admission cycle visits them (DOMAIN §4).
CYCLE_ORDER: tuple[str, ...] = ("non_preemptible", "controller", "revocable", "pending")

# Task states, in lifecycle order (DOMAIN §5); terminal ones end the task.
LIFECYCLE: tuple[str, ...] = ("pending", "ready", "placing", "placed", "launching", "running")
RANK: dict[str, int] = {state: i for i, state in enumerate(LIFECYCLE)}
TERMINAL: frozenset[str] = frozenset({"succeeded", "failed", "killed", "lost", "preempted"})
PLACED_OR_LATER: frozenset[str] = frozenset({"placed", "launching", "running"}) | TERMINAL

# Gang states reported by the scenario runner and `poolwise gangs`.
WAITING, PENDING, ADMITTED, DONE = "waiting", "pending", "admitted", "done"
TIMED_OUT, CANCELLED, REJECTED = "timed_out", "cancelled", "rejected"
GANG_STATES: tuple[str, ...] = (WAITING, PENDING, ADMITTED, DONE, TIMED_OUT, CANCELLED, REJECTED)
UNKNOWN = "unknown"  # the state `explain` gives a gang id it does not know
FINISHED: frozenset[str] = frozenset({DONE, TIMED_OUT, CANCELLED, REJECTED})


@dataclass(slots=True)
class Task:
    id: str
    gang: str
    resources: Vector
    state: str = "pending"
    started_at: float | None = None  # when it became `running` (for "most recently started")
    preemption_requested: bool = False
    spec: TaskSpec | None = None  # the member as enqueued (id and resources): what `GangAdmitted` lists

    def __reduce__(self) -> tuple[type[Task], tuple[object, ...]]:
        # pickled (a snapshot) as its fields in a tuple: half the time of a slots class's default
        return (Task, (self.id, self.gang, self.resources, self.state, self.started_at, self.preemption_requested,
                       self.spec))


@dataclass(slots=True)
class Gang:
    """A gang of one job in one leaf pool. `arrival` is the log position of the event that
    completed it; `requeues` orders gangs requeued at the head of pending (most recent first)."""

    id: str
    tree: str
    pool: str
    job: str
    user: str
    size: int
    priority: int
    preemptible: bool
    revocable: bool
    controller: bool
    timeout: float  # resolved: own or tree default, capped at the tree limit, plus jitter
    created_at: float
    tasks: list[Task] = field(default_factory=list)
    state: str = WAITING
    queue: str | None = None
    arrival: int = 0
    head_rank: int = 0  # > 0: requeued at the head of pending; larger = more recent
    attempt: int = 0
    admitted_at: float | None = None
    resources: Vector = field(default_factory=dict)
    slot_wait: str | None = None  # pool whose running-job limit holds this gang back
    number: int = 0  # its place among the tree's gangs, in the order they came (1, 2, ...)
    wire_bytes: int = 0  # at most what its members take in a `GangAdmitted` (`rules.members_bytes`)

    def __reduce__(self) -> tuple[type[Gang], tuple[object, ...]]:
        # pickled (a snapshot) as its fields in a tuple, in `__init__`'s order (see `Task`)
        return (Gang, tuple([getattr(self, name) for name in _GANG_FIELDS]))

    @property
    def waiting_deadline(self) -> float:
        return self.created_at + self.timeout

    @property
    def placement_deadline(self) -> float | None:
        return None if self.admitted_at is None else self.admitted_at + self.timeout

    @property
    def unfinished(self) -> bool:
        return self.state not in FINISHED


_GANG_FIELDS = tuple(f.name for f in fields(Gang))


@dataclass(slots=True)
class Ledger:
    """What one leaf pool holds and wants, per kind (DOMAIN §7 allocation buckets)."""

    allocation: Vector = field(default_factory=dict)  # every admitted, unfinished task
    non_preemptible: Vector = field(default_factory=dict)
    controller: Vector = field(default_factory=dict)
    slack: Vector = field(default_factory=dict)  # revocable tasks
    demand: Vector = field(default_factory=dict)  # non-revocable gangs in the queues
    slack_demand: Vector = field(default_factory=dict)  # revocable gangs in the queues
    # Bumped by every change made through the methods below (the only way the fold changes a
    # ledger): a reader that remembers it knows whether the ledger changed since it last looked
    # (the entitlement engine takes fresh numbers only from leaves whose ledger changed).
    changes: int = field(default=0, compare=False, repr=False)

    @property
    def non_slack(self) -> Vector:
        return {k: v - self.slack.get(k, 0.0) for k, v in self.allocation.items()}

    def hold(self, gang: Gang, resources: Vector, sign: float) -> None:
        """Add (sign 1) or release (sign -1) what `resources` of `gang` hold."""
        self.changes += 1
        allocation = self.allocation  # (`add_into(self.allocation, resources, sign)`, inline: per task report)
        get = allocation.get
        for kind, amount in resources.items():
            value = get(kind, 0.0) + sign * amount
            allocation[kind] = 0.0 if -1e-9 < value < 1e-9 else value
        if not gang.preemptible:
            add_into(self.non_preemptible, resources, sign)
        if gang.controller:
            add_into(self.controller, resources, sign)
        if gang.revocable:
            add_into(self.slack, resources, sign)

    def hold_all(self, gang: Gang, vectors: Iterable[Vector], sign: float) -> None:
        """`hold` of each of `vectors` in turn (the same numbers, in one call)."""
        self.changes += 1
        buckets = [self.allocation]
        if not gang.preemptible:
            buckets.append(self.non_preemptible)
        if gang.controller:
            buckets.append(self.controller)
        if gang.revocable:
            buckets.append(self.slack)
        add_all_into(buckets, vectors, sign)

    def want(self, gang: Gang, sign: float) -> None:
        """Count the gang's resources in (sign 1) or out of (sign -1) the demand: `add_into`, inline
        (twice per gang, in every service's fold)."""
        self.changes += 1
        acc = self.slack_demand if gang.revocable else self.demand
        get = acc.get
        for kind, amount in gang.resources.items():
            value = get(kind, 0.0) + sign * amount
            acc[kind] = 0.0 if -1e-9 < value < 1e-9 else value
