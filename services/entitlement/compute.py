"""The entry points: `compute_entitlements(tree_input)` and the incremental `EntitlementEngine`.

The engine turns a `TreeInput` into flat arrays once (`arrays.build_arrays`). After a batch of
events the admission service writes the leaves that changed (`set_usage`, O(kinds) each) and the
capacity if hosts changed (`set_capacity`), then calls `compute()`, which recomputes the whole
tree from the arrays: there is no partial recomputation, because a full one is a few vectorized
operations per depth of the tree (about 6 ms for 10k pools x 4 kinds under `per_resource`, see
`bench/entitlement.py`) and entitlement is global anyway (one leaf's demand can move every pool's
share). A configuration change (pools added, removed, re-optioned) builds a new engine.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from services.entitlement import per_resource, slack
from services.entitlement.arrays import TreeArrays, build_arrays, write_usage
from services.entitlement.dominant import dominant_entitlements
from services.entitlement.hdrf import Stop, hdrf_entitlements
from services.entitlement.model import (
    CPU,
    TOLERANCE,
    Alert,
    FloatArray,
    IntArray,
    LeafUsage,
    Lending,
    TreeEntitlements,
    TreeInput,
    amount,
)


class EntitlementEngine:
    """One tree's configuration as arrays, with leaf numbers updated in place."""

    def __init__(self, tree: TreeInput) -> None:
        self._arr: TreeArrays = build_arrays(tree)
        self._leaf_rows = frozenset(i for i in np.flatnonzero(self._arr.is_leaf).tolist() if i)

    @property
    def paths(self) -> tuple[str, ...]:
        return self._arr.paths

    @property
    def leaves(self) -> list[str]:
        return [self._arr.paths[i] for i in np.flatnonzero(self._arr.is_leaf).tolist() if i]

    def set_usage(self, path: str, usage: LeafUsage) -> None:
        """New numbers for one leaf pool (replacing the old ones)."""
        row = self._arr.index[path]
        if not self._arr.is_leaf[row] or row == 0:
            raise ValueError(f"{path} is not a leaf pool: only leaves hold and need resources")
        write_usage(self._arr, row, usage)

    def set_usages(self, paths: Sequence[str],
                   rows: Sequence[tuple[Sequence[float], Sequence[float], Sequence[float], Sequence[float]]]) -> None:
        """New numbers for several leaf pools at once, each as written by `write_usage` (per kind
        of `kinds`: non-negative allocation, demand, revocable allocation, revocable demand; no
        jobs; distinct paths): `set_usage` of each, in one write per matrix."""
        arr = self._arr
        index = arr.index
        at = [index[path] for path in paths]
        if not self._leaf_rows.issuperset(at):
            bad = next(path for path, row in zip(paths, at, strict=True) if row not in self._leaf_rows)
            raise ValueError(f"{bad} is not a leaf pool: only leaves hold and need resources")
        if not at:
            return
        k = len(arr.kinds)
        matrix = np.array(rows, dtype=np.float64).reshape(len(at), 4, k)
        arr.allocation[at] = matrix[:, 0]
        arr.demand[at] = matrix[:, 1]
        arr.revocable_allocation[at] = matrix[:, 2]
        arr.revocable_demand[at] = matrix[:, 3]
        jobs = arr.jobs
        for row in at:
            jobs[row] = None

    def set_capacity(
        self, capacity: Mapping[str, float], revocable_capacity: Mapping[str, float] | None = None
    ) -> None:
        arr = self._arr
        arr.capacity[:] = [max(0.0, amount(capacity, kd, 0.0)) for kd in arr.kinds]
        arr.reservation[0] = arr.capacity
        arr.limit[0] = arr.capacity
        if revocable_capacity is not None:
            arr.revocable_cpu = max(0.0, amount(revocable_capacity, CPU, 0.0))

    def compute(self) -> TreeEntitlements:
        return _compute(self._arr)


def compute_entitlements(tree_input: TreeInput) -> TreeEntitlements:
    """Entitlement, non-slack and slack entitlement, requirement and shares of every pool."""
    return _compute(build_arrays(tree_input))


def _capacity_alerts(arr: TreeArrays) -> list[Alert]:
    out: list[Alert] = []
    if not arr.levels:
        return out
    top = arr.levels[0]
    reserved = arr.reservation[top.start : top.stop].sum(axis=0)
    for k, kind in enumerate(arr.kinds):
        r, c = float(reserved[k]), float(arr.capacity[k])
        if r - c >= TOLERANCE:
            out.append(
                Alert(
                    code="reservations_exceed_capacity",
                    path="/",
                    kind=kind,
                    message=f"top-level reservations of {kind} add up to {r:.4g}, above the capacity {c:.4g}",
                )
            )
    return out


def _largest_shares(matrix: FloatArray, capacity: FloatArray) -> tuple[FloatArray, IntArray]:
    """Each row's largest component as a share of `capacity` (a kind of no capacity counts 0)
    and the first column that has it: `(matrix / capacity).max(axis=1)` and `.argmax(axis=1)`,
    column by column, since numpy's reductions along a short last axis cost ~30x more per row
    (a third of a 100k-pool cycle went there)."""
    n, k = matrix.shape
    best, which = np.zeros(n), np.zeros(n, dtype=np.intp)
    for column in range(k):
        share = matrix[:, column] / capacity[column] if capacity[column] > 0 else np.zeros(n)
        if column == 0:
            best = share
        else:
            which = np.where(share > best, column, which)
            np.maximum(best, share, out=best)
    return best, which


def _compute(arr: TreeArrays) -> TreeEntitlements:
    requirement, non_revocable = per_resource.leaf_requirements(arr)
    alerts = _capacity_alerts(arr)
    stops: Mapping[str, tuple[Stop, ...]] = {}
    lending: Lending | None = None
    if arr.policy == "dominant":
        entitlement, requirement, more = dominant_entitlements(arr)
    elif arr.policy == "hdrf":
        hdrf = hdrf_entitlements(arr)
        entitlement, requirement, more, stops = hdrf.entitlement, hdrf.requirement, hdrf.alerts, hdrf.stops
    else:
        per_resource.aggregate(arr, requirement)
        entitlement, more, given, per_share = per_resource.divide(arr, requirement)
        lending = Lending(given, per_share, arr.share, arr.limit)
    alerts += more
    slack_total = slack.total_slack_cpu(arr)
    slack_cpu = slack.divide_slack_cpu(arr, slack_total)
    slack_matrix = slack.slack_entitlements(arr, entitlement, non_revocable, slack_cpu)
    non_slack = slack.non_slack_entitlements(arr, entitlement, slack_matrix)

    usage = arr.allocation + arr.revocable_allocation
    usage = usage * arr.is_leaf[:, None]
    for lv in reversed(arr.levels):
        usage[lv.group_parent] = np.add.reduceat(usage[lv.start : lv.stop], lv.group_starts, axis=0)
    n = len(arr.paths)
    shares = np.zeros((n, 3))
    dominant = np.full(n, -1, dtype=np.intp)
    if arr.kinds:
        shares[:, 0] = _largest_shares(entitlement, arr.capacity)[0]
        shares[:, 1] = _largest_shares(usage, arr.capacity)[0]
        shares[:, 2], wanted = _largest_shares(requirement, arr.capacity)
        dominant = np.where(shares[:, 2] > 0, wanted, -1).astype(np.intp)

    slack_capacity = {kd: 0.0 for kd in arr.kinds}
    if arr.cpu >= 0:
        slack_capacity[CPU] = slack_total
    return TreeEntitlements(
        policy=arr.policy,
        kinds=arr.kinds,
        paths=arr.paths,
        index=arr.index,
        capacity=dict(zip(arr.kinds, arr.capacity.tolist(), strict=True)),
        slack_capacity=slack_capacity,
        entitlement=entitlement,
        non_slack=non_slack,
        slack=slack_matrix,
        requirement=requirement,
        shares=shares,
        dominant=dominant,
        alerts=tuple(alerts),
        stops=stops,
        lending=lending,
    )
