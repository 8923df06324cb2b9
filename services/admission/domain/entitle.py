"""From admission's state to the entitlement engine's input, and its result to the wire event.

The tree service's domain resolves pool options and capacity; admission's ledgers give each
leaf's allocation and demand; the entitlement engine does the rest (DOMAIN §3). The engine is
built once per tree configuration and gets fresh leaf numbers every cycle."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, cast, runtime_checkable

import numpy as np
import numpy.typing as npt

from events import EntitlementsComputed, PoolEntitlement
from events.decisions import ENTITLEMENT_PART_POOLS
from services.admission.domain.entitlement import EntitlementEngine
from services.admission.domain.entitlement.arrays import positive_amounts
from services.admission.domain.entitlement.model import (
    JOB_POLICIES,
    FloatArray,
    IntArray,
    JobDemand,
    LeafUsage,
    PoolInput,
    TreeInput,
)
from services.admission.domain.model import ADMITTED, PENDING, TERMINAL, Ledger
from services.admission.domain.rounding import round_matrix
from services.admission.domain.runtime import TreeRuntime
from services.admission.domain.state import AdmissionState
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
    jobs = _job_demands(rt) if config.options.policy in JOB_POLICIES else None
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
    held: list[tuple[str, Ledger]] | None = None  # the leaves with a ledger (`rt.ledgers`, in leaf order)
    held_changes: list[int] = field(default_factory=list)  # each one's `changes` when last written
    held_count: int = -1  # len(rt.ledgers) when `held` was listed (ledgers are only ever added)
    published: _Published | None = None  # the numbers of the last parts `compute_cycle` gave
    rank: list[int] | None = None  # each engine row's place in path order


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
    if given.policy in JOB_POLICIES:
        jobs = _job_demands(rt)
        for leaf in leaves:
            engine.set_usage(leaf, _usage(rt, leaf, jobs))
        found.last = None
        return found
    ledgers = rt.ledgers
    changed = _changed_leaves(found, ledgers)
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


def _changed_leaves(found: _Prepared, ledgers: dict[str, Ledger]) -> list[str]:
    """The leaves whose ledger changed (or appeared) since they were last written to the engine,
    in leaf order, marked written. A ledger, once made, stays the leaf's (`state._ledger`): while
    `rt.ledgers` holds as many as when they were listed, only their `changes` are read (no dict
    lookup per leaf: 100k leaves cost about 3 ms this way)."""
    held = found.held
    if held is None or found.held_count != len(ledgers):
        written = found.written
        changed: list[str] = []
        for leaf in found.leaves:
            ledger = ledgers.get(leaf)
            seen = written.get(leaf)
            if seen is None or seen[0] is not ledger or (ledger is not None and seen[1] != ledger.changes):
                changed.append(leaf)
                written[leaf] = (ledger, 0 if ledger is None else ledger.changes)
        held = found.held = [(leaf, ledgers[leaf]) for leaf in found.leaves if leaf in ledgers]
        found.held_changes = [written[leaf][1] for leaf, _ in held]
        found.held_count = len(ledgers)
        return changed
    now = [ledger.changes for _, ledger in held]
    before = found.held_changes
    if now == before:
        return []
    found.held_changes = now
    written = found.written
    out: list[str] = []
    for i in [i for i, (a, b) in enumerate(zip(now, before, strict=True)) if a != b]:
        leaf, ledger = held[i]
        written[leaf] = (ledger, now[i])
        out.append(leaf)
    return out


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


# -- what a cycle publishes: the whole map, or what changed in parts ------------------------------------

PART_POOLS = ENTITLEMENT_PART_POOLS  # pools (and removed paths) per event at most
WHOLE_POOLS = ENTITLEMENT_PART_POOLS  # a tree of at most this many pools is written whole, in one event
PART_BYTES = 256 * 1024  # about this many bytes of pools per event at most (NATS: 1 MiB a message)


@dataclass(slots=True)
class CycleEntitlements:
    """What one cycle computes for a tree: the events it publishes (`EntitlementsComputed`, one
    or several parts), and the tree's whole entitlement map once they are folded (what the cycle
    decides on)."""

    events: list[EntitlementsComputed]
    entitlements: dict[str, PoolEntitlement]


@dataclass(slots=True, eq=False)
class _Published:
    """The numbers of the parts `compute_cycle` gave last, in the engine's row order: the raw
    matrices (entitlement, non-slack, slack per kind, the three shares), the rounded numbers as
    published (those four side by side) and the dominant kinds. They are the tree's entitlement
    map while that map is the one those parts made (`EntitlementMap.last` is their last part)."""

    raw: tuple[FloatArray, ...]
    rounded: FloatArray
    dominant: IntArray
    token: object = None


def compute_cycle(state: AdmissionState, tree: str) -> CycleEntitlements:
    """The entitlements one admission cycle publishes for `tree`, and the map it decides on.

    A tree of at most `WHOLE_POOLS` pools gets one event with its whole map (`compute_for`: as v1
    did). A larger one gets the pools whose rounded numbers differ from the tree's entitlement
    map as the fold holds it (`TreeRuntime.entitlements`) and the paths that left it, split into
    parts; every pool (`replace`) when every pool changed, the map is empty, or the capacity
    changed since its last computation (a pool's `pool_entitlements` rows name the capacity).
    Folding the parts into the map gives the whole computation, whatever the map held.

    Cost: while the map is the one this function's previous parts made (the usual case: a cycle's
    decisions are applied at once), the previous numbers are kept as matrices, so a cycle
    compares the engine's raw numbers in one vectorised pass, rounds only the rows that moved,
    and builds models only for those; otherwise every pool is compared with the map."""
    prepared = _engine(state, tree)
    if len(prepared.engine.paths) <= WHOLE_POOLS:  # the root `/` is one of the event's pools
        whole = compute_for(state, tree)
        prepared.published = None
        return CycleEntitlements([whole], {p.path: p for p in whole.pools})
    rt = state.runtime(tree)
    current = rt.entitlements
    result = prepared.engine.compute()
    given = prepared.given
    kinds = result.kinds
    raw = (result.entitlement_matrix, result.non_slack_matrix, result.slack_matrix, result.shares_matrix)
    dominant = result.dominant_index
    paths = result.paths
    capacity, slack_capacity = _r(dict(given.capacity)), _r(dict(given.revocable_capacity))
    alerts = [str(a) for a in result.alerts]
    build = _row_builder(kinds)
    previous = prepared.published
    last = getattr(current, "last", None)
    pools: list[PoolEntitlement]
    removed: list[str] = []
    if previous is not None and last is previous.token and _same_shapes(raw, previous.raw):
        # the map is what the previous parts made: compare matrices
        moved = np.flatnonzero(_rows_differ(raw, previous.raw) | (dominant != previous.dominant))
        rounded = previous.rounded
        pools = []
        if moved.size:
            fresh = np.asarray(round_matrix(np.hstack([m[moved] for m in raw]), ROUND),
                               dtype=np.float64).reshape(moved.size, rounded.shape[1])
            differs = (fresh != rounded[moved]).any(axis=1) | (dominant[moved] != previous.dominant[moved])
            rounded[moved] = fresh
            rows = moved[differs].tolist()
            if rows:
                rank = _rank(prepared, paths)
                rows.sort(key=rank.__getitem__)
                values = rounded[rows].tolist()
                dom = dominant[rows].tolist()
                pools = [build(paths[row], value, kinds[d] if d >= 0 else None)
                         for row, value, d in zip(rows, values, dom, strict=True)]
        replace = len(pools) == len(paths)
        previous.raw, previous.dominant = raw, dominant
    else:
        side_by_side = np.hstack(raw)
        every_value = round_matrix(side_by_side, ROUND)
        rounded = np.array(every_value, dtype=np.float64).reshape(side_by_side.shape)
        every_dom: list[int] = dominant.tolist()
        every = [build(paths[row], every_value[row], kinds[every_dom[row]] if every_dom[row] >= 0 else None)
                 for row in _path_order(prepared, paths)]
        same_capacity = (isinstance(last, _HasCapacity) and dict(last.capacity) == capacity
                         and dict(last.slack_capacity) == slack_capacity)
        if not current or not same_capacity:
            pools = every
        else:
            pools = [pool for pool in every if not _same_pool(current.get(pool.path), pool)]
            added = sum(1 for pool in pools if pool.path not in current)
            if len(current) + added > len(every):  # some of the map is gone from the tree
                names = {pool.path for pool in every}
                removed = sorted(path for path in current if path not in names)
        replace = len(pools) == len(every)
        if replace:
            removed = []
        previous = prepared.published = _Published(raw, rounded, dominant)
    events = _parts(tree, capacity, slack_capacity, pools, removed, replace, alerts, len(kinds))
    previous.token = events[-1]
    entitlements: dict[str, PoolEntitlement] = {} if replace else dict(current)
    for path in removed:
        del entitlements[path]
    for pool in pools:
        entitlements[pool.path] = pool
    return CycleEntitlements(events, entitlements)


def _same_shapes(now: tuple[FloatArray, ...], before: tuple[FloatArray, ...]) -> bool:
    return [m.shape for m in now] == [m.shape for m in before]


def _rows_differ(now: tuple[FloatArray, ...], before: tuple[FloatArray, ...]) -> npt.NDArray[np.bool_]:
    """Rows in which any column of any matrix differs: column by column, since numpy's `any`
    along a short last axis costs several times more per row (~10 ms at 100k pools)."""
    out = np.zeros(now[0].shape[0], dtype=np.bool_)
    for a, b in zip(now, before, strict=True):
        for column in range(a.shape[1]):
            out |= a[:, column] != b[:, column]
    return out


@runtime_checkable
class _HasCapacity(Protocol):
    @property
    def capacity(self) -> Mapping[str, float]: ...

    @property
    def slack_capacity(self) -> Mapping[str, float]: ...


def _same_pool(old: PoolEntitlement | None, new: PoolEntitlement) -> bool:
    """The same numbers (`old` may be a view of one: events.views)."""
    return (old is not None and old.entitlement == new.entitlement
            and old.non_slack_entitlement == new.non_slack_entitlement
            and old.slack_entitlement == new.slack_entitlement and old.fair_share == new.fair_share
            and old.usage_share == new.usage_share and old.demand_share == new.demand_share
            and old.dominant_kind == new.dominant_kind)


def _path_order(prepared: _Prepared, paths: tuple[str, ...]) -> list[int]:
    """The engine's rows (the root `/` first) in path order, as the whole event lists them."""
    order = prepared.order
    if order is None or len(order) != len(paths):
        order = prepared.order = sorted(range(len(paths)), key=paths.__getitem__)
    return order


def _rank(prepared: _Prepared, paths: tuple[str, ...]) -> list[int]:
    """Each engine row's place in path order (made once per engine)."""
    rank = prepared.rank
    if rank is None or len(rank) != len(paths):
        order = _path_order(prepared, paths)
        rank = prepared.rank = [0] * len(order)
        for place, row in enumerate(order):
            rank[row] = place
    return rank


def _parts(tree: str, capacity: dict[str, float], slack_capacity: dict[str, float], pools: list[PoolEntitlement],
           removed: list[str], replace: bool, alerts: list[str], kinds: int) -> list[EntitlementsComputed]:
    """The events of one computation: the removed paths, then the pools, in parts of at most
    `PART_POOLS` of them and about `PART_BYTES` (at least one part; `replace` and the alerts
    in the first)."""
    cuts: list[tuple[list[str], list[PoolEntitlement]]] = []
    gone: list[str] = []
    kept: list[PoolEntitlement] = []
    count = size = 0
    per_pool = 200 + 3 * kinds * 40  # bytes of a pool beside its path, generously
    for path in removed:
        if count == PART_POOLS or size + len(path) + 4 > PART_BYTES:
            cuts.append((gone, kept))
            gone, kept, count, size = [], [], 0, 0
        gone.append(path)
        count += 1
        size += len(path) + 4
    for pool in pools:
        cost = per_pool + len(pool.path)
        if count == PART_POOLS or (count and size + cost > PART_BYTES):
            cuts.append((gone, kept))
            gone, kept, count, size = [], [], 0, 0
        kept.append(pool)
        count += 1
        size += cost
    cuts.append((gone, kept))
    total = len(cuts)
    return [entitlements_computed(tree, capacity, slack_capacity, kept, alerts if part == 1 else [], gone,
                                  replace and part == 1, part, total)
            for part, (gone, kept) in enumerate(cuts, start=1)]
