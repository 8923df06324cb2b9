"""Deadlines and the timer heap: a gang's waiting timeout (its members did not all come in time)
and placement timeout (its tasks were not all placed in time after its admission). Whenever the
clock advances, the timers due at or before the new time fire first, in deadline order (ties by
gang id), before the event that advanced it is applied."""

from __future__ import annotations

import heapq

from events import GangRequeued, GangTimedOut
from services.admission.domain.fold_data import FoldData
from services.admission.domain.model import ADMITTED, PLACED_OR_LATER, TIMED_OUT, WAITING, Gang
from services.admission.domain.outcomes import Outcome, finished_outcome
from services.admission.domain.queue_book import enqueue
from services.admission.domain.retention import retire
from services.admission.domain.runtime import TreeRuntime
from services.admission.domain.stopping import forget_job, release


def add_timer(state: FoldData, deadline: float, gang: Gang, kind: str) -> None:
    heapq.heappush(state.timers, (deadline, gang.id, gang.tree, kind, gang.attempt))


def advance(state: FoldData, time: float, seq: int, out: list[Outcome]) -> None:
    """Fire the timers due at or before `time`, in deadline order (ties by gang id)."""
    timers, trees, pop = state.timers, state.trees, heapq.heappop  # (once per timer: ~1k a clock move)
    while timers and timers[0][0] <= time:
        deadline, gang_id, tree, kind, attempt = pop(timers)
        if deadline > state.now:  # (`max(state.now, deadline)`, without the call)
            state.now = deadline
        rt = trees.get(tree)
        gang = rt.gangs.get(gang_id) if rt else None
        if rt is None or gang is None:
            continue
        if kind == "waiting" and gang.state == WAITING:
            _time_out(state, rt, gang, deadline, out)
        elif (kind == "placement" and gang.state == ADMITTED and gang.attempt == attempt
              and any(t.state not in PLACED_OR_LATER for t in gang.tasks)):
            placed = sum(t.state in PLACED_OR_LATER for t in gang.tasks)
            _requeue(state, rt, gang, head=True)
            out.append(Outcome(GangRequeued(
                tree=rt.name, gang=gang.id, pool=gang.pool, cause="placement_timeout",
                reason=(f"{len(gang.tasks) - placed} of {len(gang.tasks)} tasks not placed within "
                        f"{gang.timeout:g} s of admission")), f"requeued:{gang.id}:{attempt}"))
    state.now = time


def _time_out(state: FoldData, rt: TreeRuntime, gang: Gang, deadline: float, out: list[Outcome]) -> None:
    gang.state = TIMED_OUT
    forget_job(rt, gang)
    out.append(Outcome(GangTimedOut(tree=rt.name, gang=gang.id, pool=gang.pool, members=len(gang.tasks),
                                    size=gang.size, deadline=deadline), f"timed_out:{gang.id}"))
    out.append(finished_outcome(rt, gang, "timed_out"))
    retire(state, rt, gang)


def _requeue(state: FoldData, rt: TreeRuntime, gang: Gang, *, head: bool) -> None:
    """An admitted gang goes back to pending whole: every task pending, its allocation released."""
    release(rt, gang)
    for task in gang.tasks:
        task.state, task.started_at, task.preemption_requested = "pending", None, False
    gang.admitted_at = None
    if head:
        rt.requeues += 1
        gang.head_rank = rt.requeues
    else:
        gang.head_rank = 0
    gang.slot_wait = None
    enqueue(state, rt, gang)
