"""Preemption inside a pool (DOMAIN §6, pool option `preempt_lower_priority`).

For each leaf pool with the option, in path order, and each of its queues in cycle order
(non_preemptible, controller, revocable, pending):

    1. The blocked gang: the first gang in the queue's cycle order that is not held back by a job
       limit, judged as the admission cycle judges it (`cycle.judge`) on what the pool holds with
       outstanding requests (and this pass's other decisions) counted as given back. Job limits
       are judged as the next cycle will: with the running-job slots that jobs waiting longer take
       or keep first (the cycle's `take_waiting_jobs`, run on a scratch), so that no room is made
       for a gang whose job has no slot (the room would go back to the victims, and the next pass
       take them again, without end). If it fits now, its room is already on the way: it is
       counted as held and nothing is taken for it.
    2. Only a gang blocked by its pool's entitlement (or controller limit) can be helped.
       Candidates: the pool's admitted preemptible gangs in the same bucket (revocable for a
       revocable gang, else non-revocable) of strictly lower priority, in the order
       `lower_priority_key` (lowest priority first, then the victim order), each gang whole. A
       candidate is taken if it gives back a kind the blocked gang is short of.
    3. No loop: once requeued, a victim must come after the blocked gang in the order the next
       cycle uses (a gang blocked in an earlier queue always does; in `pending`, under `fifo` its
       key must sort after the blocked gang's, under `fair_share` its job must not end up using
       less than the blocked gang's job). Otherwise it would be admitted back into the room.
    4. Taken only if the blocked gang then fits: all of it, or nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from events import PoolEntitlement, PreemptionRequested
from services.admission.domain.cycle import (
    BY_NUMBER,
    Scratch,
    Verdict,
    dominant_share,
    in_order,
    judge,
    take_waiting_jobs,
)
from services.admission.domain.model import CYCLE_ORDER, Gang, Ledger
from services.admission.domain.queues import fifo_key
from services.admission.domain.runtime import TreeRuntime
from services.admission.domain.vectors import Vector, add_into, free, short_of
from services.preemption.domain.holdings import Holdings, copy_ledger, held_by, live_tasks, release
from services.preemption.domain.model import GRACE_PERIOD, NON_SLACK, SLACK, Bucket, Preemption
from services.preemption.domain.ranking import is_candidate, lower_priority_key
from services.tree.domain.effective import EffectivePool

HELPABLE = frozenset({"entitlement", "controller_limit"})


@dataclass(frozen=True, slots=True)
class Blocked:
    gang: Gang
    queue: str
    verdict: Verdict | None  # None: it fits with what is already on the way back


def make_room(rt: TreeRuntime, pools: dict[str, EffectivePool], holdings: Holdings) -> list[Preemption]:
    out: list[Preemption] = []
    capacity = pools["/"].limit if "/" in pools else {}
    slots: Slots | None = None
    for pool in sorted(rt.queues):
        view = pools.get(pool)
        entitlement = rt.entitlements.get(pool)
        if view is None or entitlement is None or not view.preempt_lower_priority:
            continue
        if slots is None:
            slots = slots_first_taken(rt, pools)
        for name in CYCLE_ORDER:
            blocked = blocked_head(rt, view, name, entitlement, pools, holdings, capacity, slots)
            if blocked is None:
                continue
            if blocked.verdict is not None:
                if blocked.verdict.check not in HELPABLE:
                    continue
                victims = _victims(rt, view, entitlement, pools, holdings, blocked, capacity, slots)
                if not victims:
                    continue
                for victim in victims:
                    holdings.take(victim)
                    out.append(_decision(rt, view, entitlement, holdings, blocked, victim))
            holdings.ledger(pool).hold(blocked.gang, blocked.gang.resources, 1.0)  # its room is spoken for
    return out


@dataclass(frozen=True, slots=True)
class Slots:
    """The running-job slots as the next admission cycle finds them once the jobs waiting for one
    longest have gone first (`take_waiting_jobs`): per pool with a limit, the jobs running there
    and the jobs a slot is kept for."""

    running: dict[str, set[str]]
    kept: dict[str, set[str]]
    taken: frozenset[str]  # the waiting gangs that go first (admitted before the queues are run)

    def scratch(self, pool: str, held: Ledger) -> Scratch:
        return Scratch(held={pool: held}, running={p: set(jobs) for p, jobs in self.running.items()},
                       kept={p: set(jobs) for p, jobs in self.kept.items()})


def slots_first_taken(rt: TreeRuntime, pools: dict[str, EffectivePool]) -> Slots:
    if not rt.slot_waiters:
        return Slots({}, {}, frozenset())
    first = Scratch()
    take_waiting_jobs(rt, pools, rt.entitlements, True, first, [])
    return Slots(first.running, first.kept, frozenset(first.admitted))


def blocked_head(rt: TreeRuntime, view: EffectivePool, name: str, entitlement: PoolEntitlement,
                 pools: dict[str, EffectivePool], holdings: Holdings, capacity: Vector, slots: Slots) -> Blocked | None:
    """The gang the queue `name` of the pool stops at, or None when nothing waits there."""
    queue = rt.queues[view.path][name]
    if not len(queue):
        return None
    scratch = slots.scratch(view.path, holdings.ledger(view.path))
    for gang in in_order(rt, view, queue.ordered(), capacity):
        if gang.id in slots.taken:
            continue  # a waiting job's: admitted before the queues are run
        verdict = judge(rt, gang, view, entitlement, pools, True, scratch)
        if verdict is not None and not verdict.movable:
            continue  # held back by a job limit: the cycle goes past it
        return Blocked(gang, name, verdict)
    return None


def _victims(rt: TreeRuntime, view: EffectivePool, entitlement: PoolEntitlement, pools: dict[str, EffectivePool],
             holdings: Holdings, blocked: Blocked, capacity: Vector, slots: Slots) -> list[Gang]:
    need = blocked.gang
    trial = copy_ledger(holdings.ledger(view.path))
    candidates = sorted(((t, g) for g in holdings.of_pool(view.path)
                         if g.id not in holdings.taken and g.revocable == need.revocable and g.priority < need.priority
                         for t in g.tasks if is_candidate(t, g)), key=lambda tg: lower_priority_key(tg[0], tg[1]))
    behind = _Behind(rt, holdings, view, need, blocked.queue, capacity)
    chosen: list[Gang] = []
    for _task, gang in candidates:
        if any(g.id == gang.id for g in chosen):
            continue
        if not _helps(gang, _shortfall(need, view, entitlement, trial)):
            continue
        if not behind.stays_behind(gang):
            continue
        chosen.append(gang)
        behind.took(gang)
        release(trial, gang)
        if judge(rt, need, view, entitlement, pools, True, slots.scratch(view.path, trial)) is None:
            return chosen
    return []


def _shortfall(gang: Gang, view: EffectivePool, entitlement: PoolEntitlement, held: Ledger) -> tuple[Vector, Vector]:
    """What `gang` is short of: in its bucket's entitlement, and under the controller limit."""
    need = gang.resources
    if gang.revocable:
        bucket = short_of(need, free(entitlement.slack_entitlement, held.slack, need))
    else:
        bucket = short_of(need, free(entitlement.non_slack_entitlement, held.non_slack, need))
    controller: Vector = {}
    if gang.controller and view.controller_limit is not None:
        cap = {k: v * view.controller_limit / 100.0 for k, v in view.reservation.items()}
        controller = short_of(need, free(cap, held.controller, need))
    return bucket, controller


def _helps(victim: Gang, shortfall: tuple[Vector, Vector]) -> bool:
    bucket, controller = shortfall
    freed = held_by(victim)
    if any(freed.get(k, 0.0) > 0 for k in bucket):
        return True
    return victim.controller and any(freed.get(k, 0.0) > 0 for k in controller)


class _Behind:
    """Whether a victim, once requeued to `pending`, comes after the blocked gang in the order the
    next cycle uses (so that it is not admitted back into the room made for that gang).

    Under `fair_share` that order compares the jobs' usage as the cycle works it out
    (`cycle._job_usage`: what the pool's admitted gangs ask for, added up in the order they came):
    the victim's job must not use less than the blocked gang's job once the victims are requeued.
    Gangs with a preemption request outstanding may or may not be admitted still when the next
    cycle runs, so the victim's job is counted without them and the blocked gang's job with them:
    the victim stays behind whichever way they go."""

    def __init__(self, rt: TreeRuntime, holdings: Holdings, view: EffectivePool, blocked: Gang, queue: str,
                 capacity: Vector) -> None:
        self.view = view
        self.blocked = blocked
        self.queue = queue
        self.capacity = capacity
        self.holdings = holdings
        self.of_job: dict[str, list[Gang]] = {}  # the pool's admitted gangs, per job, in the order they came
        if view.mode == "fair_share" and queue == "pending":
            for gang in sorted(rt.admitted.get(view.path, {}).values(), key=BY_NUMBER):
                self.of_job.setdefault(gang.job, []).append(gang)
        self.chosen: set[str] = set()

    def took(self, victim: Gang) -> None:
        self.chosen.add(victim.id)

    def stays_behind(self, victim: Gang) -> bool:
        if self.queue != "pending":
            return True  # the blocked gang's queue is visited before pending
        blocked = self.blocked
        if self.view.mode != "fair_share":
            return fifo_key(victim, self.view.fifo_sort) > fifo_key(blocked, self.view.fifo_sort)
        if blocked.head_rank > 0 or victim.job == blocked.job:
            return True  # head of pending / same job: the higher priority goes first
        gone = self.chosen | self.holdings.taken | {victim.id}
        theirs: Vector = {}
        for gang in self.of_job.get(victim.job, ()):
            if gang.id not in gone and not any(t.preemption_requested for t in gang.tasks):
                add_into(theirs, gang.resources)
        mine: Vector = {}
        for gang in self.of_job.get(blocked.job, ()):
            add_into(mine, gang.resources)
        return dominant_share(theirs, self.capacity) >= dominant_share(mine, self.capacity)


def _decision(rt: TreeRuntime, view: EffectivePool, entitlement: PoolEntitlement, holdings: Holdings,
              blocked: Blocked, victim: Gang) -> Preemption:
    gang = blocked.gang
    bucket: Bucket = SLACK if gang.revocable else NON_SLACK
    target = entitlement.slack_entitlement if gang.revocable else entitlement.non_slack_entitlement
    raw = rt.ledgers[view.path]
    held = raw.slack if gang.revocable else raw.non_slack
    assert blocked.verdict is not None
    short = {k: round(v, 9) for k, v in short_of(gang.resources, free(target, held, gang.resources)).items()}
    reason = (f"makes room for gang {gang.id} (priority {gang.priority}, blocked at the head of queue "
              f"{blocked.queue} of {view.path}: {blocked.verdict.check}: {blocked.verdict.detail}); "
              f"takes priority {victim.priority} < {gang.priority}")
    return Preemption(PreemptionRequested(
        tree=rt.name, pool=view.path, gang=victim.id, tasks=[t.id for t in live_tasks(victim)], reason=reason,
        excess=short, entitlement={k: round(target.get(k, 0.0), 9) for k in gang.resources},
        allocation={k: round(held.get(k, 0.0), 9) for k in gang.resources}, grace_period=GRACE_PERIOD),
        "lower_priority", bucket, victim.attempt, for_gang=gang.id)
