"""The fold of gang inputs: a gang's members (`GangEnqueued`, the first ones make the gang, more
may follow until it is complete: then it is pending) and its cancellation (`GangCancelled`)."""

from __future__ import annotations

from typing import cast

from events import Event, GangCancelled, GangEnqueued
from services.admission.domain import rules
from services.admission.domain.facts import gang_timeouts
from services.admission.domain.fold_data import FoldData
from services.admission.domain.job_counts import count_job
from services.admission.domain.model import ADMITTED, CANCELLED, FINISHED, REJECTED, TERMINAL, Gang, Task
from services.admission.domain.outcomes import Outcome, finished_outcome, rejected_outcome
from services.admission.domain.queue_book import dequeue, enqueue
from services.admission.domain.retention import forgotten_reason, is_forgotten, retire
from services.admission.domain.runtime import TreeRuntime
from services.admission.domain.stopping import forget_job, release
from services.admission.domain.timers import add_timer
from services.admission.domain.timing import resolved_timeout
from services.admission.domain.vectors import Vector, add_into


def on_enqueued(state: FoldData, event: Event, seq: int, out: list[Outcome]) -> None:
    event = cast(GangEnqueued, event)  # the model or its view (events.views): the same attributes
    rt = state.trees.get(event.tree) or state.runtime(event.tree)
    gang = rt.gangs.get(event.gang)
    if gang is None:
        tree = state.config.trees.get(event.tree)
        if tree is not None and tree.last_new_gang != event.gang:  # seen before: a forgotten gang's id
            out.append(rejected_outcome(rt, event, seq, "gang_forgotten", forgotten_reason(state, rt, event.gang),
                                        event.gang))
            return
        _first_members(state, rt, event, seq, out)
    else:
        _more_members(state, rt, gang, event, seq, out)


def _first_members(state: FoldData, rt: TreeRuntime, event: GangEnqueued, seq: int, out: list[Outcome]) -> None:
    checked = rules.check_new_gang(state.config, rt, event)
    if isinstance(checked, rules.Refusal):
        # The gang id is used up: later members are refused too.
        gang = _new_gang(state, rt, event, checked.pool or event.pool)
        gang.state = REJECTED
        rt.gangs[gang.id] = gang
        out.append(rejected_outcome(rt, event, seq, checked.rule, checked.message, event.gang))
        out.append(finished_outcome(rt, gang, "rejected"))
        retire(state, rt, gang)
        return
    gang = _new_gang(state, rt, event, checked.pool, checked.need)  # its resources: what its members need
    gang.wire_bytes = checked.wire_bytes
    rt.gangs[gang.id] = rt.live[gang.id] = gang
    count_job(rt.jobs, gang, 1)
    _add_members(state, rt, gang, event, seq, counted=True)


def _new_gang(state: FoldData, rt: TreeRuntime, event: GangEnqueued, pool: str,
              resources: Vector | None = None) -> Gang:
    rt.made += 1
    timeout = resolved_timeout(event.timeout, gang_timeouts(state.config, rt.name), event.gang)
    return Gang(event.gang, rt.name, pool, event.job, event.user, event.size, event.priority, event.preemptible,
                event.revocable, event.controller, timeout, state.now, [],
                resources={} if resources is None else resources, number=rt.made)


def _more_members(state: FoldData, rt: TreeRuntime, gang: Gang, event: GangEnqueued, seq: int,
                  out: list[Outcome]) -> None:
    wire_bytes = rules.members_bytes(event.tasks)
    refusal = rules.check_more_members(state.config, rt, gang, event, wire_bytes)
    if refusal is not None:
        out.append(rejected_outcome(rt, event, seq, refusal.rule, refusal.message, event.gang))
        return
    gang.wire_bytes += wire_bytes
    _add_members(state, rt, gang, event, seq)


def _add_members(state: FoldData, rt: TreeRuntime, gang: Gang, event: GangEnqueued, seq: int, *,
                 counted: bool = False) -> None:
    """`counted`: the gang's `resources` already include these members (first members: the
    checks added them up, in the same order)."""
    members, tasks, gang_id = gang.tasks, rt.tasks, gang.id
    for spec in event.tasks:
        # The member's resources are the spec's own dict (an immutable event's: nobody changes it).
        task = Task(spec.id, gang_id, spec.resources, "pending", None, False, spec)
        members.append(task)
        tasks[spec.id] = task
    if not counted:
        resources = gang.resources
        for spec in event.tasks:
            add_into(resources, spec.resources)
    rt.dirty = True
    if len(members) >= gang.size:
        gang.arrival = seq
        enqueue(state, rt, gang)
    elif len(members) == len(event.tasks):  # first members: start the waiting timer
        add_timer(state, gang.waiting_deadline, gang, "waiting")


def on_cancelled(state: FoldData, event: Event, seq: int, out: list[Outcome]) -> None:
    assert isinstance(event, GangCancelled)
    rt = state.runtime(event.tree)
    gang = rt.gangs.get(event.gang)
    if gang is None and is_forgotten(state, rt, event.gang):
        out.append(rejected_outcome(rt, event, seq, "gang_forgotten", forgotten_reason(state, rt, event.gang),
                                    event.gang))
        return
    if gang is None or gang.state in FINISHED:
        what = "no such gang" if gang is None else f"gang {event.gang} is already {gang.state}"
        out.append(rejected_outcome(rt, event, seq, "cancel_finished" if gang else "unknown_gang",
                                    f"cannot cancel: {what}", event.gang))
        return
    rt.dirty = True
    if gang.state == ADMITTED:
        release(rt, gang)
        for task in gang.tasks:
            if task.state not in TERMINAL:
                task.state = "killed"
    else:
        dequeue(state, rt, gang)
    gang.state = CANCELLED
    forget_job(rt, gang)
    out.append(finished_outcome(rt, gang, "cancelled"))
    retire(state, rt, gang)
