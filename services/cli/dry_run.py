"""`poolwise apply -f FILE --dry-run`: what a cluster file would change, on a copy of the live
state, with nothing appended (issue 21, "what-if on the live state"; its first part).

1. Fold the live log as a standby admission instance does (`admission.service.standby()`:
   from admission's newest snapshot, then the tail), in this process: the configuration with its real gangs, the
   ledgers (what each pool holds and waits for). Nothing is published (the decisions the fold
   makes again are dropped).
2. Plan the file against that configuration (`change_plan`, the same as `apply`; a file that
   breaks a rule is refused the same way).
3. Fold the plan's events (the tree service's `decide` of each command) into a copy of the
   state, and compute every tree's entitlements before and after with admission's own code
   (`entitle.compute_for`), from the same ledgers.

4. Run admission's next cycle (`decide.run_cycles` after a tick at the fold's time) on a copy
   of each: the gangs it would admit with the change, and whether it would without.

What is not there yet (issue 21): which admitted gangs would be over entitlement and which tasks
preemption would pick; `poolwise whatif` with steps.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, cast

from services.admission.domain.state import AdmissionState
from services.tree.domain.change_plan import Plan, plan_changes
from services.tree.domain.cluster import ClusterConfig

PoolKind = tuple[str, str, str]  # (tree, path, kind)


Admission = tuple[str, str, str]  # (tree, gang, pool)


@dataclass(frozen=True)
class WhatIf:
    """A plan; every pool's entitlement per kind before and after it (None: no such pool); the
    gangs admission's next cycle would admit without the change and with it."""

    plan: Plan
    before: dict[PoolKind, float]
    after: dict[PoolKind, float]
    admitted_before: tuple[Admission, ...] = ()
    admitted_after: tuple[Admission, ...] = ()

    def admissions(self) -> list[dict[str, Any]]:
        """The gangs the next cycle would admit after the change, each saying whether it would be
        admitted without it too (the cycle was due anyway)."""
        anyway = set(self.admitted_before)
        return [{"tree": t, "gang": g, "pool": p, "without_the_change": (t, g, p) in anyway}
                for t, g, p in self.admitted_after]

    def rows(self) -> list[dict[str, Any]]:
        """One row per tree, pool and kind, in that order: before, after, and whether it changes."""
        keys = sorted({*self.before, *self.after})
        return [{"tree": t, "pool": p, "kind": k, "before": self.before.get((t, p, k)),
                 "after": self.after.get((t, p, k)), "changed": self.before.get((t, p, k)) != self.after.get((t, p, k))}
                for t, p, k in keys]


def entitlements(state: AdmissionState) -> dict[PoolKind, float]:
    """Every pool's entitlement per kind, computed now by admission's code (not the last cycle's)."""
    from services.admission.domain.entitle import compute_for

    out: dict[PoolKind, float] = {}
    for tree in state.config.tree_names():
        for pool in compute_for(state, tree).pools:
            if pool.path == "/":  # the tree's capacity, not a pool
                continue
            for kind, amount in pool.entitlement.items():
                out[(tree, pool.path, kind)] = amount
    return out


def what_if(state: AdmissionState, target: ClusterConfig, prune: bool) -> WhatIf:
    """The plan from `state`'s configuration to `target`, and the entitlements before and after
    it. `state` is not changed (pure but for the engines memoised in its cache)."""
    from services.tree.domain.decide import Accepted, decide

    plan = plan_changes(state.config, target, prune)
    if not plan.ok:
        return WhatIf(plan, {}, {})
    after = copy.deepcopy(state)
    after.config.cache.clear()  # memoised engines and views: made again for the copy
    for command in plan.commands:
        decision = decide(after.config, command)
        assert isinstance(decision, Accepted), decision  # the plan was made by trying each one
        for event in decision.events:
            after.apply(event, after.last_seq + 1, after.now)
    before, changed = entitlements(state), entitlements(after)
    return WhatIf(plan, before, changed, next_cycle(copy.deepcopy(state)), next_cycle(after))


def next_cycle(state: AdmissionState) -> tuple[Admission, ...]:
    """The gangs an admission cycle run now on `state` admits (admission's own `run_cycles`,
    after a tick at the state's time: no timer fires). `state` is changed: give a copy."""
    from events import ClockTicked, GangAdmitted
    from services.admission.domain.decide import run_cycles

    seq = state.last_seq + 1
    state.apply(ClockTicked(), seq, state.now)
    return tuple((o.event.tree, o.event.gang, o.event.pool) for o in run_cycles(state, seq)
                 if isinstance(o.event, GangAdmitted))


async def live_state(url: str) -> AdmissionState:
    """Admission's fold of the live log, from its newest snapshot and the tail after it."""
    from services.admission.queries import ExplainingFolder
    from services.admission.service import standby
    from services.common.jetstream import JetStreamLog
    from services.common.snapshots import policy_for

    log = await JetStreamLog.connect(url, name="poolwise-dry-run")
    try:
        policy = policy_for(log, "admission")
        # the fold a standby instance keeps: its snapshots are the service's (explain's notes in them)
        warm = standby()
        await warm.catch_up(log, None if policy is None else policy.store)
        state = cast(ExplainingFolder, warm.folder).state
        state.on_forget = None  # explain's notes are not needed (nor copied with the state)
        return state
    finally:
        await log.close()
