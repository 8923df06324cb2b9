"""One preemption pass over one tree (DOMAIN §6), run after each admission cycle, on the state
with that cycle's entitlements and admissions folded.

Worked example (Peloton user guide): 100 cpu, RP1..RP3 reservation 20, share 1. RP2 and RP3 hold
45 cpu each in running one-cpu tasks when RP1's demand rises and every entitlement becomes
33.33: each is 11.67 over, so (grace 0) each gives back 12 tasks: 11 cover 11, the 12th covers
the rest (one task of overshoot at most). Their allocation is released when the executor
reports the tasks `preempted`.

    1. Between pools. For each leaf pool (path order), the excess: non-slack allocation over
       non-slack entitlement, and slack allocation over slack entitlement, per kind, counting
       tasks with a request outstanding as already given back. A pool in excess remembers since
       when; once `now - since >= grace` (and preemption is on in its tree) it gives back:
       candidates in victim order (revocable tasks for the slack excess, the others for the
       non-slack one), a task counting only if it holds a kind in excess; taking a task takes its
       whole gang; stop once the excess is covered. The overshoot never eats into the guarantee:
       a gang that is not needed in full for any kind still in excess, and whose loss would take
       the pool below `min(requirement, reservation)` (never above its entitlement) on a kind
       still in excess, is passed over. Passed-over gangs are looked at again (in victim order)
       once another gang covered a kind, until a sweep takes nothing, so the next pass, with
       nothing new, takes nothing either.
    2. Inside a pool (`preempt_lower_priority`; `lower_priority.py`): a gang blocked at the head
       of a queue may take the pool's lower-priority preemptible gangs, if that makes it fit.
    3. Starvation (`starvation.py`): each pool's status, and an event when it changes.

Step 2 sees what step 1 took as given back.
"""

from __future__ import annotations

from collections.abc import Iterable

from events import PoolEntitlement, PreemptionRequested
from services.admission.domain.model import Gang, Ledger
from services.admission.domain.runtime import TreeRuntime
from services.admission.domain.state import AdmissionState
from services.admission.domain.vectors import TOLERANCE, Vector, add_into, exceeds
from services.preemption.domain.admitted import AdmittedIndex
from services.preemption.domain.holdings import Holdings, held_by, live_tasks
from services.preemption.domain.lower_priority import make_room
from services.preemption.domain.model import (
    GRACE_PERIOD,
    NON_SLACK,
    SLACK,
    Bucket,
    PassResult,
    Preemption,
    TreeMemory,
)
from services.preemption.domain.ranking import is_candidate, victim_key
from services.preemption.domain.starvation import starvation
from services.tree.domain.amounts import spell
from services.tree.domain.effective import EffectivePool, effective_pools


def preemption_pass(state: AdmissionState, tree: str, now: float, memory: TreeMemory,
                    admitted: AdmittedIndex | Iterable[Gang] | None = None, picks: bool = True) -> PassResult:
    """The decisions of one pass over `tree` at `now`. `admitted`: the tree's admitted gangs, if
    the caller keeps them (`AdmittedIndex`; else every gang of the tree is looked at).

    `picks=False`: what the pass remembers (`memory`: since when each pool is over, each pool's
    starvation) and its starvation changes, without picking a victim (an instance that does not
    decide the tree: services/preemption/held_trees.py). `memory` ends the same either way: a
    bucket's excess is judged before its picks, the picks of the non-slack bucket take
    non-revocable gangs (which hold no slack, all the slack bucket reads), each pool's picks
    touch only its own ledger, and starvation reads the tree's ledgers, never the picks."""
    rt = state.runtime(tree)
    options = state.config.tree(tree).options
    pools = effective_pools(state.config, tree)
    holdings = Holdings.of(rt, admitted)
    result = PassResult()
    enabled = options.preemption.enabled and picks
    result.preemptions += over_entitlement(rt, pools, holdings, now, options.preemption.grace, enabled, memory)
    if enabled:
        result.preemptions += make_room(rt, pools, holdings)
    result.starvation += starvation(rt, pools, options.starvation_tolerance, options.starvation_timeout, now,
                                    memory.starvation)
    return result


# --- 1. between pools ----------------------------------------------------------------------------


def guarantee(ledger: Ledger, view: EffectivePool | None, entitlement: PoolEntitlement) -> Vector:
    """Per kind, what preemption never takes a pool below: `min(requirement, reservation)` of its
    non-revocable work (requirement = non-slack allocation + demand, capped by the limit), and
    never more than its non-slack entitlement (a guarantee the tree cannot honour any more, when
    hosts went away, is read as the entitlement)."""
    if view is None:
        return {}
    held = ledger.non_slack
    out: Vector = {}
    for kind, reserved in view.reservation.items():
        requirement = min(held.get(kind, 0.0) + ledger.demand.get(kind, 0.0), view.limit.get(kind, float("inf")))
        out[kind] = max(0.0, min(requirement, reserved, entitlement.non_slack_entitlement.get(kind, 0.0)))
    return out


def over_entitlement(rt: TreeRuntime, pools: dict[str, EffectivePool], holdings: Holdings, now: float, grace: float,
                     enabled: bool, memory: TreeMemory) -> list[Preemption]:
    out: list[Preemption] = []
    over = memory.over
    for pool in sorted(rt.ledgers):
        entitlement = rt.entitlements.get(pool)
        if entitlement is None:
            continue
        raw = rt.ledgers[pool]
        if not over_any(raw, entitlement) and not (over and ((pool, NON_SLACK) in over or (pool, SLACK) in over)):
            continue  # within both entitlements, and no excess remembered to reset: the usual case
        buckets: tuple[Bucket, ...] = (NON_SLACK, SLACK)
        for bucket in buckets:
            slack = bucket == SLACK
            target = entitlement.slack_entitlement if slack else entitlement.non_slack_entitlement
            held: Vector = {}
            excess = exceeds(raw.slack if slack else raw.non_slack, target)  # over even counting requests?
            if excess:
                ledger = holdings.ledger(pool)
                held = ledger.slack if slack else ledger.non_slack
                excess = exceeds(held, target)
            key = (pool, bucket)
            if not excess:
                memory.over.pop(key, None)  # leaving excess resets the grace
                continue
            since = memory.over.setdefault(key, now)
            if not enabled or now - since < grace - TOLERANCE:
                continue
            floor = {} if slack else guarantee(rt.ledgers[pool], pools.get(pool), entitlement)
            out += _give_back(rt, pool, bucket, excess, held, target, floor, holdings, since)
    return out


def _give_back(rt: TreeRuntime, pool: str, bucket: Bucket, excess: Vector, held: Vector, target: Vector,
               floor: Vector, holdings: Holdings, since: float) -> list[Preemption]:
    slack = bucket == SLACK
    candidates = sorted(((t, g) for g in holdings.of_pool(pool) if g.revocable == slack and g.id not in holdings.taken
                         for t in g.tasks if is_candidate(t, g)), key=lambda tg: victim_key(tg[0], tg[1]))
    left = dict(excess)
    after = dict(held)
    raw = rt.ledgers[pool].slack if slack else rt.ledgers[pool].non_slack
    numbers = ", ".join(f"{k} {spell(raw.get(k, 0.0))} held, {spell(target.get(k, 0.0))} entitled"
                        for k in sorted(excess))
    word = "slack" if slack else "non-slack"
    out: list[Preemption] = []
    progress = True
    while progress and not _covered(left):  # sweeps, until one takes nothing: the next pass would take nothing
        progress = False
        for task, gang in candidates:
            if gang.id in holdings.taken:
                continue
            short = [k for k, v in left.items() if v >= TOLERANCE]
            if not any(task.resources.get(k, 0.0) > 0 for k in short):
                continue  # holds no kind still in excess
            freed = held_by(gang)
            if not _needed(freed, left, short) and _breaks(freed, after, floor, short):
                continue  # overshoot only, into the guarantee
            holdings.take(gang)
            progress = True
            add_into(left, freed, -1.0)
            add_into(after, freed, -1.0)
            out.append(Preemption(PreemptionRequested(
                tree=rt.name, pool=pool, gang=gang.id, tasks=[t.id for t in live_tasks(gang)],
                reason=f"over {word} entitlement since {moment(since)}: {numbers}",
                excess={k: round(v, 9) for k, v in excess.items()},
                entitlement={k: round(target.get(k, 0.0), 9) for k in excess},
                allocation={k: round(raw.get(k, 0.0), 9) for k in excess},
                grace_period=GRACE_PERIOD), "over_entitlement", bucket, gang.attempt))
            if _covered(left):
                break
    return out


def over_any(raw: Ledger, entitlement: PoolEntitlement) -> bool:
    """Whether `exceeds(raw.non_slack, non-slack entitlement)` or `exceeds(raw.slack, slack
    entitlement)` is not empty: the same arithmetic, without building either."""
    target = entitlement.non_slack_entitlement.get
    slack = raw.slack
    held = slack.get
    for kind, amount in raw.allocation.items():
        if (amount - held(kind, 0.0)) - target(kind, 0.0) >= TOLERANCE:
            return True
    if slack:
        target = entitlement.slack_entitlement.get
        for kind, amount in slack.items():
            if amount - target(kind, 0.0) >= TOLERANCE:
                return True
    return False


def moment(seconds: float) -> str:
    """A log time in a reason: `60` (scenario time), `1795320436.327` (wall time), never `1.8e+09`."""
    return f"{seconds:.3f}".rstrip("0").rstrip(".")


def _covered(left: Vector) -> bool:
    return all(v < TOLERANCE for v in left.values())


def _needed(freed: Vector, left: Vector, short: list[str]) -> bool:
    """All of it is needed for some kind still in excess (taking it overshoots nothing there)."""
    return any(freed.get(k, 0.0) > 0 and freed.get(k, 0.0) - left[k] < TOLERANCE for k in short)


def _breaks(freed: Vector, after: Vector, floor: Vector, short: list[str]) -> bool:
    """Taking it leaves less than the guarantee of a kind still in excess."""
    return any(after.get(k, 0.0) - freed.get(k, 0.0) < floor.get(k, 0.0) - TOLERANCE for k in short)
