"""The admission cycle (DOMAIN §4): decide, for one tree, which gangs are admitted now.

    1. Visit the leaf pools in path order.
    2. In each, visit the queues non_preemptible, controller, revocable, pending; take the head
       gang and try it, all or nothing, against
         a. entitlement: non-slack allocation + gang <= non-slack entitlement
            (revocable gangs: slack allocation + gang <= slack entitlement);
         b. controller limit: controller allocation + gang <= reservation * controller_limit %;
         c. reservation: with preemption enabled, non-preemptible allocation + gang <= reservation;
         d. job limits: a gang of a job with nothing running keeps running jobs within
            `max_running_jobs` at the pool and every ancestor (else it waits, and the queue goes on).
    3. A gang that fits is admitted. At the head of pending, a gang that does not fit moves to the
       non_preemptible, controller or revocable queue if it is such a gang, and the cycle goes on;
       any other gang that does not fit stops its queue (head of line).

Jobs waiting for a running-job slot (`Gang.slot_wait`, marked by the fold when the previous
cycle was applied) go first: before step 1, their gangs are tried in the order their jobs
arrived. One that fits is admitted; one that has its slot but not its resources keeps the slot
(at every pool where its job needs one) for this cycle, so that no later job takes it.

The cycle reads the state and returns decisions; it changes nothing. The decisions take effect
at the cycle's trigger (`decide.run_cycles` applies them with `AdmissionState.apply`).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass, field
from operator import attrgetter

from events import GangAdmitted, GangMovedToQueue, PoolEntitlement, TaskSpec
from services.admission.domain.chains import pool_chain
from services.admission.domain.model import CYCLE_ORDER, PENDING, Gang, Ledger
from services.admission.domain.outcomes import new_outcome
from services.admission.domain.runtime import TreeRuntime
from services.admission.domain.state import AdmissionState, Outcome
from services.admission.domain.trusted import gang_admitted, task_spec
from services.admission.domain.vectors import TOLERANCE, Vector, add_into, fits, fits_free, free, short_of
from services.tree.domain.effective import EffectivePool, effective_pools


@dataclass(slots=True)
class Scratch:
    """What the cycle has admitted so far, on top of the state (which it does not touch)."""

    held: dict[str, Ledger] = field(default_factory=dict)
    running: dict[str, set[str]] = field(default_factory=dict)  # read only where a running-job limit is
    kept: dict[str, set[str]] = field(default_factory=dict)  # pool -> jobs first in line for a slot there
    admitted: set[str] = field(default_factory=set)  # gangs admitted by this cycle
    limits: dict[str, tuple[tuple[str, int], ...]] = field(default_factory=dict)  # memo of `slot_limits`
    # (job, leaf) -> why the job has no running-job slot there (`_job_limits`), until a slot is
    # taken or kept: the answer depends on nothing else, and a cycle asks it for every gang that
    # waits for a slot, often thousands of gangs of the same few jobs
    no_slot: dict[tuple[str, str], Verdict] = field(default_factory=dict)

    def ledger(self, rt: TreeRuntime, pool: str) -> Ledger:
        found = self.held.get(pool)
        if found is None:
            base = rt.ledgers.get(pool) or Ledger()
            found = self.held[pool] = Ledger(dict(base.allocation), dict(base.non_preemptible),
                                             dict(base.controller), dict(base.slack))
        return found

    def jobs_running(self, rt: TreeRuntime, pool: str) -> set[str]:
        found = self.running.get(pool)
        if found is None:
            found = self.running[pool] = set(rt.running.get(pool, {}))
        return found

    def slot_limits(self, pools: dict[str, EffectivePool], leaf: str) -> tuple[tuple[str, int], ...]:
        """(pool, max_running_jobs) of the leaf and its ancestors that have a running-job limit,
        nearest first: the only pools where check d looks at running jobs (a scratch serves one
        cycle, so one `pools`)."""
        found = self.limits.get(leaf)
        if found is None:
            found = self.limits[leaf] = tuple(
                (pool, view.max_running_jobs) for pool in pool_chain(leaf)
                if (view := pools.get(pool)) is not None and view.max_running_jobs is not None)
        return found

    def keep_slots(self, rt: TreeRuntime, gang: Gang, pools: dict[str, EffectivePool]) -> None:
        """The gang's job is first in line for a slot wherever it needs one: nobody later takes it."""
        for pool, _ in self.slot_limits(pools, gang.pool):
            if gang.job not in self.jobs_running(rt, pool):
                self.kept.setdefault(pool, set()).add(gang.job)
                self.no_slot.clear()


@dataclass(frozen=True, slots=True)
class Verdict:
    """Why a gang does not fit now (None fields: that check passed)."""

    check: str
    detail: str
    movable: bool = True  # False: job limits hold the gang; it neither moves nor blocks


def decide_cycle(state: AdmissionState, tree: str, entitlements: Mapping[str, PoolEntitlement]) -> list[Outcome]:
    rt = state.runtime(tree)
    pools = effective_pools(state.config, tree)
    preemption_on = state.config.tree(tree).options.preemption.enabled
    scratch = Scratch()
    out: list[Outcome] = []
    take_waiting_jobs(rt, pools, entitlements, preemption_on, scratch, out)
    queues = rt.queues
    for path in sorted(queues):  # 1. leaf pools in path order
        view = pools.get(path)
        if view is None:
            continue
        of_pool = queues[path]
        for name in CYCLE_ORDER:  # 2. queues in cycle order (most are empty under a trickle)
            if len(of_pool[name]):
                _run_queue(state, rt, view, name, entitlements.get(path), pools, preemption_on, scratch, out)
    return out


def _run_queue(state: AdmissionState, rt: TreeRuntime, view: EffectivePool, name: str,
               entitlement: PoolEntitlement | None, pools: dict[str, EffectivePool], preemption_on: bool,
               scratch: Scratch, out: list[Outcome]) -> None:
    queue = rt.queues[view.path][name]
    if not len(queue):
        return
    capacity = pools["/"].limit if "/" in pools else {}
    for gang in in_order(rt, view, queue.ordered(), capacity):
        if gang.id in scratch.admitted:
            continue  # taken first, as a waiting job's
        verdict = judge(rt, gang, view, entitlement, pools, preemption_on, scratch)
        if verdict is None:  # 3. fits: admitted
            admit(rt, gang, name, pools, scratch, out)
            continue
        if not verdict.movable:
            continue  # held by a job limit: waits without blocking the queue
        target = _move_target(gang, preemption_on) if name == "pending" else None
        if target is None:
            return  # head of line: the queue stops here
        out.append(Outcome(GangMovedToQueue(tree=rt.name, gang=gang.id, pool=gang.pool, queue=target,  # type: ignore[arg-type,unused-ignore]
                                            reason=f"{verdict.check}: {verdict.detail}"), f"moved:{gang.id}"))


def take_waiting_jobs(rt: TreeRuntime, pools: dict[str, EffectivePool], entitlements: Mapping[str, PoolEntitlement],
                       preemption_on: bool, scratch: Scratch, out: list[Outcome]) -> None:
    """Gangs of jobs waiting for a running-job slot, first, by their job's arrival (DOMAIN §4 d)."""
    waiting = [g for g in map(rt.gangs.__getitem__, rt.slot_waiters)
               if g.state == PENDING and g.slot_wait is not None and g.pool in pools and g.queue is not None]
    if not waiting:
        return
    since: dict[str, int] = {}
    for gang in waiting:
        since[gang.job] = min(since.get(gang.job, gang.arrival), gang.arrival)
    waiting.sort(key=lambda g: (since[g.job], g.job, g.arrival, g.id))
    no_slot = scratch.no_slot
    for gang in waiting:
        if (gang.job, gang.pool) in no_slot:
            continue  # its job has no slot there (found for an earlier gang of it): it would neither go nor keep one
        view = pools[gang.pool]
        verdict = judge(rt, gang, view, entitlements.get(gang.pool), pools, preemption_on, scratch)
        if verdict is None:
            assert gang.queue is not None
            admit(rt, gang, gang.queue, pools, scratch, out)
        elif verdict.movable and _job_limits(rt, gang, pools, scratch) is None:
            scratch.keep_slots(rt, gang, pools)  # its turn has come; it waits for resources, not for a slot


def in_order(rt: TreeRuntime, view: EffectivePool, gangs: list[Gang], capacity: Vector) -> list[Gang]:
    """The order in which a cycle takes a queue's gangs (fifo: as queued; fair_share: by job usage).
    Used by the cycle, `explain` and preemption inside a pool, so that all three agree."""
    if view.mode != "fair_share":
        return gangs
    # fair_share: repeatedly the first gang of the job using least (dominant share over weight 1),
    # counting the gangs ordered before it as admitted. Only the chosen gang's job changes its
    # usage, so each job's gangs are sorted once and the jobs kept in a heap by their first gang's
    # key: the same order as taking the least key over every gang each time, in O(n log n).
    usage = _job_usage(rt, view.path, capacity)
    of_job: dict[str, list[tuple[int, int, int, str, Gang]]] = {}
    for gang in gangs:
        of_job.setdefault(gang.job, []).append((0 if gang.head_rank else 1, -gang.priority, gang.arrival, gang.id,
                                                gang))
    jobs: list[tuple[int, float, int, int, str, str]] = []
    for job, queued in of_job.items():
        queued.sort(key=_rank, reverse=True)  # the job's first gang last: taken with pop()
        head, priority, arrival, gang_id, _ = queued[-1]
        jobs.append((head, usage.get(job, 0.0), priority, arrival, gang_id, job))
    heapq.heapify(jobs)
    ordered: list[Gang] = []
    while jobs:
        job = heapq.heappop(jobs)[5]
        queued = of_job[job]
        best = queued.pop()[4]
        ordered.append(best)
        usage[job] = usage.get(job, 0.0) + dominant_share(best.resources, capacity)
        if queued:
            head, priority, arrival, gang_id, _ = queued[-1]
            heapq.heappush(jobs, (head, usage[job], priority, arrival, gang_id, job))
    return ordered


BY_NUMBER = attrgetter("number")  # the order a tree's gangs came in (`Gang.number`)


def _rank(entry: tuple[int, int, int, str, Gang]) -> tuple[int, int, int, str]:
    return entry[0], entry[1], entry[2], entry[3]


def dominant_share(vector: Vector, capacity: Vector) -> float:
    return max((v / capacity[k] for k, v in vector.items() if capacity.get(k, 0.0) > 0), default=0.0)


def _job_usage(rt: TreeRuntime, pool: str, capacity: Vector) -> dict[str, float]:
    """Each job's dominant share of what its admitted gangs in `pool` hold, added up in the order
    the gangs came (`Gang.number`: the same floats whatever order they were admitted in)."""
    held = rt.admitted.get(pool)
    if not held:
        return {}
    totals: dict[str, Vector] = {}
    for gang in sorted(held.values(), key=BY_NUMBER) if len(held) > 1 else held.values():
        add_into(totals.setdefault(gang.job, {}), gang.resources)
    return {job: dominant_share(v, capacity) for job, v in totals.items()}


def judge(rt: TreeRuntime, gang: Gang, view: EffectivePool, entitlement: PoolEntitlement | None,
          pools: dict[str, EffectivePool], preemption_on: bool, scratch: Scratch) -> Verdict | None:
    """The checks of DOMAIN §4 in order; None when the gang fits. (Each check first asks whether
    the gang fits, without building vectors; the room is worked out only to say why not.)"""
    held = scratch.ledger(rt, view.path)
    need = gang.resources
    # a. entitlement
    if gang.revocable:
        limit = entitlement.slack_entitlement if entitlement else {}
        if not fits_free(need, limit, held.slack):
            room = free(limit, held.slack, need)
            return Verdict("entitlement", _shortfall(need, room, "slack", entitlement is None))
    else:
        limit = entitlement.non_slack_entitlement if entitlement else {}
        if not _non_slack_fits(need, limit, held):
            room = free(limit, held.non_slack, need)
            return Verdict("entitlement", _shortfall(need, room, "non-slack", entitlement is None))
    # b. controller limit
    if gang.controller and view.controller_limit is not None:
        cap = {k: v * view.controller_limit / 100.0 for k, v in view.reservation.items()}
        room = free(cap, held.controller, need)
        if not fits(need, room):
            return Verdict("controller_limit", _shortfall(need, room, "controller", False))
    # c. reservation, for non-preemptible gangs
    if preemption_on and not gang.preemptible and not fits_free(need, view.reservation, held.non_preemptible):
        room = free(view.reservation, held.non_preemptible, need)
        return Verdict("reservation", _shortfall(need, room, "non-preemptible reservation", False))
    # d. job limits
    return _job_limits(rt, gang, pools, scratch)


def _non_slack_fits(need: Vector, limit: Vector, held: Ledger) -> bool:
    """`fits(need, free(limit, held.non_slack, need))`, the same arithmetic, without building
    `non_slack` (allocation - slack, per kind of the allocation)."""
    allocation, slack = held.allocation, held.slack
    for kind, amount in need.items():
        if amount > 0:
            allocated = allocation.get(kind)
            used = 0.0 if allocated is None else allocated - slack.get(kind, 0.0)
            room = limit.get(kind, 0.0) - used
            if not amount - (room if room > 0.0 else 0.0) < TOLERANCE:  # max(0.0, room), without the call
                return False
    return True


def _job_limits(rt: TreeRuntime, gang: Gang, pools: dict[str, EffectivePool], scratch: Scratch) -> Verdict | None:
    """Check d: a job with nothing running needs a slot at its pool and every ancestor; slots kept
    for jobs ahead of it in line count as taken."""
    limits = scratch.slot_limits(pools, gang.pool)
    if not limits:
        return None  # (most pools: no running-job limit on the way up)
    known = scratch.no_slot.get((gang.job, gang.pool))
    if known is not None:
        return known
    for pool, limit in limits:
        running = scratch.jobs_running(rt, pool)
        if gang.job in running:
            continue
        kept = len(scratch.kept.get(pool, set()) - {gang.job})
        if len(running) + kept + 1 > limit:
            ahead = f" and {kept} kept for jobs waiting longer" if kept else ""
            verdict = Verdict("job_limit", f"pool {pool} has {len(running)} running jobs of {limit}{ahead}",
                              movable=False)
            scratch.no_slot[(gang.job, gang.pool)] = verdict
            return verdict
    return None


def _shortfall(need: Vector, room: Vector, what: str, unknown: bool) -> str:
    if unknown:
        return "no entitlement computed yet"
    parts = [f"needs {k} {need[k]:g}, {room.get(k, 0.0):g} {what} left" for k in sorted(short_of(need, room))]
    return "; ".join(parts)


def _move_target(gang: Gang, preemption_on: bool) -> str | None:
    if preemption_on and not gang.preemptible:
        return "non_preemptible"
    if gang.controller:
        return "controller"
    if gang.revocable:
        return "revocable"
    return None


def admit(rt: TreeRuntime, gang: Gang, queue: str, pools: dict[str, EffectivePool], scratch: Scratch,
          out: list[Outcome]) -> None:
    """Admit `gang` on the cycle's scratch (what it holds, the job slots it takes) and say so in
    `out` (explain's what-if admits on a scratch of its own)."""
    scratch.admitted.add(gang.id)
    scratch.ledger(rt, gang.pool).hold(gang, gang.resources, 1.0)
    for pool, _ in scratch.slot_limits(pools, gang.pool):
        running = scratch.jobs_running(rt, pool)
        if gang.job not in running:
            running.add(gang.job)
            scratch.no_slot.clear()
    attempt = gang.attempt + 1
    # The tasks are the members' `TaskSpec`s as enqueued (the same id and resources, validated
    # already), the rest plain values of the state: the model is built without validating them
    # again (`trusted.gang_admitted`). Members made otherwise (no spec) are validated.
    specs: list[TaskSpec] = []
    for task in gang.tasks:
        spec = task.spec
        if spec is None:
            admitted = GangAdmitted.model_validate({
                "tree": rt.name, "gang": gang.id, "pool": gang.pool, "queue": queue, "attempt": attempt,
                "tasks": [t.spec or {"id": t.id, "resources": t.resources} for t in gang.tasks]})
            break
        specs.append(task_spec(spec))  # (a view of it, read from the log, made into the model)
    else:
        admitted = gang_admitted(rt.name, gang.id, gang.pool, queue, specs, attempt)
    out.append(new_outcome(Outcome, (admitted, f"admitted:{gang.id}:{attempt}")))  # (`Outcome(...)`: once per gang)
