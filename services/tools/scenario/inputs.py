"""Expanding a scenario into inputs for the system: the setup, then each step's `do`.

What comes out is, per action (an `enqueue` with `count` gives several):
- `EnqueueInput`: a gang's members, as the raw `GangEnqueued` body (it may carry an unknown kind
  or a negative amount: the runner publishes it as it is, and the system refuses it);
- `GangCancelled`, `TaskStateChanged` (a task named by id): ready-made events;
- `TaskSelector` (tasks of a gang or a pool) and `AckPreemptions`: resolved by the runner
  against the state before the input, into `TaskStateChanged` events;
- `PoolUpsert`, `PoolDelete`, `HostAdd`, `HostRemove`, `TreeConfigure`: commands for the tree
  service (events.commands).

The expander remembers, across steps, each gang's tree, the next member number and the size
of its first enqueue, so expand the steps in order, once (or use `expand_scenario`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from events import GangCancelled, GangEnqueued, TaskState, TaskStateChanged, at_seconds, derived_id
from events.commands import HostAdd, HostRemove, PoolDelete, PoolUpsert, TreeConfigure
from services.tools.scenario.format import Action, Enqueue, Expectations, HostEntry, PoolRef, Scenario, Step

SOURCE = "scenario"


@dataclass(frozen=True)
class EnqueueInput:
    """Members of one gang arriving: `payload` is the body of a GangEnqueued event, unvalidated."""

    tree: str
    gang: str
    payload: dict[str, Any]

    def event(self) -> GangEnqueued:
        """The payload as an event; raises pydantic.ValidationError when it is not a valid one
        (e.g. a negative amount), which the system reports as a rejected input."""
        return GangEnqueued.model_validate(self.payload)

    def envelope_json(self, event_id: str, time: datetime, source: str = SOURCE) -> bytes:
        """The envelope to publish, as JSON bytes, whether or not the payload is valid."""
        body = {"id": event_id, "time": time.isoformat(), "source": source, "event": self.payload}
        return json.dumps(body, allow_nan=False).encode()


class TaskView(Protocol):
    """What a selector needs to know of a task in the runner's state."""

    @property
    def tree(self) -> str: ...
    @property
    def gang(self) -> str: ...
    @property
    def task(self) -> str: ...
    @property
    def pool(self) -> str: ...
    @property
    def state(self) -> str: ...


@dataclass(frozen=True)
class TaskSelector:
    """`task: {gang: ..., state: ...}` or `task: {pool: ..., state: ...}`.

    A gang selector reports the state for every task of the gang; a pool selector only for the
    tasks of the pool that can make that transition (`can_move(current, new)`, the task state
    machine of the system)."""

    state: TaskState
    gang: str | None = None
    pool: str | None = None
    tree: str | None = None  # None: whatever tree (gang), the scenario's default tree (pool)

    def matches(self, task: TaskView) -> bool:
        if self.tree is not None and task.tree != self.tree:
            return False
        if self.gang is not None:
            return task.gang == self.gang
        return task.pool == self.pool

    def resolve(
        self, tasks: Iterable[TaskView], can_move: Callable[[str, str], bool] | None = None
    ) -> list[TaskStateChanged]:
        """The events for the matching tasks, in the order given."""
        out: list[TaskStateChanged] = []
        for task in tasks:
            if not self.matches(task):
                continue
            if self.pool is not None and can_move is not None and not can_move(task.state, self.state):
                continue
            out.append(TaskStateChanged(tree=task.tree, gang=task.gang, task=task.task, state=self.state))
        return out


@dataclass(frozen=True)
class AckPreemptions:
    """`ack_preemptions: {}`: every task with an outstanding preemption request reports `preempted`."""

    def resolve(self, requested: Iterable[TaskView]) -> list[TaskStateChanged]:
        """`requested`: the tasks with a preemption request outstanding, in the order to report them."""
        return [TaskStateChanged(tree=t.tree, gang=t.gang, task=t.task, state="preempted") for t in requested]


Command = PoolUpsert | PoolDelete | HostAdd | HostRemove | TreeConfigure
Input = EnqueueInput | GangCancelled | TaskStateChanged | TaskSelector | AckPreemptions | Command


@dataclass(frozen=True)
class StepInput:
    """One input: where it comes from in the file, a deterministic id, and what it is."""

    place: str
    id: str
    body: Input


@dataclass(frozen=True)
class StepPlan:
    """A step ready to run: at `time` (= at_seconds(at)), apply `inputs` in order, then check `expect`."""

    index: int
    at: float
    time: datetime
    inputs: list[StepInput]
    expect: Expectations


@dataclass
class _Gang:
    tree: str
    next_member: int = 0
    size: int | None = None


@dataclass
class Expander:
    """Turns a scenario's setup and steps into inputs; `run` makes input ids unique per run."""

    scenario: Scenario
    run: str = ""
    _gangs: dict[tuple[str, str], _Gang] = field(default_factory=dict)
    _task_gang: dict[str, dict[str, str]] = field(default_factory=dict)  # task id -> {tree: gang}

    def _id(self, place: str, n: int = 0) -> str:
        return derived_id(SOURCE, self.run, self.scenario.name, place, n)

    def setup(self) -> list[StepInput]:
        """Trees, then hosts, then pools in file order (parents first), all at time 0."""
        s = self.scenario
        out: list[StepInput] = []
        for i, (name, options) in enumerate(s.tree_options().items()):
            place = f"trees[{i}]" if s.trees else "trees"
            out.append(StepInput(place, self._id(place), TreeConfigure(tree=name, options=options)))
        for i, host in enumerate(s.host_entries()):
            place = f"hosts[{i}]" if s.hosts is not None else "capacity"
            out.append(StepInput(place, self._id(place), _host_add(host)))
        for i, pool in enumerate(s.pools):
            place = f"pools[{i}]"
            upsert = PoolUpsert(tree=pool.tree or s.default_tree, path=pool.path, config=pool.config())
            out.append(StepInput(place, self._id(place), upsert))
        return out

    def expand(self, index: int, step: Step) -> StepPlan:
        """The inputs of step `index` (call for each step, in order)."""
        inputs: list[StepInput] = []
        for j, action in enumerate(step.do):
            place = f"steps[{index}].do[{j}]"
            inputs.extend(StepInput(place, self._id(place, n), body)
                          for n, body in enumerate(self._action(action)))
        return StepPlan(index, step.at, at_seconds(step.at), inputs, step.expect)

    def plans(self) -> Iterator[StepPlan]:
        for i, step in enumerate(self.scenario.steps):
            yield self.expand(i, step)

    # --- actions -----------------------------------------------------------------------------

    def _action(self, action: Action) -> list[Input]:
        kind = action.kind
        s = self.scenario
        if action.enqueue is not None:
            return self._enqueue(action.enqueue)
        if action.task is not None:
            t = action.task
            if t.id is not None:
                tree, gang = self._task_owner(t.id, t.tree)
                return [TaskStateChanged(tree=tree, gang=gang, task=t.id, state=t.state)]
            tree_of_pool = t.tree or (s.default_tree if t.pool is not None else None)
            return [TaskSelector(state=t.state, gang=t.gang, pool=t.pool, tree=tree_of_pool)]
        if kind == "ack_preemptions":
            return [AckPreemptions()]
        if action.cancel is not None:
            return [GangCancelled(tree=self._gang_tree(action.cancel), gang=action.cancel)]
        if action.pool is not None:
            p = action.pool
            return [PoolUpsert(tree=p.tree or s.default_tree, path=p.path, config=p.config())]
        if action.delete_pool is not None:
            ref = action.delete_pool
            if not isinstance(ref, PoolRef):
                ref = PoolRef(path=ref)
            return [PoolDelete(tree=ref.tree or s.default_tree, path=ref.path)]
        if action.host is not None:
            return [_host_add(action.host)]
        if action.remove_host is not None:
            return [HostRemove(host=action.remove_host)]
        raise AssertionError(f"unhandled action {kind}")  # pragma: no cover - the format has no other

    def _enqueue(self, e: Enqueue) -> list[Input]:
        tree = e.tree or self.scenario.default_tree
        gangs = [f"{e.gang}-{k}" for k in range(e.count)] if e.count is not None else [e.gang]
        return [self._one_gang(e, tree, gang) for gang in gangs]

    def _one_gang(self, e: Enqueue, tree: str, gang: str) -> EnqueueInput:
        memory = self._gangs.setdefault((tree, gang), _Gang(tree))
        if isinstance(e.tasks, int):
            shapes = [dict(e.resources) for _ in range(e.tasks)]
        else:
            shapes = [dict(t.resources if t.resources is not None else e.resources) for t in e.tasks]
        tasks = []
        for shape in shapes:
            task_id = f"{gang}/{memory.next_member}"
            memory.next_member += 1
            self._task_gang.setdefault(task_id, {})[tree] = gang
            tasks.append({"id": task_id, "resources": shape})
        size = e.size if e.size is not None else memory.size if memory.size is not None else len(tasks)
        if memory.size is None:
            memory.size = size
        payload: dict[str, Any] = {
            "type": "GangEnqueued", "version": 1, "tree": tree, "gang": gang, "pool": e.pool,
            "job": e.job if e.job is not None else gang, "size": size, "tasks": tasks,
        }
        optional = {"user": e.user, "priority": e.priority, "preemptible": e.preemptible,
                    "revocable": e.revocable, "controller": e.controller, "timeout": e.timeout}
        payload.update({k: v for k, v in optional.items() if v is not None})
        return EnqueueInput(tree=tree, gang=gang, payload=payload)

    def _gang_tree(self, gang: str) -> str:
        trees = [tree for (tree, name) in self._gangs if name == gang]
        return trees[0] if len(trees) == 1 else self.scenario.default_tree

    def _task_owner(self, task_id: str, tree: str | None) -> tuple[str, str]:
        owners = self._task_gang.get(task_id, {})
        candidates = [(t, g) for t, g in owners.items() if tree in (None, t)]
        if len(candidates) == 1:
            return candidates[0]
        gang = task_id.rsplit("/", 1)[0] if "/" in task_id else task_id
        return tree or self._gang_tree(gang), gang


def _host_add(host: HostEntry) -> HostAdd:
    return HostAdd(host=host.name, resources=dict(host.resources), revocable=dict(host.revocable),
                   tags=list(host.tags))


def expand_scenario(scenario: Scenario, run: str = "") -> tuple[list[StepInput], list[StepPlan]]:
    """The setup inputs and every step's plan."""
    expander = Expander(scenario, run)
    return expander.setup(), list(expander.plans())
