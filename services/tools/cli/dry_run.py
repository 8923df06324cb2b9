"""What a change would do, on a copy of the live state, with nothing appended (issue 21, "what-if
on the live state"): `poolwise apply -f FILE --dry-run` and `poolwise whatif -f FILE`.

1. Fold the live log as admission does (`services.tools.cli.folds`: from admission's newest snapshot,
   then the tail), in this process: the configuration with its real gangs, the ledgers (what
   each pool holds and waits for). Nothing is published (the decisions the fold makes again
   are dropped).
2. Plan the file against that configuration (`change_plan`, the same as `apply`; a file that
   breaks a rule is refused the same way).
3. Fold the plan's events (the tree service's `decide` of each command) into a copy of the
   state, and compute every tree's entitlements before and after with admission's own code
   (`entitle.compute_for`), from the same ledgers.
4. On each of the two states (without the change, with it), what comes next (`outlook`):
   admission's next cycle (`decide.run_cycles` after a tick at the fold's time: no timer fires),
   its decisions applied; then the pools over their entitlement and the preemption pass each
   tree's cycle is followed by (`preemption.domain.passes.preemption_pass`), its requests
   applied; and, where the tree has a grace period, the pass after it (`grace` seconds later,
   nothing else changed: the pools still over give back then).

5. `poolwise whatif` with `steps`: the steps run on a copy of the changed state
   (`services.tools.cli.whatif_steps`), as `scenario run` runs them, their expectations checked.

The passes start with no memory of earlier ones (since when a pool is over): a pool found over
is over "since now", so what it gives back after the grace may in truth be asked for sooner
(the live service may have counted part of the grace already). What is picked is the same.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from services.admission.domain.state import AdmissionState
from services.tree.domain.change_plan import Plan, plan_changes
from services.tree.domain.cluster import ClusterConfig

if TYPE_CHECKING:
    from services.tools.scenario.format import Scenario
    from services.tools.scenario.report import ScenarioReport

PoolKind = tuple[str, str, str]  # (tree, path, kind)
Admission = tuple[str, str, str]  # (tree, gang, pool)


@dataclass(frozen=True)
class Over:
    """A leaf pool holding more than its entitlement (one bucket: non_slack or slack) after the
    next cycle, per kind, and its admitted gangs (the ones preemption chooses from)."""

    tree: str
    pool: str
    bucket: str
    allocation: dict[str, float]
    entitlement: dict[str, float]
    excess: dict[str, float]
    gangs: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"tree": self.tree, "pool": self.pool, "bucket": self.bucket, "allocation": self.allocation,
                "entitlement": self.entitlement, "excess": self.excess, "gangs": list(self.gangs)}


@dataclass(frozen=True)
class Pick:
    """A gang preemption would ask back: its tasks, why (`over_entitlement` or `lower_priority`),
    and after how many seconds of log time (0: the pass after the next cycle; the tree's grace)."""

    tree: str
    pool: str
    gang: str
    tasks: tuple[str, ...]
    cause: str
    after: float
    reason: str

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.tree, self.pool, self.gang)

    def to_dict(self) -> dict[str, Any]:
        return {"tree": self.tree, "pool": self.pool, "gang": self.gang, "tasks": list(self.tasks),
                "cause": self.cause, "after": self.after, "reason": self.reason}


@dataclass(frozen=True)
class Outlook:
    """What comes next on one state: the gangs the next cycle admits, the pools then over their
    entitlement, and the gangs preemption picks."""

    admitted: tuple[Admission, ...] = ()
    over: tuple[Over, ...] = ()
    picks: tuple[Pick, ...] = ()


@dataclass(frozen=True)
class WhatIf:
    """A plan; every pool's entitlement per kind before and after it; what comes next without the
    change and with it."""

    plan: Plan
    before: dict[PoolKind, float]
    after: dict[PoolKind, float]
    without: Outlook = field(default_factory=Outlook)
    outlook: Outlook = field(default_factory=Outlook)
    steps: ScenarioReport | None = None  # the file's steps run after the change (`poolwise whatif`)

    @property
    def admitted_before(self) -> tuple[Admission, ...]:
        return self.without.admitted

    @property
    def admitted_after(self) -> tuple[Admission, ...]:
        return self.outlook.admitted

    def admissions(self) -> list[dict[str, Any]]:
        """The gangs the next cycle would admit after the change, each saying whether it would be
        admitted without it too (the cycle was due anyway)."""
        anyway = set(self.without.admitted)
        return [{"tree": t, "gang": g, "pool": p, "without_the_change": (t, g, p) in anyway}
                for t, g, p in self.outlook.admitted]

    def over_entitlement(self) -> list[dict[str, Any]]:
        """The pools over their entitlement after the change's cycle, each saying whether it would
        be without the change too."""
        anyway = {(o.tree, o.pool, o.bucket) for o in self.without.over}
        return [{**o.to_dict(), "without_the_change": (o.tree, o.pool, o.bucket) in anyway} for o in self.outlook.over]

    def preemptions(self) -> list[dict[str, Any]]:
        """The gangs preemption would ask back after the change, each saying whether it would
        without the change too."""
        anyway = {p.key for p in self.without.picks}
        return [{**p.to_dict(), "without_the_change": p.key in anyway} for p in self.outlook.picks]

    def rows(self) -> list[dict[str, Any]]:
        """One row per tree, pool and kind, in that order: before, after, and whether it changes."""
        keys = sorted({*self.before, *self.after})
        return [{"tree": t, "pool": p, "kind": k, "before": self.before.get((t, p, k)),
                 "after": self.after.get((t, p, k)), "changed": self.before.get((t, p, k)) != self.after.get((t, p, k))}
                for t, p, k in keys]

    def to_dict(self) -> dict[str, Any]:
        """The predictions as a document (what `--json` adds to the plan's outcome)."""
        found: dict[str, Any] = {"entitlement": self.rows(), "admitted": self.admissions(),
                                 "over_entitlement": self.over_entitlement(), "preemptions": self.preemptions()}
        if self.steps is not None:
            found["steps"] = self.steps.model_dump(mode="json")
        return found


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


def clone(state: AdmissionState) -> AdmissionState:
    """A copy of `state` to change apart from it: everything copied but the finished gangs and
    their tasks, which are shared (nothing changes a finished gang: what comes for it is refused
    by its state, and forgetting it takes it out of the copy's own dicts). The finished are most
    of a long-lived state (kept `gang_retention` of log time): a full copy of a state of 100k
    gangs took ~10 s, this one costs what is going on. The memoised engines and views are not
    copied (made again)."""
    from services.admission.domain.model import FINISHED

    # the timers' heaps: tuples of numbers and names, copied as lists (their items shared)
    timers, forgets = state.timer_heap, state.forget_heap
    memo: dict[int, Any] = {id(forgets): list(forgets), id(timers): list(timers)}
    for rt in state.trees.values():
        going: list[Any] = []
        for gang in rt.gangs.values():
            if gang.state in FINISHED:
                memo[id(gang)] = gang
                for task in gang.tasks:
                    memo[id(task)] = task
            else:
                going.append(gang)
        copy.deepcopy(going, memo)  # the unfinished gangs and their tasks, first
        # then every gang and task by id: the copies made, the finished shared (a dict made
        # here costs a fraction of what deepcopy takes to walk one)
        memo[id(rt.gangs)] = {name: memo.get(id(gang), gang) for name, gang in rt.gangs.items()}
        memo[id(rt.tasks)] = {name: memo.get(id(task), task) for name, task in rt.tasks.items()}
    return copy.deepcopy(state, memo)


def changed(state: AdmissionState, plan: Plan) -> AdmissionState:
    """A copy of `state` with the plan's commands decided and their events folded, as the tree
    service and then admission would."""
    from services.tree.domain.decide import Accepted, decide

    after = clone(state)
    for command in plan.commands:
        decision = decide(after.config, command)
        assert isinstance(decision, Accepted), decision  # the plan was made by trying each one
        for event in decision.events:
            after.apply(event, after.last_seq + 1, after.now)
    return after


def what_if(state: AdmissionState, target: ClusterConfig, prune: bool, steps: Scenario | None = None) -> WhatIf:
    """The plan from `state`'s configuration to `target`, the entitlements before and after it,
    and what comes next without it and with it; with `steps`, the report of those steps run on
    the changed state (`whatif_steps`). `state` is used up (the outlook without the change is
    computed on it): give a copy if it is needed after."""
    plan = plan_changes(state.config, target, prune)
    if not plan.ok:
        return WhatIf(plan, {}, {})
    after = changed(state, plan)
    report = None
    if steps is not None and steps.steps:
        from services.tools.cli.whatif_steps import StepRun

        report = StepRun(clone(after), steps).run()
    before, later = entitlements(state), entitlements(after)
    return WhatIf(plan, before, later, outlook(state), outlook(after), report)


def outlook(state: AdmissionState) -> Outlook:
    """What comes next on `state` (changed: give a copy): admission's next cycle, the pools then
    over their entitlement, preemption's picks (see the module doc)."""
    admitted = next_cycle(state)
    return Outlook(admitted, over_entitlement(state), next_passes(state))


def next_cycle(state: AdmissionState) -> tuple[Admission, ...]:
    """The gangs an admission cycle run now on `state` admits (admission's own `run_cycles`,
    after a tick at the state's time: no timer fires), its decisions applied to `state`."""
    from events import ClockTicked, GangAdmitted
    from services.admission.domain.decide import run_cycles

    seq = state.last_seq + 1
    state.apply(ClockTicked(), seq, state.now)
    return tuple((o.event.tree, o.event.gang, o.event.pool) for o in run_cycles(state, seq)
                 if isinstance(o.event, GangAdmitted))


def over_entitlement(state: AdmissionState) -> tuple[Over, ...]:
    """Every leaf pool's excess over the entitlement of its last cycle, per bucket (what the
    preemption pass looks at first, before requests outstanding are counted as given back)."""
    from services.admission.domain.vectors import exceeds
    from services.preemption.domain.holdings import Holdings

    out: list[Over] = []
    for tree in sorted(state.trees):
        rt = state.trees[tree]
        holdings = Holdings.of(rt)
        for pool in sorted(rt.ledgers):
            entitlement = rt.entitlements.get(pool)
            if entitlement is None:
                continue
            ledger = rt.ledgers[pool]
            for bucket, held, target in (("non_slack", ledger.non_slack, entitlement.non_slack_entitlement),
                                         ("slack", ledger.slack, entitlement.slack_entitlement)):
                excess = exceeds(held, target)
                if excess:
                    gangs = tuple(g.id for g in holdings.of_pool(pool) if g.revocable == (bucket == "slack"))
                    out.append(Over(tree, pool, bucket, {k: held.get(k, 0.0) for k in sorted(excess)},
                                    {k: target.get(k, 0.0) for k in sorted(excess)},
                                    {k: excess[k] for k in sorted(excess)}, gangs))
    return tuple(out)


def next_passes(state: AdmissionState) -> tuple[Pick, ...]:
    """The gangs preemption asks back: the pass after the cycle just run (now), its requests
    applied to `state`; then, in a tree with a grace period, the pass `grace` seconds later."""
    from events import PreemptionRequested
    from services.preemption.domain.model import TreeMemory
    from services.preemption.domain.passes import preemption_pass

    picks: list[Pick] = []
    for tree in sorted(state.trees):
        memory = TreeMemory()
        grace = state.config.tree(tree).options.preemption.grace
        for after in (0.0, grace) if grace > 0 else (0.0,):
            result = preemption_pass(state, tree, state.now + after, memory)
            for preemption in result.preemptions:
                event = preemption.event
                picks.append(Pick(tree, event.pool, event.gang, tuple(event.tasks), preemption.cause, after,
                                  event.reason))
                state.apply(PreemptionRequested.model_validate(event.model_dump()), state.last_seq + 1, state.now)
    return tuple(picks)


async def live_state(url: str) -> AdmissionState:
    """Admission's fold of the live log, from its newest snapshot and the tail after it (without
    explain's notes: not needed)."""
    from services.tools.cli.folds import fold_state

    state, _ = await fold_state(url)
    return state
