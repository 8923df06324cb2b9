"""The tree as flat arrays, the shape every phase works on.

Rows are the pools in breadth-first order: row 0 is the root, then depth 1, depth 2, ...; within
a depth, children of the same parent are contiguous (parents in row order, siblings by path).
So each depth is one `Level`: a contiguous row range cut into sibling groups, and every phase is
a handful of vectorized operations per level (`np.add.reduceat` over the groups), never a Python
loop over pools. Built once per configuration; leaf numbers are written in place by
`write_usage` (O(kinds) per leaf), so recomputing after a batch of events needs no rebuild.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from services.entitlement.memo import GuaranteeMemo, JobsMemo
from services.entitlement.model import (
    CPU,
    ROOT,
    Amounts,
    BoolArray,
    FloatArray,
    IntArray,
    JobDemand,
    LeafUsage,
    Policy,
    PoolInput,
    TreeInput,
    amount,
)


@dataclass(slots=True, eq=False)
class Level:
    """The rows of one depth: `[start, stop)`, cut into sibling groups."""

    start: int
    stop: int
    group_starts: IntArray
    """Offset (from `start`) of each group's first row: the `indices` of `np.add.reduceat`."""
    group_parent: IntArray
    """Row of each group's parent."""
    group_of_row: IntArray
    """Group (0-based within the level) of each row of the level."""


@dataclass(slots=True, eq=False)
class TreeArrays:
    policy: Policy
    allocation_slack: bool
    kinds: tuple[str, ...]
    cpu: int
    """Index of `cpu` in `kinds`, -1 when the tree has no cpu."""
    paths: tuple[str, ...]
    index: dict[str, int]
    parent: IntArray
    children: list[list[int]]
    levels: list[Level]
    is_leaf: BoolArray
    capacity: FloatArray
    revocable_cpu: float
    reservation: FloatArray
    limit: FloatArray
    share: FloatArray
    weight: FloatArray
    """Scalar weight for `dominant`: the largest component of `share`."""
    static: BoolArray
    slack_fraction: FloatArray
    cpu_only_reservation: BoolArray
    """Reservation names cpu and no other kind (`dominant` implies the other kinds)."""
    allocation: FloatArray
    demand: FloatArray
    revocable_allocation: FloatArray
    revocable_demand: FloatArray
    jobs: list[tuple[JobDemand, ...] | None]
    jobs_memo: JobsMemo | None = None
    """The jobs' demands as last read, kept for the next computation (`memo.py`)."""
    guarantee_memo: GuaranteeMemo | None = None
    """The guarantees and limits as shares as last computed, likewise."""
    leaf_jobs: Callable[[list[tuple[JobDemand, ...] | None]], tuple[tuple[JobDemand, ...] | None, ...]] | None = None
    """`jobs` -> the leaves' entries, in row order (`dominant._given`), made on first use."""


def parent_of(path: str) -> str:
    head = path.rstrip("/").rsplit("/", 1)[0]
    return head or ROOT


def build_arrays(tree: TreeInput) -> TreeArrays:
    kinds = tuple(tree.kinds)
    if len(set(kinds)) != len(kinds):
        raise ValueError(f"kinds given twice: {kinds}")
    by_path: dict[str, PoolInput] = {}
    for pool in tree.pools:
        if pool.path == ROOT:
            continue
        if pool.path in by_path:
            raise ValueError(f"pool {pool.path} given twice")
        by_path[pool.path] = pool

    kids: dict[str, list[str]] = {ROOT: []}
    for path in by_path:
        kids.setdefault(path, [])
    for path, pool in by_path.items():
        up = pool.parent if pool.parent is not None else parent_of(path)
        if up not in kids:
            raise ValueError(f"pool {path}: parent {up} does not exist")
        kids[up].append(path)

    # Breadth-first: depth by depth, children of a parent together, siblings by path.
    order: list[str] = [ROOT]
    depth_bounds: list[tuple[int, int]] = []
    frontier = [ROOT]
    while frontier:
        nxt: list[str] = []
        for p in frontier:
            nxt.extend(sorted(kids[p]))
        if nxt:
            depth_bounds.append((len(order), len(order) + len(nxt)))
            order.extend(nxt)
        frontier = nxt
    if len(order) != len(by_path) + 1:
        missing = sorted(set(by_path) - set(order))
        raise ValueError(f"pools not reachable from the root (a cycle?): {missing}")

    n, k = len(order), len(kinds)
    index = {p: i for i, p in enumerate(order)}
    parent = np.full(n, -1, dtype=np.intp)
    children: list[list[int]] = [[index[c] for c in sorted(kids[p])] for p in order]
    for i, ch in enumerate(children):
        for c in ch:
            parent[c] = i

    levels: list[Level] = []
    for start, stop in depth_bounds:
        par = parent[start:stop]
        new_group = np.ones(stop - start, dtype=bool)
        new_group[1:] = par[1:] != par[:-1]
        group_starts = np.flatnonzero(new_group).astype(np.intp)
        levels.append(
            Level(
                start=start,
                stop=stop,
                group_starts=group_starts,
                group_parent=par[group_starts].copy(),
                group_of_row=(np.cumsum(new_group) - 1).astype(np.intp),
            )
        )

    capacity = np.array([max(0.0, amount(tree.capacity, kd, 0.0)) for kd in kinds], dtype=np.float64)
    pools = [by_path[p] for p in order[1:]]
    cap_row = capacity.tolist()
    reservation = _matrix(
        [cap_row] + [[m.get(kd, 0.0) for kd in kinds] for m in (p.reservation for p in pools)], 0.0, k
    )
    inf = math.inf
    limit = _matrix(
        [cap_row] + [[inf] * k if m is None else [m.get(kd, inf) for kd in kinds] for m in (p.limit for p in pools)],
        inf,
        k,
    )
    share = _matrix(
        [[1.0] * k]
        + [
            [sh.get(kd, 1.0) for kd in kinds] if isinstance(sh, Mapping) else [float(sh)] * k
            for sh in (p.share for p in pools)
        ],
        1.0,
        k,
    )
    static = np.array([False] + [p.static for p in pools], dtype=bool)
    slack_fraction = np.clip(np.array([0.0] + [p.slack_limit for p in pools], dtype=np.float64), 0.0, 100.0) / 100.0
    cpu_only = np.array([False] + [_names_cpu_only(p.reservation) for p in pools], dtype=bool)
    usages = [p.usage for p in pools]
    zero = [0.0] * k

    jobs: list[tuple[JobDemand, ...] | None] = [None]
    jobs.extend(u.jobs for u in usages)

    def usage_matrix(field: str) -> FloatArray:
        rows = [zero] + [[m.get(kd, 0.0) for kd in kinds] for m in (getattr(u, field) for u in usages)]
        return _matrix(rows, 0.0, k)

    arr = TreeArrays(
        policy=tree.policy,
        allocation_slack=tree.allocation_slack,
        kinds=kinds,
        cpu=kinds.index(CPU) if CPU in kinds else -1,
        paths=tuple(order),
        index=index,
        parent=parent,
        children=children,
        levels=levels,
        is_leaf=np.array([not ch for ch in children], dtype=bool),
        capacity=capacity,
        revocable_cpu=max(0.0, amount(tree.revocable_capacity, CPU, 0.0)),
        reservation=reservation,
        limit=limit,
        share=share,
        weight=share.max(axis=1) if k else np.ones(n),
        static=static,
        slack_fraction=slack_fraction,
        cpu_only_reservation=cpu_only,
        allocation=usage_matrix("allocation"),
        demand=usage_matrix("demand"),
        revocable_allocation=usage_matrix("revocable_allocation"),
        revocable_demand=usage_matrix("revocable_demand"),
        jobs=jobs,
    )
    return arr


def _matrix(rows: list[list[float]], default: float, k: int) -> FloatArray:
    """`(len(rows), k)` floats, NaN read as `default`, negatives as 0."""
    m = np.array(rows, dtype=np.float64).reshape(len(rows), k)
    if np.isnan(m).any():
        m[np.isnan(m)] = default
    return np.maximum(m, 0.0)


def _names_cpu_only(reservation: Amounts) -> bool:
    return CPU in reservation and all((v <= 0) == (kd != CPU) for kd, v in reservation.items())


def positive_amounts(values: Amounts, kinds: tuple[str, ...]) -> list[float]:
    """`[max(0.0, amount(values, kind, 0.0)) for kind in kinds]`, the same numbers, without the
    calls (a missing, NaN or non-positive amount reads 0.0)."""
    get = values.get
    out: list[float] = []
    for kind in kinds:
        v = get(kind)
        out.append(float(v) if v is not None and v > 0.0 else 0.0)
    return out


def write_usage(arr: TreeArrays, row: int, usage: LeafUsage) -> None:
    """Write a leaf's numbers into the arrays (internal pools hold nothing: callers skip them)."""
    kinds = arr.kinds
    arr.allocation[row] = positive_amounts(usage.allocation, kinds)
    arr.demand[row] = positive_amounts(usage.demand, kinds)
    arr.revocable_allocation[row] = positive_amounts(usage.revocable_allocation, kinds)
    arr.revocable_demand[row] = positive_amounts(usage.revocable_demand, kinds)
    arr.jobs[row] = usage.jobs
