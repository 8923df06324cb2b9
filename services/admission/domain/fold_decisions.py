"""The fold of admission's own decisions, applied at their cycle's trigger (as admission makes
them, `decide.run_cycles`; or as a reader places them, `cycle_order.CycleOrder`): a gang admitted
(`GangAdmitted`), moved to another queue (`GangMovedToQueue`), the entitlements
(`EntitlementsComputed`) and the cycle's end (`CycleCompleted`). Read back from the log, they
change nothing: each is checked against the state it was decided on."""

from __future__ import annotations

import heapq
from typing import cast

from events import CycleCompleted, EntitlementsComputed, Event, GangAdmitted, GangMovedToQueue
from events.entitlement_map import fold_entitlements
from services.admission.domain.fold_data import FoldData
from services.admission.domain.job_counts import ledger_of, started_running
from services.admission.domain.model import ADMITTED, PENDING
from services.admission.domain.outcomes import SERVICE, Outcome
from services.admission.domain.queue_book import queues_of
from services.admission.domain.slot_waiters import mark_slot_waiters
from services.admission.domain.vectors import Vector


def on_admitted(state: FoldData, event: Event, seq: int, out: list[Outcome]) -> None:
    event = cast(GangAdmitted, event)  # the model or its view (events.views)
    rt = state.trees.get(event.tree) or state.runtime(event.tree)
    gang = rt.gangs.get(event.gang)
    attempt = event.attempt  # (read once: of a cycle's own model, a pydantic attribute read is slow)
    if gang is None or gang.state != PENDING or attempt != gang.attempt + 1:
        return  # decided on a state that moved on (e.g. cancelled in between): no effect
    pool = gang.pool
    ledger = rt.ledgers.get(pool) or ledger_of(rt, pool)
    if gang.queue is not None:  # `queue_book.dequeue`, with the pool's ledger at hand
        (rt.queues.get(pool) or queues_of(state, rt, pool))[gang.queue].remove(gang)
        ledger.want(gang, -1.0)
    now = state.now
    gang.state, gang.queue, gang.attempt, gang.admitted_at, gang.head_rank, gang.slot_wait = (
        ADMITTED, None, attempt, now, 0, None)
    resources: list[Vector] = []
    for task in gang.tasks:
        task.state = "ready"
        resources.append(task.resources)
    ledger.hold_all(gang, resources, 1.0)
    started_running(rt, gang)
    # (`timers.add_timer`, inline: once per admission)
    heapq.heappush(state.timers, (now + gang.timeout, gang.id, gang.tree, "placement", attempt))


def on_moved(state: FoldData, event: Event, seq: int, out: list[Outcome]) -> None:
    event = cast(GangMovedToQueue, event)  # the model or its view (events.views)
    rt = state.runtime(event.tree)
    gang = rt.gangs.get(event.gang)
    if gang is None or gang.state != PENDING or gang.queue == event.queue:
        return
    queues = queues_of(state, rt, gang.pool)
    assert gang.queue is not None
    queues[gang.queue].remove(gang)
    gang.queue = event.queue
    queues[event.queue].push(gang)


def on_entitlements(state: FoldData, event: Event, seq: int, out: list[Outcome]) -> None:
    event = cast(EntitlementsComputed, event)  # the model or its view (events.views); v1 read as v2
    rt = state.runtime(event.tree)
    # the whole map (`replace`), or the pools that changed and the paths removed: in place
    rt.entitlements = fold_entitlements(rt.entitlements, event)
    rt.entitlement_seq = seq


def on_cycle(state: FoldData, event: Event, seq: int, out: list[Outcome]) -> None:
    """An admission cycle is complete (applied at its trigger, after its decisions)."""
    assert isinstance(event, CycleCompleted)
    if event.service == SERVICE:
        rt = state.runtime(event.tree)
        rt.dirty, rt.fresh = False, 0
        mark_slot_waiters(state.config, rt)
