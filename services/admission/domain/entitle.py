"""From admission's state to the entitlement engine's input, and its result to the wire event.

The tree service's domain resolves pool options and capacity; admission's ledgers give each
leaf's allocation and demand; the entitlement engine does the rest (DOMAIN §3). The engine is
built once per tree configuration and gets fresh leaf numbers every cycle."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from itertools import repeat
from math import inf
from typing import Protocol, cast, runtime_checkable

import numpy as np
import numpy.typing as npt

from events import EntitlementsComputed, PoolEntitlement
from events.decisions import ENTITLEMENT_DIGITS, ENTITLEMENT_PART_POOLS, LendingFactor, LentPool
from events.entitlement_map import CPU, EntitlementMap, FoldedOver, fold_entitlements, group_of
from services.admission.domain.entitlement import EntitlementEngine
from services.admission.domain.entitlement.arrays import positive_amounts
from services.admission.domain.entitlement.model import (
    JOB_POLICIES,
    FloatArray,
    IntArray,
    JobDemand,
    LeafUsage,
    Lending,
    PoolInput,
    TreeEntitlements,
    TreeInput,
)
from services.admission.domain.model import ADMITTED, PENDING, TERMINAL, Ledger
from services.admission.domain.rounding import round_matrix
from services.admission.domain.runtime import TreeRuntime
from services.admission.domain.state import AdmissionState
from services.admission.domain.trusted import entitlements_computed, lending_factor, lent_pool, pool_entitlement
from services.admission.domain.vectors import Vector, add_into
from services.tree.domain.effective import capacity, effective_pools

ROUND = ENTITLEMENT_DIGITS  # digits kept on the wire: enough for 0.0009 tolerance, stable across platforms


def _usage(rt: TreeRuntime, path: str, jobs: dict[str, dict[str, Vector]] | None) -> LeafUsage:
    """What one leaf holds and needs now (DRF: with its jobs)."""
    job_demands = None if jobs is None else tuple(JobDemand(j, d) for j, d in sorted(jobs.get(path, {}).items()))
    return _usage_with(rt.ledgers.get(path), job_demands)


def _usage_with(ledger: Ledger | None, job_demands: tuple[JobDemand, ...] | None) -> LeafUsage:
    """`_usage` of a leaf with this ledger and these jobs."""
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
    # (`dominant`, `hdrf`) leaf -> its ledger, `changes` and jobs when last written to the engine
    jobs_written: dict[str, tuple[Ledger | None, int, tuple[JobDemand, ...]]] = field(default_factory=dict)
    order: list[int] | None = None  # the engine's rows in path order (the event lists pools so)
    last: EntitlementsComputed | None = None  # what the engine gave last, while no leaf changed since
    held: list[tuple[str, Ledger]] | None = None  # the leaves with a ledger (`rt.ledgers`, in leaf order)
    held_changes: list[int] = field(default_factory=list)  # each one's `changes` when last written
    held_count: int = -1  # len(rt.ledgers) when `held` was listed (ledgers are only ever added)
    published: _Published | None = None  # the numbers of the last parts `compute_cycle` gave
    rank: list[int] | None = None  # each engine row's place in path order
    groups: tuple[list[str], list[int]] | None = None  # the sibling groups in path order, a child row of each


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
        # Only the leaves whose ledger or jobs moved get new numbers: the engine keeps what it
        # derived from a leaf's jobs while the leaf keeps its tuple (`entitlement/memo.py`), and a
        # new tuple of the same jobs would throw that away every cycle.
        jobs = _job_demands(rt)
        ledgers = rt.ledgers
        seen_jobs = found.jobs_written
        for leaf in leaves:
            ledger = ledgers.get(leaf)
            changes = 0 if ledger is None else ledger.changes
            demands = tuple(JobDemand(j, d) for j, d in sorted(jobs.get(leaf, {}).items()))
            seen = seen_jobs.get(leaf)
            if seen is not None and seen[0] is ledger and seen[1] == changes and seen[2] == demands:
                continue
            engine.set_usage(leaf, _usage_with(ledger, demands))
            seen_jobs[leaf] = (ledger, changes, demands)
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
    in leaf order, marked written. A ledger, once made, stays the leaf's (`job_counts.ledger_of`): while
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
    # Every number rounded to ROUND digits (`rounding`: the floats `round` gives), in path order;
    # not validated again: the values come from our own engine, already of the right types.
    dominant = result.dominant_index.tolist()
    paths = result.paths
    order = prepared.order
    if order is None or len(order) != len(paths):
        order = prepared.order = sorted(range(len(paths)), key=paths.__getitem__)
    rows = np.asarray(order, dtype=np.intp)
    shares = round_matrix(result.shares_matrix[rows], ROUND)
    # each map made by dict(zip(kinds, row)), mapped in C over the rows: no Python call per map
    each = repeat(kinds)
    maps = (map(dict, map(zip, each, round_matrix(matrix[rows], ROUND)))
            for matrix in (result.entitlement_matrix, result.non_slack_matrix, result.slack_matrix))
    pools = [pool_entitlement(paths[row], entitlement, non_slack, slack, share[0], share[1], share[2],
                              kinds[dominant[row]] if dominant[row] >= 0 else None)
             for row, entitlement, non_slack, slack, share in zip(order, *maps, shares, strict=True)]
    prepared.last = entitlements_computed(tree, _r(dict(given.capacity)), _r(dict(given.revocable_capacity)),
                                          pools, [str(a) for a in result.alerts])
    return prepared.last


_RowBuilder = Callable[[str, list[float], str | None], PoolEntitlement]


def _row_builder(kinds: tuple[str, ...]) -> _RowBuilder:
    """For the rows of the parts of a large tree's map (per kind: entitlement, non-slack, slack;
    then the fair, usage and demand shares): `pool_entitlement(path, dict(zip(kinds, row[:k])),
    dict(zip(kinds, row[k:2k])), dict(zip(kinds, row[2k:3k])), row[3k], row[3k + 1], row[3k + 2],
    dominant)`. Made once per tuple of kinds."""
    found = _BUILDERS.get(kinds)
    if found is None:
        k = len(kinds)
        fair = 3 * k

        def build(path: str, row: list[float], dominant: str | None) -> PoolEntitlement:
            return pool_entitlement(path, dict(zip(kinds, row, strict=False)),  # (zip stops at the kinds)
                                    dict(zip(kinds, row[k:2 * k], strict=True)),
                                    dict(zip(kinds, row[2 * k:fair], strict=True)),
                                    row[fair], row[fair + 1], row[fair + 2], dominant)

        found = _BUILDERS[kinds] = build
    return found


_BUILDERS: dict[tuple[str, ...], _RowBuilder] = {}


def _r(values: dict[str, float]) -> dict[str, float]:
    return {k: float(round(v, ROUND)) for k, v in values.items()}


# -- what a cycle publishes: the whole map, or what changed in parts ------------------------------------

PART_POOLS = ENTITLEMENT_PART_POOLS  # pools (and removed paths) per event at most
WHOLE_POOLS = ENTITLEMENT_PART_POOLS  # a tree of at most this many pools is written whole, in one event
PART_BYTES = 256 * 1024  # about this many bytes of pools per event at most (NATS: 1 MiB a message)

BoolArray = npt.NDArray[np.bool_]


@dataclass(slots=True)
class CycleEntitlements:
    """What one cycle computes for a tree: the events it publishes (`EntitlementsComputed`, one
    or several parts), and the tree's whole entitlement map once they are folded (what the cycle
    decides on)."""

    events: list[EntitlementsComputed]
    entitlements: Mapping[str, PoolEntitlement]


@dataclass(slots=True, eq=False)
class _Published:
    """The numbers of the parts `compute_cycle` gave last, in the engine's row order: the raw
    matrices (entitlement, non-slack, slack per kind, the three shares), the rounded numbers as
    published (those four side by side; a lent pool's entitlement, non-slack entitlement and fair
    share as of its last write), the dominant kinds, which rows are lent and the `given` of each
    (as lent), and each sibling group's factor (`_groups` order; `(0, kinds)` under a policy that
    lends nothing). They are the tree's entitlement map while that map is the one those parts made
    (`EntitlementMap.last` is their last part)."""

    raw: tuple[FloatArray, ...]
    rounded: FloatArray
    dominant: IntArray
    lent: BoolArray
    given: FloatArray | None
    factors: FloatArray
    token: object = None


def compute_cycle(state: AdmissionState, tree: str) -> CycleEntitlements:
    """The entitlements one admission cycle publishes for `tree`, and the map it decides on.

    A tree of at most `WHOLE_POOLS` pools gets one event with its whole map (`compute_for`: as v1
    did, nothing lent). A larger one gets what differs from the tree's entitlement map as the
    fold holds it (`TreeRuntime.entitlements`, an `EntitlementMap`), split into parts: the
    sibling groups whose lending factor changed (`factors`), and the pools whose numbers as the
    map gives them would differ from the engine's, or whose own part of step 3 changed. Under
    `per_resource` a pool other than the root is lent (`lent`: written with its given, share and
    limit, its numbers computed by readers from its group's factor) wherever that computation
    gives the engine's numbers to the bit: the capacity is its rounded self and the pool has no
    slack but cpu's (then `events.entitlement_map.lent_numbers` is the engine's arithmetic,
    operation for operation); elsewhere, and under the other policies, a pool is written with
    its numbers when they change (v2). So one leaf's demand changing writes a factor per group
    and the pools on its path, not every pool step 3 moved. Every pool and factor (`replace`)
    when every pool is written, the map is empty, or the capacity changed since its last
    computation. Folding the parts into the map gives the whole computation, whatever the map
    held.

    Cost: while the map is the one this function's previous parts made (the usual case: a cycle's
    decisions are applied at once), the previous numbers are kept as matrices, so a cycle
    compares the engine's raw numbers in one vectorised pass, rounds only the rows that moved,
    and builds models only for those; otherwise every pool is compared with the map (the same
    parts, by construction)."""
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
    lending = result.lending
    ok = _lendable(result, capacity)
    group_paths, child_rows = _groups(prepared, paths) if lending is not None else ([], [])
    factors_now = lending.per_share[child_rows] if lending is not None else np.zeros((0, len(kinds)))
    previous = prepared.published
    last = getattr(current, "last", None)
    rows: list[int]
    removed: list[str] = []
    if previous is not None and last is previous.token and _same_shapes(raw, previous.raw):
        # the map is what the previous parts made: compare matrices
        rows = _moved_rows(previous, raw, dominant, ok, None if lending is None else lending.given, len(kinds))
        if rows:
            rank = _rank(prepared, paths)
            rows.sort(key=rank.__getitem__)
        replace = len(rows) == len(paths)
        moved_groups = np.flatnonzero(_rows_differ((factors_now,), (previous.factors,))).tolist() \
            if factors_now.shape == previous.factors.shape else list(range(len(group_paths)))
        previous.raw, previous.dominant, previous.lent = raw, dominant, ok
        previous.given, previous.factors = None if lending is None else lending.given, factors_now
    else:
        side_by_side = np.hstack(raw)
        rounded = np.array(round_matrix(side_by_side, ROUND), dtype=np.float64).reshape(side_by_side.shape)
        order = _path_order(prepared, paths)
        same_capacity = (isinstance(last, _HasCapacity) and dict(last.capacity) == capacity
                         and dict(last.slack_capacity) == slack_capacity)
        if not current or not same_capacity:
            rows = order
        else:
            rows = _differing_rows(current, order, paths, rounded, dominant, ok, lending, kinds)
            added = sum(1 for row in rows if paths[row] not in current)
            if len(current) + added > len(paths):  # some of the map is gone from the tree
                names = set(paths)
                removed = sorted(path for path in current if path not in names)
        replace = len(rows) == len(paths)
        known: Mapping[str, Mapping[str, float]] = {}
        if isinstance(current, EntitlementMap) and not replace:
            known = current.factors
        moved_groups = [g for g, group in enumerate(group_paths)
                        if known.get(group) != dict(zip(kinds, factors_now[g].tolist(), strict=True))]
        previous = prepared.published = _Published(raw, rounded, dominant, ok,
                                                   None if lending is None else lending.given, factors_now)
    if replace:
        removed = []
        moved_groups = list(range(len(group_paths)))
    pools, lent = _written(previous, rows, paths, kinds, build, ok, lending)
    factors = [lending_factor(group_paths[g], dict(zip(kinds, factors_now[g].tolist(), strict=True)))
               for g in moved_groups]
    events = _parts(tree, capacity, slack_capacity, pools, lent, factors, removed, replace, alerts, len(kinds))
    previous.token = events[-1]
    if isinstance(current, EntitlementMap) and not replace:
        return CycleEntitlements(events, FoldedOver(current, events))
    entitlements = EntitlementMap() if replace else EntitlementMap(current)
    for event in events:
        entitlements = fold_entitlements(entitlements, event)
    return CycleEntitlements(events, entitlements)


def _lendable(result: TreeEntitlements, capacity: dict[str, float]) -> BoolArray:
    """The rows a reader may compute (see `compute_cycle`): none under a policy that does not
    lend, or when the capacity is not its rounded self; else every row but the root's with no
    slack but cpu's (and its step 3 terms finite) that step 3 gives something (a pool it gives
    nothing, say one at its limit, changes only when its own numbers do: written so, as in v2,
    it costs nothing more than its row)."""
    n = len(result.paths)
    lending = result.lending
    if lending is None or any(capacity.get(kind, 0.0) != amount for kind, amount in result.capacity.items()):
        return np.zeros(n, dtype=np.bool_)
    ok = np.ones(n, dtype=np.bool_)
    ok[0] = False
    slack = result.slack_matrix
    for column, kind in enumerate(result.kinds):
        if kind != CPU:
            ok &= slack[:, column] == 0.0
        ok &= np.isfinite(lending.given[:, column]) & np.isfinite(lending.per_share[:, column])
        ok &= np.isfinite(lending.share[:, column])
    return ok & _rows_differ((result.entitlement_matrix,), (lending.given,))


def _moved_rows(previous: _Published, raw: tuple[FloatArray, ...], dominant: IntArray, ok: BoolArray,
                given: FloatArray | None, k: int) -> list[int]:
    """The rows to write, the map being what `previous` made (in engine order; its `rounded`
    updated): a pool lent now and before whose given moved, or whose other numbers (slack,
    usage and demand shares, dominant kind) differ once rounded; a pool lent now or before but
    not both; a pool lent neither time whose rounded numbers differ."""
    was = previous.lent
    before = previous.raw
    other = _rows_differ((raw[2], raw[3][:, 1:]), (before[2], before[3][:, 1:])) | (dominant != previous.dominant)
    stay = was & ok
    must = was != ok
    if given is not None and previous.given is not None and stay.any():
        must |= stay & _rows_differ((given,), (previous.given,))
    full = other | _rows_differ((raw[0], raw[1], raw[3][:, :1]), (before[0], before[1], before[3][:, :1]))
    check = np.where(stay, other, full) & ~must
    look = np.flatnonzero(must | check)
    if not look.size:
        return []
    rounded = previous.rounded
    fresh = np.asarray(round_matrix(np.hstack([m[look] for m in raw]), ROUND),
                       dtype=np.float64).reshape(look.size, rounded.shape[1])
    old = rounded[look]
    kept = np.r_[2 * k:3 * k, 3 * k + 1:3 * k + 3]  # slack, usage and demand shares: never computed by readers
    differs = np.where(stay[look], (fresh[:, kept] != old[:, kept]).any(axis=1), (fresh != old).any(axis=1))
    differs |= dominant[look] != previous.dominant[look]
    rounded[look] = fresh
    return look[must[look] | differs].tolist()  # type: ignore[no-any-return]


def _differing_rows(current: Mapping[str, PoolEntitlement], order: list[int], paths: tuple[str, ...],
                    rounded: FloatArray, dominant: IntArray, ok: BoolArray, lending: Lending | None,
                    kinds: tuple[str, ...]) -> list[int]:
    """The rows (in `order`) whose pool the map `current` holds otherwise than the engine gives it:
    missing; lent now and not in the map, or with another given, share or limit, or other
    numbers that readers do not compute; not lent now but lent in the map, or with other numbers."""
    rows_of = current.rows if isinstance(current, EntitlementMap) else current
    lent_of = current.lent if isinstance(current, EntitlementMap) else {}
    k = len(kinds)
    out: list[int] = []
    values = rounded.tolist()
    dom = dominant.tolist()
    for row in order:
        path = paths[row]
        old = rows_of.get(path)
        if old is None:
            out.append(row)
            continue
        value = values[row]
        kind = kinds[dom[row]] if dom[row] >= 0 else None
        same_other = (dict(old.slack_entitlement) == dict(zip(kinds, value[2 * k:3 * k], strict=True))
                      and old.usage_share == value[3 * k + 1] and old.demand_share == value[3 * k + 2]
                      and old.dominant_kind == kind)
        was = lent_of.get(path)
        if ok[row]:
            assert lending is not None
            part = _lent_part(path, row, kinds, lending)
            if (was is None or not same_other or dict(was.given) != part.given or dict(was.share) != part.share
                    or dict(was.limit) != part.limit):
                out.append(row)
        elif was is not None or not same_other or not _same_numbers(old, value, kinds):
            out.append(row)
    return out


def _same_numbers(old: PoolEntitlement, value: list[float], kinds: tuple[str, ...]) -> bool:
    k = len(kinds)
    return (dict(old.entitlement) == dict(zip(kinds, value[:k], strict=True))
            and dict(old.non_slack_entitlement) == dict(zip(kinds, value[k:2 * k], strict=True))
            and old.fair_share == value[3 * k])


def _lent_part(path: str, row: int, kinds: tuple[str, ...], lending: Lending) -> LentPool:
    """A lent pool's own part of step 3 (its limit: the kinds it has a finite one of)."""
    limits = lending.limit[row].tolist()
    return lent_pool(path, dict(zip(kinds, lending.given[row].tolist(), strict=True)),
                     dict(zip(kinds, lending.share[row].tolist(), strict=True)),
                     {kind: value for kind, value in zip(kinds, limits, strict=True) if value != inf})


def _written(published: _Published, rows: list[int], paths: tuple[str, ...], kinds: tuple[str, ...],
             build: _RowBuilder, ok: BoolArray, lending: Lending | None) -> tuple[list[PoolEntitlement],
                                                                                  list[LentPool]]:
    """The pools of `rows` (in that order) as published, and the lent ones' parts."""
    if not rows:
        return [], []
    values = published.rounded[rows].tolist()
    dom = published.dominant[rows].tolist()
    pools = [build(paths[row], value, kinds[d] if d >= 0 else None) for row, value, d in zip(rows, values, dom,
                                                                                              strict=True)]
    lent = [] if lending is None else [_lent_part(paths[row], row, kinds, lending) for row in rows if ok[row]]
    return pools, lent


def _groups(prepared: _Prepared, paths: tuple[str, ...]) -> tuple[list[str], list[int]]:
    """The tree's sibling groups (their parents' paths) in path order, and a row of a child of
    each (made once per engine)."""
    found = prepared.groups
    if found is None:
        first: dict[str, int] = {}
        for row in range(1, len(paths)):
            first.setdefault(group_of(paths[row]), row)
        names = sorted(first)
        found = prepared.groups = (names, [first[name] for name in names])
    return found


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
           lent: list[LentPool], factors: list[LendingFactor], removed: list[str], replace: bool, alerts: list[str],
           kinds: int) -> list[EntitlementsComputed]:
    """The events of one computation: the factors (in the first), the removed paths, then the
    pools (each lent one's part beside it), in parts of at most `PART_POOLS` pools and removed
    paths and about `PART_BYTES` (at least one part; `replace` and the alerts in the first)."""
    cuts: list[tuple[list[str], list[PoolEntitlement], list[LentPool]]] = []
    gone: list[str] = []
    kept: list[PoolEntitlement] = []
    kept_lent: list[LentPool] = []
    lent_of = {part.path: part for part in lent}
    count = 0
    size = sum(len(factor.group) + 40 + kinds * 40 for factor in factors)
    per_pool = 200 + 3 * kinds * 40  # bytes of a pool beside its path, generously
    for path in removed:
        if count == PART_POOLS or size + len(path) + 4 > PART_BYTES:
            cuts.append((gone, kept, kept_lent))
            gone, kept, kept_lent, count, size = [], [], [], 0, 0
        gone.append(path)
        count += 1
        size += len(path) + 4
    for pool in pools:
        part = lent_of.get(pool.path)
        cost = per_pool + len(pool.path) + (0 if part is None else 60 + 3 * kinds * 40 + len(pool.path))
        if count == PART_POOLS or (count and size + cost > PART_BYTES):
            cuts.append((gone, kept, kept_lent))
            gone, kept, kept_lent, count, size = [], [], [], 0, 0
        kept.append(pool)
        if part is not None:
            kept_lent.append(part)
        count += 1
        size += cost
    cuts.append((gone, kept, kept_lent))
    total = len(cuts)
    return [entitlements_computed(tree, capacity, slack_capacity, kept, alerts if part == 1 else [], gone,
                                  replace and part == 1, part, total, (factors or None) if part == 1 else None,
                                  kept_lent or None)
            for part, (gone, kept, kept_lent) in enumerate(cuts, start=1)]
