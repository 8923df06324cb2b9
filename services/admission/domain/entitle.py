"""From admission's state to the entitlement engine's input, and its result to the wire event.

The tree service's domain resolves pool options and capacity; admission's ledgers give each
leaf's allocation and demand; the entitlement engine does the rest (DOMAIN §3). The engine is
built once per tree configuration and gets fresh leaf numbers every cycle."""

from __future__ import annotations

from typing import cast

from events import EntitlementsComputed, PoolEntitlement
from services.admission.domain.entitlement import EntitlementEngine
from services.admission.domain.entitlement.model import JobDemand, LeafUsage, PoolInput, TreeInput
from services.admission.domain.model import ADMITTED, PENDING, TERMINAL
from services.admission.domain.state import AdmissionState, TreeRuntime
from services.admission.domain.vectors import Vector, add_into
from services.tree.domain.effective import capacity, effective_pools

ROUND = 9  # digits kept on the wire: enough for 0.0009 tolerance, stable across platforms


def _usage(rt: TreeRuntime, path: str, jobs: dict[str, dict[str, Vector]] | None) -> LeafUsage:
    """What one leaf holds and needs now (DRF: with its jobs)."""
    ledger = rt.ledgers.get(path)
    job_demands = None if jobs is None else tuple(JobDemand(j, d) for j, d in sorted(jobs.get(path, {}).items()))
    if ledger is None:
        return LeafUsage(jobs=job_demands)
    return LeafUsage(allocation=ledger.non_slack, demand=dict(ledger.demand), revocable_allocation=dict(ledger.slack),
                     revocable_demand=dict(ledger.slack_demand), jobs=job_demands)


def tree_input(state: AdmissionState, tree: str) -> TreeInput:
    """The engine's whole input for one tree, as the state stands."""
    config = state.config.tree(tree)
    total, revocable = capacity(state.config, tree)
    rt = state.runtime(tree)
    jobs = _job_demands(rt) if config.options.policy == "dominant" else None
    pools: list[PoolInput] = []
    for path, view in effective_pools(state.config, tree).items():
        if path == "/":
            continue
        usage = _usage(rt, path, jobs) if config.pools[path].is_leaf else LeafUsage()
        pools.append(PoolInput(path=path, reservation=view.reservation, limit=view.limit, share=view.share,
                               static=view.static, slack_limit=view.slack_limit, usage=usage))
    return TreeInput(kinds=tuple(config.kinds), capacity=total, pools=tuple(pools), revocable_capacity=revocable,
                     policy=config.options.policy, allocation_slack=config.options.allocation_slack)


def _engine(state: AdmissionState, tree: str) -> tuple[EntitlementEngine, list[str], TreeInput]:
    """The tree's engine, built once per configuration (memoised in the tree state's cache, which
    config, host and pool-structure changes empty); its leaves get fresh numbers every cycle."""
    key = ("entitlement_engine", tree)
    found = cast(tuple[EntitlementEngine, list[str], TreeInput] | None, state.config.cache.get(key))
    if found is None:
        given = tree_input(state, tree)
        engine = EntitlementEngine(given)
        found = (engine, engine.leaves, given)
        state.config.cache[key] = found
        return found
    engine, leaves, given = found
    rt = state.runtime(tree)
    jobs = _job_demands(rt) if given.policy == "dominant" else None
    for leaf in leaves:
        engine.set_usage(leaf, _usage(rt, leaf, jobs))
    return engine, leaves, given


def _job_demands(rt: TreeRuntime) -> dict[str, dict[str, Vector]]:
    """Per leaf, per job: what its non-revocable gangs hold (live tasks only) and need (DRF's leaves)."""
    result: dict[str, dict[str, Vector]] = {}
    for gang in rt.gangs.values():
        if gang.revocable or gang.state not in (ADMITTED, PENDING):
            continue
        acc = result.setdefault(gang.pool, {}).setdefault(gang.job, {})
        if gang.state == PENDING:
            add_into(acc, gang.resources)
            continue
        for task in gang.tasks:
            if task.state not in TERMINAL and task.state != "pending":
                add_into(acc, task.resources)
    return result


def compute_for(state: AdmissionState, tree: str) -> EntitlementsComputed:
    """Every pool's entitlement in `tree`, as the event the cycle publishes."""
    engine, _leaves, given = _engine(state, tree)
    result = engine.compute()
    # model_construct: the values come from our own engine, already of the right types.
    pools = [
        PoolEntitlement.model_construct(
            path=path, entitlement=_r(p.entitlement), non_slack_entitlement=_r(p.non_slack_entitlement),
            slack_entitlement=_r(p.slack_entitlement), fair_share=round(p.fair_share, ROUND),
            usage_share=round(p.usage_share, ROUND), demand_share=round(p.demand_share, ROUND),
            dominant_kind=p.dominant_kind)
        for path, p in sorted(result.items())
    ]
    return EntitlementsComputed(tree=tree, capacity=_r(dict(given.capacity)),
                                slack_capacity=_r(dict(given.revocable_capacity)), pools=pools,
                                alerts=[str(a) for a in result.alerts])


def _r(values: dict[str, float]) -> dict[str, float]:
    return {k: round(v, ROUND) for k, v in values.items()}
