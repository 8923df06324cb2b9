"""A log in a list, folded as the admission service folds it, with the explain history kept.

Every event gets the next sequence and a time; what the fold announces (timeouts, refusals,
finished gangs) is appended right after the event that caused it; a tick runs the tree's cycle
(`decide_tree`) and its decisions are appended and read back, as the log would have them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from events import (
    ClockTicked,
    Event,
    GangCancelled,
    GangEnqueued,
    HostRegistered,
    PoolConfig,
    PoolConfigChanged,
    TaskSpec,
    TaskStateChanged,
    TreeConfigured,
    TreeOptions,
)
from events.config import GangTimeoutOptions, PreemptionOptions
from services.admission.domain.decide import decide_tree
from services.admission.domain.explain import explain
from services.admission.domain.explain_history import History
from services.admission.domain.explanation import Explanation
from services.admission.domain.state import AdmissionState

TREE = "default"
START = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC


@dataclass(slots=True)
class World:
    state: AdmissionState = field(default_factory=AdmissionState)
    history: History = field(default_factory=History)
    seq: int = 0
    time: float = START

    def add(self, event: Event, at: float | None = None) -> None:
        if at is not None:
            self.time = max(self.time, START + at)
        self.seq += 1
        self.history.observe(event, self.time)
        outcomes = self.state.apply(event, self.seq, self.time)
        for outcome in outcomes:
            self.add(outcome.event)

    def feed(self, *events: Event, at: float | None = None) -> World:
        for event in events:
            self.add(event, at)
        return self

    def tick(self, at: float | None = None) -> World:
        self.add(ClockTicked(), at)
        tick_seq = self.seq
        for tree in self.state.take_due():
            for outcome in decide_tree(self.state, tree, tick_seq):
                self.add(outcome.event)
        return self

    def explain(self, gang_id: str, tree: str = TREE) -> Explanation:
        return explain(self.state, tree, gang_id, self.history)

    def state_of(self, gang_id: str) -> str:
        return self.state.trees[TREE].gangs[gang_id].state

    def states(self, *gang_ids: str) -> dict[str, str]:
        return {g: self.state_of(g) for g in gang_ids}


def world(*pools: PoolConfigChanged, resources: Sequence[str] = ("cpu",), capacity: dict[str, float] | None = None,
          timeout: GangTimeoutOptions | None = None, preemption: bool = True, **options: Any) -> World:
    """A tree over `resources` (no gang-timeout jitter), one host (`capacity`, default cpu 100),
    then `pools`, at START."""
    tree = TreeConfigured(tree=TREE, options=TreeOptions(
        resources=list(resources), gang_timeout=timeout or GangTimeoutOptions(default=30, limit=100, jitter=0),
        preemption=PreemptionOptions(enabled=preemption), **options))
    host = HostRegistered(host="cluster", resources=capacity or {"cpu": 100.0})
    return World().feed(tree, host, *pools, at=0)


def pool(path: str, **config: Any) -> PoolConfigChanged:
    return PoolConfigChanged(tree=TREE, path=path, config=PoolConfig(**config), created=True)


def gang(gang_id: str, to: str, *, tasks: int = 1, cpu: float = 1.0, size: int | None = None, job: str | None = None,
         first: int = 0, resources: dict[str, float] | None = None, **flags: Any) -> GangEnqueued:
    need = {"cpu": cpu} if resources is None else resources
    return GangEnqueued(tree=TREE, gang=gang_id, pool=to, job=job or gang_id, size=size or tasks,
                        tasks=[TaskSpec(id=f"{gang_id}/{first + i}", resources=need) for i in range(tasks)], **flags)


def task(task_id: str, state: str) -> TaskStateChanged:
    return TaskStateChanged(tree=TREE, gang=task_id.split("/")[0], task=task_id, state=state)


def cancel(gang_id: str, reason: str | None = None) -> GangCancelled:
    return GangCancelled(tree=TREE, gang=gang_id, reason=reason)
