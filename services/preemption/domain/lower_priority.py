"""Preemption inside a pool (DOMAIN §6, pool option `preempt_lower_priority`).

For each leaf pool with the option, in path order, and each of its queues in cycle order
(non_preemptible, controller, revocable, pending):

    1. The blocked gang: the first gang in the queue's cycle order that is not held back by a job
       limit, judged as the admission cycle judges it (`cycle.judge`) on what the pool holds with
       outstanding requests (and this pass's other decisions) counted as given back. If it fits
       now, its room is already on the way: it is counted as held and nothing is taken for it.
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
from services.admission.domain.cycle import Scratch, Verdict, dominant_share, in_order, judge
from services.admission.domain.model import CYCLE_ORDER, Gang, Ledger
from services.admission.domain.queues import fifo_key
from services.admission.domain.state import TreeRuntime
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
    for pool in sorted(rt.queues):
        view = pools.get(pool)
        entitlement = rt.entitlements.get(pool)
        if view is None or entitlement is None or not view.preempt_lower_priority:
            continue
        for name in CYCLE_ORDER:
            blocked = blocked_head(rt, view, name, entitlement, pools, holdings, capacity)
            if blocked is None:
                continue
            if blocked.verdict is not None:
                if blocked.verdict.check not in HELPABLE:
                    continue
                victims = _victims(rt, view, entitlement, pools, holdings, blocked, capacity)
                if not victims:
                    continue
                for victim in victims:
                    holdings.take(victim)
                    out.append(_decision(rt, view, entitlement, holdings, blocked, victim))
            holdings.ledger(pool).hold(blocked.gang, blocked.gang.resources, 1.0)  # its room is spoken for
    return out


def blocked_head(rt: TreeRuntime, view: EffectivePool, name: str, entitlement: PoolEntitlement,
                 pools: dict[str, EffectivePool], holdings: Holdings, capacity: Vector) -> Blocked | None:
    """The gang the queue `name` of the pool stops at, or None when nothing waits there."""
    queue = rt.queues[view.path][name]
    if not len(queue):
        return None
    scratch = Scratch(held={view.path: holdings.ledger(view.path)})
    for gang in in_order(rt, view, queue.ordered(), capacity):
        verdict = judge(rt, gang, view, entitlement, pools, True, scratch)
        if verdict is not None and not verdict.movable:
            continue  # held back by a job limit: the cycle goes past it
        return Blocked(gang, name, verdict)
    return None


def _victims(rt: TreeRuntime, view: EffectivePool, entitlement: PoolEntitlement, pools: dict[str, EffectivePool],
             holdings: Holdings, blocked: Blocked, capacity: Vector) -> list[Gang]:
    need = blocked.gang
    trial = copy_ledger(holdings.ledger(view.path))
    candidates = sorted(((t, g) for g in holdings.of_pool(view.path)
                         if g.id not in holdings.taken and g.revocable == need.revocable and g.priority < need.priority
                         for t in g.tasks if is_candidate(t, g)), key=lambda tg: lower_priority_key(tg[0], tg[1]))
    behind = _Behind(holdings, view, need, blocked.queue, capacity)
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
        if judge(rt, need, view, entitlement, pools, True, Scratch(held={view.path: trial})) is None:
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
    next cycle uses (so that it is not admitted back into the room made for that gang)."""

    def __init__(self, holdings: Holdings, view: EffectivePool, blocked: Gang, queue: str, capacity: Vector) -> None:
        self.view = view
        self.blocked = blocked
        self.queue = queue
        self.capacity = capacity
        self.usage: dict[str, Vector] = {}  # job -> what its admitted gangs hold once requests are done
        if view.mode == "fair_share":
            for gang in holdings.of_pool(view.path):
                if gang.id not in holdings.taken and not any(t.preemption_requested for t in gang.tasks):
                    add_into(self.usage.setdefault(gang.job, {}), held_by(gang))

    def took(self, victim: Gang) -> None:
        if victim.job in self.usage:
            add_into(self.usage[victim.job], held_by(victim), -1.0)

    def stays_behind(self, victim: Gang) -> bool:
        if self.queue != "pending":
            return True  # the blocked gang's queue is visited before pending
        blocked = self.blocked
        if self.view.mode != "fair_share":
            return fifo_key(victim, self.view.fifo_sort) > fifo_key(blocked, self.view.fifo_sort)
        if blocked.head_rank > 0 or victim.job == blocked.job:
            return True  # head of pending / same job: the higher priority goes first
        left = dict(self.usage.get(victim.job, {}))
        add_into(left, held_by(victim), -1.0)
        mine = dominant_share(self.usage.get(blocked.job, {}), self.capacity)
        return dominant_share(left, self.capacity) >= mine


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
