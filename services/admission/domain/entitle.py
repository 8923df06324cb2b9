"""From admission's state to the entitlement engine's input, and its result to the wire event.

The tree service's domain resolves pool options and capacity; admission's ledgers give each
leaf's allocation and demand; the entitlement engine does the rest (DOMAIN §3). The engine is
built once per tree configuration and gets fresh leaf numbers every cycle."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

from events import EntitlementsComputed
from services.admission.domain.entitlement import EntitlementEngine
from services.admission.domain.entitlement.model import JobDemand, LeafUsage, PoolInput, TreeInput
from services.admission.domain.model import ADMITTED, PENDING, TERMINAL, Ledger
from services.admission.domain.state import AdmissionState, TreeRuntime
from services.admission.domain.trusted import pool_entitlement
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


@dataclass(slots=True)
class _Prepared:
    """A tree's engine, with what each leaf's numbers were made of when last written to it."""

    engine: EntitlementEngine
    leaves: list[str]
    given: TreeInput
    written: dict[str, tuple[Vector, ...]] = field(default_factory=dict)


def _engine(state: AdmissionState, tree: str) -> tuple[EntitlementEngine, list[str], TreeInput]:
    """The tree's engine, built once per configuration (memoised in the tree state's cache, which
    config, host and pool-structure changes empty); its leaves get fresh numbers every cycle.
    (Under `per_resource`, only the leaves whose ledger changed since they were last written:
    the same numbers would be written again.)"""
    key = ("entitlement_engine", tree)
    found = cast(_Prepared | None, state.config.cache.get(key))
    if found is None:
        given = tree_input(state, tree)
        engine = EntitlementEngine(given)
        state.config.cache[key] = _Prepared(engine, engine.leaves, given)
        return engine, engine.leaves, given
    engine, leaves, given = found.engine, found.leaves, found.given
    rt = state.runtime(tree)
    if given.policy == "dominant":
        jobs = _job_demands(rt)
        for leaf in leaves:
            engine.set_usage(leaf, _usage(rt, leaf, jobs))
        return engine, leaves, given
    written = found.written
    for leaf in leaves:
        ledger = rt.ledgers.get(leaf)
        made_of = _made_of(ledger)
        if written.get(leaf) != made_of:
            engine.set_usage(leaf, _usage(rt, leaf, None))
            written[leaf] = tuple(dict(v) for v in made_of)
    return engine, leaves, given


def _made_of(ledger: Ledger | None) -> tuple[Vector, ...]:
    """What a leaf's `LeafUsage` is computed from (without jobs): equal ones give equal numbers."""
    if ledger is None:
        return ()
    return ledger.allocation, ledger.slack, ledger.demand, ledger.slack_demand


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
    # not validated again: the values come from our own engine, already of the right types
    kinds = result.kinds
    pools = [
        pool_entitlement(path, _per_kind(kinds, entitlement), _per_kind(kinds, non_slack), _per_kind(kinds, slack),
                         _rounded(fair), _rounded(usage), _rounded(demand), dominant)
        for path, entitlement, non_slack, slack, fair, usage, demand, dominant in sorted(result.rows())
    ]
    return EntitlementsComputed(tree=tree, capacity=_r(dict(given.capacity)),
                                slack_capacity=_r(dict(given.revocable_capacity)), pools=pools,
                                alerts=[str(a) for a in result.alerts])


def _r(values: dict[str, float]) -> dict[str, float]:
    return {k: _rounded(v) for k, v in values.items()}


def _per_kind(kinds: tuple[str, ...], values: list[float]) -> dict[str, float]:
    return {k: _rounded(v) for k, v in zip(kinds, values, strict=True)}


def _rounded(value: float) -> float:
    """`round(value, ROUND)`, memoised: a cycle rounds every number of every pool, most of them
    the same as the cycle before or as another pool's, and `round` to digits is slow. (Equal
    floats other than zeros are the same number; a zero is returned as it is, sign included,
    which is what `round` gives.)"""
    if value == 0.0:
        return value
    found = _ROUNDED.get(value)
    if found is None:
        if len(_ROUNDED) >= _ROUNDED_KEPT:
            _ROUNDED.clear()
        found = _ROUNDED[value] = round(value, ROUND)
    return found


_ROUNDED: dict[float, float] = {}
_ROUNDED_KEPT = 65_536
