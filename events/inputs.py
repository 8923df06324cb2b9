"""Input events: what operators, hosts, submitters and executors tell the system.

Pool and tree events are appended by the tree service after validation; gang and task events
come from submitters and executors and are validated by their consumers (admission).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from events.base import Event, Frozen, ResourceAmounts
from events.config import PoolConfig, TreeOptions

TaskState = Literal[
    "pending",
    "ready",
    "placing",
    "placed",
    "launching",
    "running",
    "succeeded",
    "failed",
    "killed",
    "lost",
    "preempted",
]
TERMINAL_TASK_STATES: frozenset[str] = frozenset({"succeeded", "failed", "killed", "lost", "preempted"})


class TreeConfigured(Event):
    """A pool tree was created or its options replaced."""

    type: Literal["TreeConfigured"] = "TreeConfigured"
    version: Literal[1] = 1
    tree: str
    options: TreeOptions


class PoolConfigChanged(Event):
    """A pool was created or changed; `config` is its whole explicit configuration after the change."""

    type: Literal["PoolConfigChanged"] = "PoolConfigChanged"
    version: Literal[1] = 1
    tree: str
    path: str
    config: PoolConfig
    created: bool = False


class PoolDeleted(Event):
    type: Literal["PoolDeleted"] = "PoolDeleted"
    version: Literal[1] = 1
    tree: str
    path: str


class HostRegistered(Event):
    """A host joined (or changed); trees whose node tag filter matches its tags count it."""

    type: Literal["HostRegistered"] = "HostRegistered"
    version: Literal[1] = 1
    host: str
    resources: ResourceAmounts
    revocable: ResourceAmounts = Field(default_factory=dict)
    tags: list[str] = Field(default_factory=list)


class HostRemoved(Event):
    type: Literal["HostRemoved"] = "HostRemoved"
    version: Literal[1] = 1
    host: str


class TaskSpec(Frozen):
    """One member of a gang: its id (unique in the tree) and what it needs."""

    id: str = Field(min_length=1)
    resources: ResourceAmounts


class GangEnqueued(Event):
    """Members of a gang arrived (all of them, or some: members may come in several events)."""

    type: Literal["GangEnqueued"] = "GangEnqueued"
    version: Literal[1] = 1
    tree: str = "default"
    gang: str = Field(min_length=1)
    pool: str
    job: str
    user: str = "anonymous"
    size: int = Field(ge=1)
    priority: int = 0
    preemptible: bool = True
    revocable: bool = False
    controller: bool = False
    timeout: float | None = Field(default=None, ge=0)
    tasks: list[TaskSpec] = Field(min_length=1)


class TaskStateChanged(Event):
    """An outside component (placement, executor) reports a task's new state."""

    type: Literal["TaskStateChanged"] = "TaskStateChanged"
    version: Literal[1] = 1
    tree: str = "default"
    gang: str
    task: str
    state: TaskState
    message: str | None = None


class GangCancelled(Event):
    type: Literal["GangCancelled"] = "GangCancelled"
    version: Literal[1] = 1
    tree: str = "default"
    gang: str
    reason: str | None = None


class ClockTicked(Event):
    """Time advanced to the envelope's time with nothing else happening (timers may fire)."""

    type: Literal["ClockTicked"] = "ClockTicked"
    version: Literal[1] = 1
    tree: str | None = None
