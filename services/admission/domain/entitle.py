"""From admission's state to the entitlement engine's input, and its result to the wire event.

The tree service's domain resolves pool options and capacity; admission's ledgers give each
leaf's allocation and demand; the entitlement engine does the rest (DOMAIN §3). The engine is
built once per tree configuration and gets fresh leaf numbers every cycle."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

import numpy as np

from events import EntitlementsComputed, PoolEntitlement
from services.admission.domain.entitlement import EntitlementEngine
from services.admission.domain.entitlement.arrays import positive_amounts
from services.admission.domain.entitlement.model import JobDemand, LeafUsage, PoolInput, TreeInput
from services.admission.domain.model import ADMITTED, PENDING, TERMINAL, Ledger
from services.admission.domain.rounding import round_matrix
from services.admission.domain.state import AdmissionState, TreeRuntime
from services.admission.domain.trusted import entitlements_computed, pool_entitlement
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
    """A tree's engine, with each leaf's ledger (and how many changes it had seen) when its numbers
    were last written to the engine."""

    engine: EntitlementEngine
    leaves: list[str]
    given: TreeInput
    written: dict[str, tuple[Ledger | None, int]] = field(default_factory=dict)  # leaf -> its ledger, `changes`
    order: list[int] | None = None  # the engine's rows in path order (the event lists pools so)
    last: EntitlementsComputed | None = None  # what the engine gave last, while no leaf changed since


def _engine(state: AdmissionState, tree: str) -> _Prepared:
    """The tree's engine, built once per configuration (memoised in the tree state's cache, which
    config, host and pool-structure changes empty); its leaves get fresh numbers every cycle.
    (Under `per_resource`, only the leaves whose ledger changed since they were last written
    (`Ledger.changes`): the same numbers would be written again; they are written in one go.)"""
    key = ("entitlement_engine", tree)
    found = cast(_Prepared | None, state.config.cache.get(key))
    if found is None:
        given = tree_input(state, tree)
        engine = EntitlementEngine(given)
        found = state.config.cache[key] = _Prepared(engine, engine.leaves, given)
        ledgers = state.runtime(tree).ledgers
        for leaf in found.leaves:  # written with the input just given
            ledger = ledgers.get(leaf)
            found.written[leaf] = (ledger, 0 if ledger is None else ledger.changes)
        return found
    engine, leaves, given = found.engine, found.leaves, found.given
    rt = state.runtime(tree)
    if given.policy == "dominant":
        jobs = _job_demands(rt)
        for leaf in leaves:
            engine.set_usage(leaf, _usage(rt, leaf, jobs))
        found.last = None
        return found
    written = found.written
    ledgers = rt.ledgers
    changed: list[str] = []
    for leaf in leaves:
        ledger = ledgers.get(leaf)
        seen = written.get(leaf)
        if seen is None or seen[0] is not ledger or (ledger is not None and seen[1] != ledger.changes):
            changed.append(leaf)
            written[leaf] = (ledger, 0 if ledger is None else ledger.changes)
    if changed:
        # `set_usage(leaf, _usage(rt, leaf, None))` of each, the same numbers
        kinds = given.kinds
        rows: list[tuple[list[float], list[float], list[float], list[float]]] = []
        for leaf in changed:
            ledger = ledgers.get(leaf)
            rows.append(_EMPTY_ROWS[kinds] if ledger is None else _usage_rows(ledger, kinds))
        engine.set_usages(changed, rows)
        found.last = None
    return found


def _usage_rows(ledger: Ledger, kinds: tuple[str, ...]) -> tuple[list[float], list[float], list[float], list[float]]:
    """What `write_usage` writes for `_usage(rt, leaf, None)` of a leaf with this ledger: per kind
    of `kinds`, the non-slack allocation, demand, slack allocation and slack demand (a missing or
    non-positive amount: 0.0)."""
    allocation, slack = ledger.allocation.get, ledger.slack.get
    non_slack: list[float] = []
    for kind in kinds:
        held = allocation(kind)
        value = None if held is None else held - slack(kind, 0.0)
        non_slack.append(float(value) if value is not None and value > 0.0 else 0.0)
    return non_slack, _positive(ledger.demand, kinds), _positive(ledger.slack, kinds), \
        _positive(ledger.slack_demand, kinds)


def _positive(values: Vector, kinds: tuple[str, ...]) -> list[float]:
    if not values:
        return _EMPTY_ROWS[kinds][0]  # read only
    return positive_amounts(values, kinds)


class _EmptyRows(dict[tuple[str, ...], tuple[list[float], list[float], list[float], list[float]]]):
    """Per kinds: the rows of a leaf with no ledger (zeros)."""

    def __missing__(self, kinds: tuple[str, ...]) -> tuple[list[float], list[float], list[float], list[float]]:
        zeros = [0.0] * len(kinds)
        found = self[kinds] = (zeros, zeros, zeros, zeros)
        return found


_EMPTY_ROWS = _EmptyRows()


def _job_demands(rt: TreeRuntime) -> dict[str, dict[str, Vector]]:
    """Per leaf, per job: what its non-revocable gangs hold (live tasks only) and need (DRF's leaves)."""
    result: dict[str, dict[str, Vector]] = {}
    for gang in rt.live.values():
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
    prepared = _engine(state, tree)
    if prepared.last is not None:  # the same input as last time (a quiet tree): the same event
        return prepared.last
    result = prepared.engine.compute()
    given = prepared.given
    kinds = result.kinds
    # Every number rounded to ROUND digits at once (`rounding`: the floats `round` gives), read
    # in path order; not validated again: the values come from our own engine, already of the
    # right types.
    numbers = round_matrix(np.hstack((result.entitlement_matrix, result.non_slack_matrix, result.slack_matrix,
                                      result.shares_matrix)), ROUND)
    dominant = result.dominant_index.tolist()
    paths = result.paths
    order = prepared.order
    if order is None or len(order) != len(paths):
        order = prepared.order = sorted(range(len(paths)), key=paths.__getitem__)
    build = _row_builder(kinds)
    pools = [build(paths[row], numbers[row], kinds[dominant[row]] if dominant[row] >= 0 else None) for row in order]
    prepared.last = entitlements_computed(tree, _r(dict(given.capacity)), _r(dict(given.revocable_capacity)),
                                          pools, [str(a) for a in result.alerts])
    return prepared.last


_RowBuilder = Callable[[str, list[float], str | None], PoolEntitlement]


def _row_builder(kinds: tuple[str, ...]) -> _RowBuilder:
    """For the rows of `compute_for` (per kind: entitlement, non-slack, slack; then the fair, usage
    and demand shares): `pool_entitlement(path, dict(zip(kinds, row[:k])), dict(zip(kinds,
    row[k:2k])), dict(zip(kinds, row[2k:3k])), row[3k], row[3k + 1], row[3k + 2], dominant)`, with
    each map written as a dict display (three times faster than `dict(zip(...))`). Made once per
    tuple of kinds."""
    found = _BUILDERS.get(kinds)
    if found is None:
        k = len(kinds)

        def display(first: int) -> str:
            return "{" + ", ".join(f"{kind!r}: row[{first + i}]" for i, kind in enumerate(kinds)) + "}"

        source = (f"lambda path, row, dominant: pool_entitlement(path, {display(0)}, {display(k)}, "
                  f"{display(2 * k)}, row[{3 * k}], row[{3 * k + 1}], row[{3 * k + 2}], dominant)")
        found = _BUILDERS[kinds] = cast(_RowBuilder, eval(source, {"pool_entitlement": pool_entitlement}))
    return found


_BUILDERS: dict[tuple[str, ...], _RowBuilder] = {}


def _r(values: dict[str, float]) -> dict[str, float]:
    return {k: float(round(v, ROUND)) for k, v in values.items()}
