"""One preemption pass over one tree (DOMAIN §6), run after each admission cycle.

Worked example (Peloton user guide): 100 cpu, RP1..RP3 reservation 20, share 1. RP2 and RP3 hold
45 cpu each in running one-cpu tasks when RP1's demand rises and every entitlement becomes
33.33: each is 11.67 over, so (grace 0) each gives back 12 tasks: 11 cover 11, the 12th covers
the rest (one task of overshoot at most). Their allocation is released when the executor
reports the tasks `preempted`.

    1. For each leaf pool, the excess: non-slack allocation over non-slack entitlement, and slack
       allocation over slack entitlement, per kind, counting tasks with a request outstanding as
       already given back.
    2. A pool in excess remembers since when; once `now - since >= grace` (and preemption is on
       in its tree) it gives back: candidates in victim order (revocable tasks for the slack
       excess, the others for the non-slack one), a task counting only if it holds a kind in
       excess; taking a task takes its whole gang; stop once the excess is covered.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from events import PoolEntitlement, PreemptionRequested
from services.admission.domain.model import ADMITTED, TERMINAL, Gang, Ledger, Task
from services.admission.domain.state import Outcome, TreeRuntime
from services.admission.domain.vectors import TOLERANCE, Vector, add_into, exceeds
from services.preemption.domain.ranking import is_candidate, victim_key
from services.tree.domain.amounts import spell

GRACE_PERIOD = 5.0  # seconds between SIGTERM and SIGKILL for a running task


@dataclass(slots=True)
class OverSince:
    """Since when each (pool, bucket) has been over its entitlement."""

    since: dict[tuple[str, str], float] = field(default_factory=dict)


def outstanding(rt: TreeRuntime, pool: str, revocable: bool) -> Vector:
    """What tasks with a preemption request still hold (counted as already given back)."""
    held: Vector = {}
    for gang in rt.gangs.values():
        if gang.pool != pool or gang.state != ADMITTED or gang.revocable != revocable:
            continue
        for task in gang.tasks:
            if task.preemption_requested and task.state not in TERMINAL:
                add_into(held, task.resources)
    return held


def excess_of(ledger: Ledger, entitlement: PoolEntitlement, rt: TreeRuntime, pool: str, slack: bool) -> Vector:
    held = dict(ledger.slack if slack else ledger.non_slack)
    add_into(held, outstanding(rt, pool, slack), -1.0)
    target = entitlement.slack_entitlement if slack else entitlement.non_slack_entitlement
    return exceeds(held, target)


def preemption_pass(rt: TreeRuntime, now: float, grace: float, enabled: bool, over: OverSince) -> list[Outcome]:
    out: list[Outcome] = []
    for pool in sorted(rt.ledgers):
        entitlement = rt.entitlements.get(pool)
        if entitlement is None:
            continue
        ledger = rt.ledgers[pool]
        for bucket, slack in (("non_slack", False), ("slack", True)):
            excess = excess_of(ledger, entitlement, rt, pool, slack)
            key = (pool, bucket)
            if not excess:
                over.since.pop(key, None)
                continue
            since = over.since.setdefault(key, now)
            if not enabled or now - since < grace - TOLERANCE:
                continue
            out.extend(_give_back(rt, pool, excess, slack, ledger, entitlement, now, since))
    return out


def _give_back(rt: TreeRuntime, pool: str, excess: Vector, slack: bool, ledger: Ledger,
               entitlement: PoolEntitlement, now: float, since: float) -> list[Outcome]:
    candidates: list[tuple[Task, Gang]] = []
    for gang in rt.gangs.values():
        if gang.pool != pool or gang.state != ADMITTED or gang.revocable != slack:
            continue
        candidates.extend((t, gang) for t in gang.tasks if is_candidate(t, gang))
    candidates.sort(key=lambda tg: victim_key(tg[0], tg[1]))
    left = dict(excess)
    taken: set[str] = set()
    out: list[Outcome] = []
    bucket = "slack" if slack else "non-slack"
    target = entitlement.slack_entitlement if slack else entitlement.non_slack_entitlement
    held = ledger.slack if slack else ledger.non_slack
    for task, gang in candidates:
        if not any(left.get(k, 0.0) >= TOLERANCE for k, v in task.resources.items() if v > 0):
            continue  # holds no kind still in excess
        if gang.id in taken:
            continue
        taken.add(gang.id)
        live = [t for t in gang.tasks if t.state not in TERMINAL and t.state != "pending"]
        for t in live:
            add_into(left, t.resources, -1.0)
        numbers = ", ".join(f"{k} {spell(held.get(k, 0.0))} held, {spell(target.get(k, 0.0))} entitled"
                            for k in sorted(excess))
        out.append(Outcome(PreemptionRequested(
            tree=rt.name, pool=pool, gang=gang.id, tasks=[t.id for t in live],
            reason=f"over {bucket} entitlement since {since:g}: {numbers}",
            excess={k: round(v, 9) for k, v in excess.items()},
            entitlement={k: round(target.get(k, 0.0), 9) for k in excess},
            allocation={k: round(held.get(k, 0.0), 9) for k in excess},
            grace_period=GRACE_PERIOD), f"preempt:{gang.id}:{gang.attempt}"))
        if all(v < TOLERANCE for v in left.values()):
            break
    return out
