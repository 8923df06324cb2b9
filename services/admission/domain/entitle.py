"""From admission's state to the entitlement engine's input, and its result to the wire event.

The tree service's domain resolves pool options and capacity; admission's ledgers give each
leaf's allocation and demand; `entitlement.compute_entitlements` does the rest (DOMAIN §3)."""

from __future__ import annotations

from events import EntitlementsComputed, PoolEntitlement
from services.admission.domain.entitlement import compute_entitlements
from services.admission.domain.entitlement.model import JobDemand, LeafUsage, PoolInput, TreeInput
from services.admission.domain.model import ADMITTED, PENDING
from services.admission.domain.state import AdmissionState, TreeRuntime
from services.admission.domain.vectors import Vector, add_into
from services.tree.domain.effective import capacity, effective_pools

ROUND = 9  # digits kept on the wire: enough for 0.0009 tolerance, stable across platforms


def tree_input(state: AdmissionState, tree: str) -> TreeInput:
    config = state.config.tree(tree)
    total, revocable = capacity(state.config, tree)
    rt = state.runtime(tree)
    dominant = config.options.policy == "dominant"
    jobs = _job_demands(rt) if dominant else {}
    pools: list[PoolInput] = []
    for path, view in effective_pools(state.config, tree).items():
        if path == "/":
            continue
        usage = LeafUsage()
        if config.pools[path].is_leaf:
            ledger = rt.ledgers.get(path)
            if ledger is not None:
                usage = LeafUsage(allocation=ledger.non_slack, demand=dict(ledger.demand),
                                  revocable_allocation=dict(ledger.slack),
                                  revocable_demand=dict(ledger.slack_demand),
                                  jobs=tuple(JobDemand(job, d) for job, d in sorted(jobs.get(path, {}).items()))
                                  if dominant else None)
            elif dominant:
                usage = LeafUsage(jobs=())
        pools.append(PoolInput(path=path, reservation=view.reservation, limit=view.limit, share=view.share,
                               static=view.static, slack_limit=view.slack_limit, usage=usage))
    return TreeInput(kinds=tuple(config.kinds), capacity=total, pools=tuple(pools), revocable_capacity=revocable,
                     policy=config.options.policy, allocation_slack=config.options.allocation_slack)


def _job_demands(rt: TreeRuntime) -> dict[str, dict[str, Vector]]:
    """Per leaf, per job: what its non-revocable gangs hold and need (DRF's leaves)."""
    result: dict[str, dict[str, Vector]] = {}
    for gang in rt.gangs.values():
        if gang.revocable or gang.state not in (ADMITTED, PENDING):
            continue
        add_into(result.setdefault(gang.pool, {}).setdefault(gang.job, {}), gang.resources)
    return result


def compute_for(state: AdmissionState, tree: str) -> EntitlementsComputed:
    """Every pool's entitlement in `tree`, as the event the cycle publishes."""
    given = tree_input(state, tree)
    result = compute_entitlements(given)
    pools = [
        PoolEntitlement(path=path, entitlement=_r(p.entitlement), non_slack_entitlement=_r(p.non_slack_entitlement),
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
