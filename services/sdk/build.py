"""The events a submitter publishes, and their ids: pure, so a retry builds the same id.

An event's id covers its content: what identifies it and a digest of its body's canonical
encoding (`content_digest`: every field, keys sorted):

- enqueue: `GangEnqueued`, id from (tree, gang, content): the same members of the same gang with
  the same resources and options are the same event, however often they are sent; the same gang
  and member ids with other content are another event, which admission refuses
  (`member_conflict`), never a duplicate of the first;
- task state: `TaskStateChanged`, id from (tree, gang, task, state, attempt, content);
- cancel: `GangCancelled`, id from (tree, gang, content: with its reason).

JetStream drops a message whose `Nats-Msg-Id` it has stored within the stream's duplicate
window (10 minutes as poolwise creates the stream: the receipt says `duplicate=True`); a later
copy is stored, and admission refuses it (a gang id and a task id are used once:
`duplicate_task`, the same content again), so nothing changes either way.

A message holds at most the server's `max_payload` bytes (1 MiB by default): `check_size`
refuses a larger one before it is sent (`message_too_large`).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, get_args

from pydantic import ValidationError

from events import (
    Envelope,
    Event,
    GangCancelled,
    GangEnqueued,
    TaskSpec,
    TaskStateChanged,
    derived_id,
    encode,
    subjects,
)
from events.inputs import TaskState

TASK_STATES: tuple[str, ...] = get_args(TaskState)


class SubmitError(ValueError):
    """A submission that is not valid as given: the message names the field and the rule (also
    as `field` and `rule`, where the rule has a name)."""

    def __init__(self, message: str, *, field: str | None = None, rule: str | None = None) -> None:
        super().__init__(message)
        self.field = field
        self.rule = rule


MAX_PAYLOAD = 1024 * 1024  # bytes of one NATS message, nats-server's default (the in-memory log's limit)
HEADER_ROOM = 256  # bytes of a message besides its data that count against the limit (its headers)


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


def content_digest(event: Event) -> str:
    """A digest of the event's canonical encoding (its body, every field, keys sorted, compact):
    the same for the same content, built anywhere."""
    body = json.dumps(event.model_dump(mode="json"), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(body.encode()).hexdigest()[:32]


def event_id(event: Event, attempt: int | None = None) -> str:
    """The id a submitter gives an event: what identifies it and a digest of its content, so the
    same submission, retried, has the same id, and other content under the same ids has another."""
    if isinstance(event, GangEnqueued):
        return derived_id("submit", "enqueue", event.tree, event.gang, content_digest(event))
    if isinstance(event, TaskStateChanged):
        return derived_id("submit", "task", event.tree, event.gang, event.task, event.state,
                          "" if attempt is None else attempt, content_digest(event))
    if isinstance(event, GangCancelled):
        return derived_id("submit", "cancel", event.tree, event.gang, content_digest(event))
    raise SubmitError(f"a submitter publishes gang and task events, not {event.type}")


def size_bound(envelope: Envelope) -> int:
    """An upper bound of the envelope's encoded bytes, without encoding it: a character of a
    string takes at most 6 bytes (a `\\uXXXX` escape), a number at most 32, the rest of the
    envelope and event (names, punctuation, time, flags) fits in 1 KiB."""
    event = envelope.event
    strings = [envelope.id, envelope.source, *(v for v in vars(event).values() if isinstance(v, str))]
    total = 1024 + 6 * sum(len(text) for text in strings)
    if isinstance(event, GangEnqueued):
        for spec in event.tasks:
            total += 32 + 6 * len(spec.id) + sum(6 * len(kind) + 40 for kind in spec.resources)
    return total


def check_size(envelope: Envelope, limit: int = MAX_PAYLOAD) -> None:
    """`SubmitError` (`message_too_large`) if the envelope, encoded, is more than a message of at
    most `limit` bytes holds (the server's `max_payload`, less `HEADER_ROOM` for headers)."""
    room = limit - HEADER_ROOM
    if size_bound(envelope) <= room:
        return
    size = len(encode(envelope))
    if size <= room:
        return
    event = envelope.event
    if isinstance(event, GangEnqueued):
        members = len(event.tasks)
        parts = max(2, math.ceil(size / (room * 0.9)))
        each = math.ceil(members / parts)
        raise SubmitError(
            f"tasks: gang {event.gang}: its {members} members take {size} bytes in one message, above the "
            f"{limit} bytes the NATS server takes in one (max_payload) [message_too_large]; send them in several "
            f"enqueues with the same gang id and size={event.size} (about {each} members each, their own ids: "
            f"e.g. first_member=0, {each}, ...); admission still takes at most the tree's max_tasks_per_gang "
            f"members, and members that fit in one admission message (gang_too_large)",
            field="tasks", rule="message_too_large")
    field = "message" if isinstance(event, TaskStateChanged) else "reason"
    raise SubmitError(f"{field}: the {event.type} takes {size} bytes in one message, above the {limit} bytes the "
                      f"NATS server takes in one (max_payload) [message_too_large]; make it shorter",
                      field=field, rule="message_too_large")


def envelope(event: Event, *, source: str = "sdk", attempt: int | None = None,
             time: datetime | None = None, trace: dict[str, str] | None = None) -> Envelope:
    """The event in its envelope: derived id (never from `trace`), wall-clock time (unless given),
    `source`, and the W3C trace context to carry (`services.common.tracing`), if any."""
    return Envelope(id=event_id(event, attempt), time=time or datetime.now(UTC), source=source, trace=trace,
                    event=event)


def check_tree(tree: str) -> None:
    if not subjects.TREE_NAME.match(tree):
        raise SubmitError(f"tree: {tree!r} is not a tree name (letters, digits, - and _, at most 64)")


def _error(exc: ValidationError, prefix: str = "") -> SubmitError:
    err = exc.errors(include_url=False)[0]
    loc = [str(p) for p in err["loc"]]
    where = prefix + ".".join(loc)
    where = where.rstrip(".")
    return SubmitError(f"{where}: {err['msg']}" if where else str(err["msg"]))
