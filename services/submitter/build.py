"""The events a submitter publishes, and their ids: pure, so a retry builds the same id.

- enqueue: `GangEnqueued`, id from (tree, gang, member ids): the same members of the same gang
  are the same event, however often they are sent;
- task state: `TaskStateChanged`, id from (tree, gang, task, state, attempt);
- cancel: `GangCancelled`, id from (tree, gang).

JetStream drops a message whose `Nats-Msg-Id` it has stored within the stream's duplicate
window (10 minutes as poolwise creates the stream); a later copy is stored, and admission
refuses it (a gang id and a task id are used once), so nothing changes either way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, get_args

from pydantic import ValidationError

from events import Envelope, Event, GangCancelled, GangEnqueued, TaskSpec, TaskStateChanged, derived_id, subjects
from events.inputs import TaskState

TASK_STATES: tuple[str, ...] = get_args(TaskState)


class SubmitError(ValueError):
    """A submission that is not valid as given: the message names the field and the rule."""


TaskLike = TaskSpec | Mapping[str, Any]


def member_specs(gang: str, tasks: Sequence[TaskLike] | None = None, count: int | None = None,
                 resources: Mapping[str, float] | None = None, first_member: int = 0) -> list[TaskSpec]:
    """The members to enqueue: `tasks` as given (TaskSpec, or mappings with `resources` and
    optionally `id`; a missing id is `<gang>/<n>`), or `count` members `<gang>/<first_member>`,
    `<gang>/<first_member + 1>`... each needing `resources`."""
    if tasks is not None and (count is not None or resources is not None):
        raise SubmitError("give either tasks=[...] or count and resources, not both")
    if tasks is None:
        if resources is None:
            raise SubmitError("give tasks=[...], or count and resources (e.g. count=4, resources={'cpu': 2})")
        number = 1 if count is None else count
        if number < 1:
            raise SubmitError(f"count: a gang has at least one member, got {number}")
        tasks = [{"id": f"{gang}/{first_member + i}", "resources": dict(resources)} for i in range(number)]
    if not tasks:
        raise SubmitError("tasks: a gang has at least one member")
    specs: list[TaskSpec] = []
    for index, item in enumerate(tasks):
        if isinstance(item, TaskSpec):
            specs.append(item)
            continue
        if not isinstance(item, Mapping):
            raise SubmitError(f"tasks.{index}: expected a mapping with `resources` (and `id`), got {item!r}")
        data = dict(item)
        data.setdefault("id", f"{gang}/{first_member + index}")
        try:
            specs.append(TaskSpec.model_validate(data))
        except ValidationError as exc:
            raise _error(exc, f"tasks.{index}.") from None
    seen: set[str] = set()
    for spec in specs:
        if spec.id in seen:
            raise SubmitError(f"tasks: task id {spec.id} is given twice")
        seen.add(spec.id)
    return specs


def enqueue_event(*, gang: str, pool: str, tasks: Sequence[TaskLike] | None = None, count: int | None = None,
                  resources: Mapping[str, float] | None = None, size: int | None = None, job: str | None = None,
                  user: str | None = None, priority: int = 0, preemptible: bool = True, revocable: bool = False,
                  controller: bool = False, timeout: float | None = None, tree: str = "default",
                  first_member: int = 0) -> GangEnqueued:
    """A `GangEnqueued` from the SDK's arguments (size: the members given; job: the gang id;
    user: `anonymous`), or `SubmitError` naming what is wrong."""
    check_tree(tree)
    specs = member_specs(gang, tasks, count, resources, first_member)
    body: dict[str, Any] = {
        "tree": tree, "gang": gang, "pool": pool, "job": job if job is not None else gang,
        "size": len(specs) if size is None else size, "priority": priority, "preemptible": preemptible,
        "revocable": revocable, "controller": controller, "timeout": timeout, "tasks": specs,
    }
    if user is not None:
        body["user"] = user
    try:
        event = GangEnqueued.model_validate(body)
    except ValidationError as exc:
        raise _error(exc) from None
    if len(event.tasks) > event.size:
        raise SubmitError(f"size: {len(event.tasks)} members for a gang of size {event.size}")
    return event


def task_state_event(*, task: str, gang: str, state: str, message: str | None = None,
                     tree: str = "default") -> TaskStateChanged:
    check_tree(tree)
    if state not in TASK_STATES:
        raise SubmitError(f"state: {state!r} is not a task state; one of: {', '.join(TASK_STATES)}")
    try:
        return TaskStateChanged.model_validate({"tree": tree, "gang": gang, "task": task, "state": state,
                                                "message": message})
    except ValidationError as exc:
        raise _error(exc) from None


def cancel_event(*, gang: str, reason: str | None = None, tree: str = "default") -> GangCancelled:
    check_tree(tree)
    if not gang:
        raise SubmitError("gang: a gang id is needed")
    return GangCancelled(tree=tree, gang=gang, reason=reason)


def event_id(event: Event, attempt: int | None = None) -> str:
    """The id a submitter gives an event: the same for the same submission, retried."""
    if isinstance(event, GangEnqueued):
        return derived_id("submit", "enqueue", event.tree, event.gang, *(t.id for t in event.tasks))
    if isinstance(event, TaskStateChanged):
        return derived_id("submit", "task", event.tree, event.gang, event.task, event.state,
                          "" if attempt is None else attempt)
    if isinstance(event, GangCancelled):
        return derived_id("submit", "cancel", event.tree, event.gang)
    raise SubmitError(f"a submitter publishes gang and task events, not {event.type}")


def envelope(event: Event, *, source: str = "sdk", attempt: int | None = None,
             time: datetime | None = None) -> Envelope:
    """The event in its envelope: derived id, wall-clock time (unless given), `source`."""
    return Envelope(id=event_id(event, attempt), time=time or datetime.now(UTC), source=source, event=event)


def check_tree(tree: str) -> None:
    if not subjects.TREE_NAME.match(tree):
        raise SubmitError(f"tree: {tree!r} is not a tree name (letters, digits, - and _, at most 64)")


def _error(exc: ValidationError, prefix: str = "") -> SubmitError:
    err = exc.errors(include_url=False)[0]
    loc = [str(p) for p in err["loc"]]
    where = prefix + ".".join(loc)
    where = where.rstrip(".")
    return SubmitError(f"{where}: {err['msg']}" if where else str(err["msg"]))
