"""From admission's state to the entitlements a cycle publishes (DOMAIN §3): the whole map of a
tree (`compute_for`), or for a large tree what changed, in parts (`compute_cycle`).

The engine and its input: `entitle_engine.py`; which pools a cycle writes: `entitle_changes.py`;
the events they go in: `entitle_parts.py`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from itertools import repeat
from typing import Protocol, runtime_checkable

import numpy as np

from events import EntitlementsComputed, PoolEntitlement
from events.decisions import ENTITLEMENT_DIGITS, ENTITLEMENT_PART_POOLS
from events.entitlement_map import EntitlementMap, FoldedOver, fold_entitlements
from services.admission.domain.entitle_changes import (
    Published,
    differing_rows,
    lendable,
    moved_rows,
    rows_differ,
    same_shapes,
)
from services.admission.domain.entitle_engine import path_order, path_rank, prepared_engine, sibling_groups
from services.admission.domain.entitle_parts import event_parts, row_builder, written_pools
from services.admission.domain.rounding import round_matrix
from services.admission.domain.state import AdmissionState
from services.admission.domain.trusted import entitlements_computed, lending_factor, pool_entitlement

ROUND = ENTITLEMENT_DIGITS  # digits kept on the wire: enough for 0.0009 tolerance, stable across platforms
WHOLE_POOLS = ENTITLEMENT_PART_POOLS  # a tree of at most this many pools is written whole, in one event


def compute_for(state: AdmissionState, tree: str) -> EntitlementsComputed:
    """Every pool's entitlement in `tree`, as the event the cycle publishes."""
    prepared = prepared_engine(state, tree)
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


def _r(values: dict[str, float]) -> dict[str, float]:
    return {k: float(round(v, ROUND)) for k, v in values.items()}


@dataclass(slots=True)
class CycleEntitlements:
    """What one cycle computes for a tree: the events it publishes (`EntitlementsComputed`, one
    or several parts), and the tree's whole entitlement map once they are folded (what the cycle
    decides on)."""

    events: list[EntitlementsComputed]
    entitlements: Mapping[str, PoolEntitlement]


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
    prepared = prepared_engine(state, tree)
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
    build = row_builder(kinds)
    lending = result.lending
    ok = lendable(result, capacity)
    group_paths, child_rows = sibling_groups(prepared, paths) if lending is not None else ([], [])
    factors_now = lending.per_share[child_rows] if lending is not None else np.zeros((0, len(kinds)))
    previous = prepared.published
    last = getattr(current, "last", None)
    rows: list[int]
    removed: list[str] = []
    if previous is not None and last is previous.token and same_shapes(raw, previous.raw):
        # the map is what the previous parts made: compare matrices
        rows = moved_rows(previous, raw, dominant, ok, None if lending is None else lending.given, len(kinds))
        if rows:
            rank = path_rank(prepared, paths)
            rows.sort(key=rank.__getitem__)
        replace = len(rows) == len(paths)
        moved_groups = np.flatnonzero(rows_differ((factors_now,), (previous.factors,))).tolist() \
            if factors_now.shape == previous.factors.shape else list(range(len(group_paths)))
        previous.raw, previous.dominant, previous.lent = raw, dominant, ok
        previous.given, previous.factors = None if lending is None else lending.given, factors_now
    else:
        side_by_side = np.hstack(raw)
        rounded = np.array(round_matrix(side_by_side, ROUND), dtype=np.float64).reshape(side_by_side.shape)
        order = path_order(prepared, paths)
        same_capacity = (isinstance(last, _HasCapacity) and dict(last.capacity) == capacity
                         and dict(last.slack_capacity) == slack_capacity)
        if not current or not same_capacity:
            rows = order
        else:
            rows = differing_rows(current, order, paths, rounded, dominant, ok, lending, kinds)
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
        previous = prepared.published = Published(raw, rounded, dominant, ok,
                                                  None if lending is None else lending.given, factors_now)
    if replace:
        removed = []
        moved_groups = list(range(len(group_paths)))
    pools, lent = written_pools(previous, rows, paths, kinds, build, ok, lending)
    factors = [lending_factor(group_paths[g], dict(zip(kinds, factors_now[g].tolist(), strict=True)))
               for g in moved_groups]
    events = event_parts(tree, capacity, slack_capacity, pools, lent, factors, removed, replace, alerts, len(kinds))
    previous.token = events[-1]
    if isinstance(current, EntitlementMap) and not replace:
        return CycleEntitlements(events, FoldedOver(current, events))
    entitlements = EntitlementMap() if replace else EntitlementMap(current)
    for event in events:
        entitlements = fold_entitlements(entitlements, event)
    return CycleEntitlements(events, entitlements)


@runtime_checkable
class _HasCapacity(Protocol):
    @property
    def capacity(self) -> Mapping[str, float]: ...

    @property
    def slack_capacity(self) -> Mapping[str, float]: ...
