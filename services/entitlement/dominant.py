"""Policy `dominant`: YTsaurus-style vector fair share (hierarchical DRF), DOMAIN §3.

Shares are fractions of the tree's capacity, per kind (kinds the tree has none of are left out:
their entitlement is 0 and they do not bend anyone's direction). Jobs are the leaves.

The model
---------
Every element (job or pool) has, as a function of the one argument `y` its siblings share, a
share vector `S(y)`; the siblings' `y` is the largest for which their shares add up, kind by
kind, to no more than their parent's share. That `y` is the parent's own inner argument `t`.

* A job with demand share `d` (dominant component `D = max d`) and weight `w` grows along its
  own direction: `S(y) = d / D * min(D, w * y)`. Its dominant share is `min(D, w * y)`.
* A pool with guarantee `g`, limit `l` and weight `w` is bounded, kind by kind, by the box
  `min(l, g + w * y)`: the guarantee is *added to* the weighted part (not a floor under it). Its
  children share the box with their own common argument `t`, and `S(y) = H(t*)`, where `H(t)`
  is the sum of the children's shares at `t` and `t*` is the largest `t` with `H(t)` in the box.
  For a pool holding one job this is exactly the job formula with `g` added; in general, the
  pool's dominant share beyond its guarantee is `w * y`, as for a job, and the demand bound of
  `min(demand, limit, guarantee + weight * y)` is implicit (`H` never exceeds the jobs' demand).
* The root's box is the capacity (all ones).

Guarantees are reservations divided by capacity. A reservation that names cpu alone implies the
other kinds in proportion to the parent's guarantee (the root's is the whole capacity, so
reserving 60% of the cpu reserves 60% of everything: YTsaurus' `main_resource`). Guarantees are
capped at the limit, and when the children's guarantees add up to more than their parent's (only
top-level pools can: validation holds the others) they are scaled down proportionally, with an
alert.

A pool's weight is its `share` (the largest component of a per-kind share). A leaf's jobs come
from `LeafUsage.jobs` (each job's demand: what it holds plus what it waits for, non-revocable);
without them the leaf is one job of its non-revocable allocation plus demand. Revocable work
enters as one more job of the leaf, of `min(slack_limit% * reservation, revocable allocation +
revocable demand)` in every kind but cpu: the same term as the requirement of `per_resource`. A
pool's *requirement* under `dominant` is the sum of its jobs' demands (that pseudo-job
included), capped at its limit; internal pools sum their children's as for `per_resource`.

A `static` pool's reservation is given whatever the demand (DOMAIN §2): the pool holds, before
anything else, `max(0, reservation - requirement)` per kind (its requirement counting its static
descendants' claims, `max(requirement, reservation)`), as a constant among its children (`_held`).
The functions below are built on what is left (guarantees and limits less what each subtree
holds, the root's capacity less all of it) and the holds are added back to every pool's share.

How it is computed
------------------
Exactly, with piecewise-linear vector functions (`polylines.Polylines`: one per pool, a whole
depth of the tree at a time in flat arrays), bottom up then top down:

1. bottom up, depth by depth, each pool's `H` is the sum of its children's `S` (one sort of the
   level's breakpoints by pool, then cumulative sums of slopes), and its `S` is `H`
   re-parametrized by `y = max(0, max_k (H_k - g_k) / w)`, cut where it leaves the limit
   (breakpoints added where the maximizing kind changes);
2. the root's argument is the largest `t` with `H_root(t) <= 1`; then, top down, each pool's
   share and inner argument are read off its `S` at its parent's argument.

`S` can jump: when the kind that binds a pool's box stops growing (its children saturate),
the pool's other kinds may catch up at once. Functions are taken left-continuous (the lower
value at a jump, except at `y = 0`, where the guarantee is given), which makes "the largest
argument that fits" always attained: a jump is taken only when all of it fits. A vertex records
the inner argument *and* whether it is the top of a jump, so that a parent sitting exactly on a
jump top puts its children on theirs too, and the children's shares always add up to exactly
their parent's.

Consequences of one common argument (DOMAIN §3 asks for exactly that)
--------------------------------------------------------------------
When a kind runs out, `y` stops for every sibling, also for jobs that use none of that kind, and
a pool's limit on one kind stops all of its jobs. So what is left of the other kinds stays
undivided (true DRF progressive filling would freeze only the users of the exhausted kind), and
more demand can lower a pool's own entitlement: see the two counterexamples in
`tests/entitlement/test_properties.py`. `per_resource` has no such effect.

Cost: a pool's function has about as many breakpoints as its subtree has jobs and pools (times
the kinds), so the whole is O(jobs * depth * kinds) work, done as a fixed number of numpy
operations per depth (no Python loop over pools; the jobs' demands are read from their mappings
once): see `bench/entitlement.py`. An oracle written from DOMAIN §3 alone, slow and plain
(`tests/entitlement/dominant_oracle.py`), agrees with it on random trees
(`tests/entitlement/test_dominant_equivalence.py`), but for a pinned vanishing demand at a limit.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import repeat
from operator import is_, itemgetter

import numpy as np

from services.entitlement.arrays import TreeArrays
from services.entitlement.memo import GuaranteeMemo, JobsLayout, JobsMemo, given_jobs
from services.entitlement.model import TOLERANCE, Alert, BoolArray, FloatArray, IntArray, JobDemand
from services.entitlement.per_resource import aggregate
from services.entitlement.polylines import (
    EPS,
    Events,
    Polylines,
    compose,
    evaluate,
    fit,
    polyline_events,
    ramp_events,
    sum_events,
)


def _leaf_jobs(arr: TreeArrays) -> tuple[FloatArray, FloatArray, IntArray, IntArray]:
    """Every leaf's jobs, leaves in row order: `(demand (kinds, jobs), weight, leaf of each job (an
    index into the leaves), leaf rows)`. A leaf without `jobs` is one job of its non-revocable
    allocation plus demand; revocable work is one more job, last."""
    leaves = np.flatnonzero(arr.is_leaf[1:]) + 1
    nl = leaves.size
    own = np.take(arr.allocation, leaves, axis=0) + np.take(arr.demand, leaves, axis=0)
    rev = np.minimum(
        arr.slack_fraction[leaves][:, None] * np.take(arr.reservation, leaves, axis=0),
        np.take(arr.revocable_allocation, leaves, axis=0) + np.take(arr.revocable_demand, leaves, axis=0),
    )
    if arr.cpu >= 0:
        rev[:, arr.cpu] = 0.0
    # `rev.max(axis=1, initial=0.0) > 0.0`, a column at a time (NaN kept, as there): numpy
    # reduces a few kinds per row ~10x slower than whole columns
    top = np.zeros(nl)
    for kd in range(rev.shape[1]):
        np.maximum(top, rev[:, kd], out=top)
    has_rev = top > 0.0
    memo = arr.jobs_memo = given_jobs(arr.jobs_memo, _given(arr, leaves), arr.kinds)
    layout = memo.layout
    if layout is None or not np.array_equal(layout.has_rev, has_rev):
        layout = memo.layout = _layout(memo, has_rev)
    # each job's demand, gathered from [the given jobs' | the leaves' own | their revocable work]
    demand = np.take(np.concatenate([memo.demand, own, rev]), layout.src, axis=0).T
    return np.ascontiguousarray(demand), layout.weight, layout.job_leaf, leaves


def _given(arr: TreeArrays, leaves: IntArray) -> list[tuple[JobDemand, ...] | None]:
    """Each leaf's `jobs` as given, leaves in row order: with one `itemgetter` of the leaf rows,
    kept on the arrays (the leaves are the tree's), a C call where a Python loop over 9k leaves
    costs ~0.25 ms."""
    pick = arr.leaf_jobs
    if pick is None:
        rows = leaves.tolist()
        pick = arr.leaf_jobs = itemgetter(*rows) if len(rows) > 1 else (lambda jobs: tuple(jobs[r] for r in rows))
    return list(pick(arr.jobs))


def _layout(memo: JobsMemo, has_rev: BoolArray) -> JobsLayout:
    """Each job's source, weight and leaf, for the given jobs of `memo` and the leaves with
    revocable work `has_rev` (`JobsLayout`)."""
    nl = has_rev.size
    n_given = memo.counts
    implicit = np.fromiter(map(is_, memo.given, repeat(None)), dtype=bool, count=nl)
    count = np.where(implicit, 1, n_given) + has_rev
    off = np.zeros(nl + 1, dtype=np.intp)
    np.cumsum(count, out=off[1:])
    ne = memo.demand.shape[0]
    src = np.empty(int(off[-1]), dtype=np.intp)
    explicit = np.flatnonzero(n_given > 0)
    reps = n_given[explicit]
    src[np.repeat(off[explicit] - (np.cumsum(reps) - reps), reps) + np.arange(ne)] = np.arange(ne)
    src[off[:-1][implicit]] = ne + np.flatnonzero(implicit)
    src[off[1:][has_rev] - 1] = ne + nl + np.flatnonzero(has_rev)
    weight = np.concatenate([memo.weight, np.ones(2 * nl)])[src]
    for a in (has_rev, src, weight):
        a.setflags(write=False)  # (returned to every computation: none may change them)
    job_leaf = np.repeat(np.arange(nl), count)
    job_leaf.setflags(write=False)
    return JobsLayout(has_rev, src, weight, job_leaf)


def _kept_guarantees(arr: TreeArrays, active: list[int], cap: FloatArray) -> tuple[FloatArray, FloatArray, list[Alert]]:
    """`_guarantees`, kept on the arrays while its inputs stay the same (`memo.py`); the arrays
    given are read-only."""
    inputs = (arr.limit, arr.reservation, arr.cpu_only_reservation, cap, tuple(active))
    memo = arr.guarantee_memo
    if memo is None or not memo.matches(inputs):
        g, lim, alerts = _guarantees(arr, active, cap)
        g.setflags(write=False)
        lim.setflags(write=False)
        memo = arr.guarantee_memo = GuaranteeMemo((arr.limit.copy(), arr.reservation.copy(),
                                                   arr.cpu_only_reservation.copy(), cap.copy(), tuple(active)),
                                                  g, lim, tuple(alerts))
    return memo.guarantee, memo.limit, list(memo.alerts)


def _guarantees(arr: TreeArrays, active: list[int], cap: FloatArray) -> tuple[FloatArray, FloatArray, list[Alert]]:
    """`(guarantee, limit, alerts)` as shares of the capacity (kinds it has only), top down: a
    cpu-only reservation implies the other kinds in proportion to the parent's guarantee;
    guarantees are capped at the limit and scaled down where siblings claim more than their
    parent has (with an alert)."""
    n = len(arr.paths)
    lim = arr.limit[:, active] / cap
    lim[0] = 1.0
    raw = arr.reservation[:, active] / cap
    g = np.zeros((n, len(active)))
    g[0] = 1.0
    ci = active.index(arr.cpu) if arr.cpu in active else -1
    alerts: list[Alert] = []
    for lv in arr.levels:
        rows = slice(lv.start, lv.stop)
        gr = raw[rows].copy()
        if ci >= 0:
            pg = g[arr.parent[rows]]
            pc = pg[:, ci : ci + 1]
            implied = np.divide(gr[:, ci : ci + 1] * pg, pc, out=np.zeros_like(pg), where=pc > 0)
            gr = np.where(arr.cpu_only_reservation[rows, None] & (pc > 0), implied, gr)
        gr = np.minimum(gr, lim[rows])
        sums = np.add.reduceat(gr, lv.group_starts, axis=0)
        gp = g[lv.group_parent]
        over = sums > gp * (1.0 + EPS) + EPS
        if over.any():
            factor = np.divide(gp, sums, out=np.ones_like(sums), where=over)
            gr = gr * factor[lv.group_of_row]
            for gi, ki in zip(*np.nonzero(over), strict=True):
                kind = arr.kinds[active[ki]]
                c = float(cap[ki])
                had, claimed = float(gp[gi, ki]) * c, float(sums[gi, ki]) * c
                if claimed - had < TOLERANCE:
                    continue
                path = arr.paths[int(lv.group_parent[gi])]
                what = "capacity" if path == "/" else f"the guarantee of {path}"
                alerts.append(
                    Alert(
                        code="guarantees_scaled_down",
                        path=path,
                        kind=kind,
                        message=(
                            f"guarantees of the children of {path} exceed {what} for {kind}: "
                            f"{claimed:.4g} > {had:.4g}; each scaled down to {100 * had / claimed:.2f}%"
                        ),
                    )
                )
        g[rows] = gr
    return g, lim, alerts


@dataclass(slots=True, eq=False)
class DrfInputs:
    """What `dominant` and `hdrf` both start from: the jobs (leaves of the computation), every
    pool's requirement, and the guarantees and limits as shares of the capacity (kinds it has only:
    `active`)."""

    job_demand: FloatArray
    """`(kinds, jobs)`: each job's demand, in amounts, jobs grouped by leaf in row order."""
    job_weight: FloatArray
    job_row: IntArray
    """The leaf row of each job."""
    requirement: FloatArray
    """`(pools, kinds)`: the sum of a pool's jobs' demands, capped at its limit (internal pools:
    their children's, as `per_resource` aggregates)."""
    active: list[int]
    """The kinds of positive capacity (indices into `kinds`); the others are left out."""
    cap: FloatArray
    guarantee: FloatArray
    """`(pools, active kinds)`: reservations as shares, inferred, capped and scaled (`_guarantees`),
    less what the pool's subtree holds of static reservations (`held`)."""
    limit: FloatArray
    """As `guarantee`: limits as shares, less `held`; the root's is the capacity left (1 - `held`)."""
    alerts: list[Alert]
    held: FloatArray
    """`(pools, active kinds)`: what static reservations hold in each pool's subtree (its own
    included), given before anything else (`_held`); 0 without static pools. The policies divide
    the rest within `guarantee` and `limit` as usual and add it back to every pool's share."""


def drf_inputs(arr: TreeArrays) -> DrfInputs:
    """The jobs, requirement, guarantees and limits of a tree under a DRF policy. Guarantees and
    limits are empty `(pools, 0)` when the tree has no capacity or no pool."""
    n, k = len(arr.paths), len(arr.kinds)
    job_demand, job_weight, job_leaf, leaves = _leaf_jobs(arr)
    job_row = leaves[job_leaf]
    requirement = np.zeros((n, k))
    if leaves.size:  # each leaf's jobs summed in order, capped at its limit
        totals = np.zeros((leaves.size, k))
        for kd in range(k):
            totals[:, kd] = np.bincount(job_leaf, weights=job_demand[kd], minlength=leaves.size)
        requirement[leaves] = np.minimum(totals, np.take(arr.limit, leaves, axis=0))
    aggregate(arr, requirement)
    active = [i for i in range(k) if arr.capacity[i] > 0]
    cap = arr.capacity[active]
    if not active or n == 1:
        empty = np.zeros((n, 0))
        return DrfInputs(job_demand, job_weight, job_row, requirement, active, cap, empty, empty, [], empty)
    g, lim, alerts = _kept_guarantees(arr, active, cap)
    if not arr.static.any():
        return DrfInputs(job_demand, job_weight, job_row, requirement, active, cap, g, lim, alerts, np.zeros_like(g))
    held = _held(arr, requirement, active, cap, g)
    # what is held is given first: a pool's share is `held` plus what it grows within what is left
    # of its guarantee and its limit (its key, `max (share - guarantee) / weight`, and the kinds
    # it has used up are those of the whole share); new arrays, as the kept ones are read-only
    g_left = np.maximum(g - held, 0.0)
    lim_left = np.maximum(lim - held, 0.0)
    return DrfInputs(job_demand, job_weight, job_row, requirement, active, cap, g_left, lim_left, alerts, held)


def _held(arr: TreeArrays, requirement: FloatArray, active: list[int], cap: FloatArray,
          guarantee: FloatArray) -> FloatArray:
    """What static reservations hold, as shares, summed over each pool's subtree (DOMAIN §2: a
    static reservation is given whatever the demand; §3: a static pool claims `max(requirement,
    reservation)`). A static pool holds `max(0, reservation - requirement)` per kind: the part of
    its reservation its own demand does not cover, its requirement counting its static
    descendants' claims, so a reservation inside a static parent's is held once. The reservation
    is taken as written (a cpu-only one holds cpu only: the kinds it implies are a guarantee, not
    a hold) but no more than the guarantee, which is capped at the limit and scaled down with its
    siblings': the holds then never add up to more than their parent's guarantee, nor the
    capacity."""
    # the static pools' rows only (a few percent of a tree; the others hold 0.0)
    static = arr.static.nonzero()[0]
    own = np.zeros((len(arr.paths), len(active)))
    reserved = np.minimum(arr.reservation[static][:, active] / cap, guarantee[static])
    own[static] = np.maximum(reserved - requirement[static][:, active] / cap, 0.0)
    own[0] = 0.0
    for lv in reversed(arr.levels):  # bottom up: a pool holds its own and its subtree's
        own[lv.group_parent] += np.add.reduceat(own[lv.start : lv.stop], lv.group_starts, axis=0)
    return own


def dominant_entitlements(arr: TreeArrays) -> tuple[FloatArray, FloatArray, list[Alert]]:
    """`(entitlement, requirement, alerts)` of every row under `dominant`."""
    n, k = len(arr.paths), len(arr.kinds)
    drf = drf_inputs(arr)
    requirement, active = drf.requirement, drf.active
    entitlement = np.zeros((n, k))
    if not active or n == 1:
        return entitlement, requirement, []
    share, _ = dominant_shares(arr, drf)
    entitlement[:, active] = share * drf.cap
    return entitlement, requirement, drf.alerts


def dominant_shares(arr: TreeArrays, drf: DrfInputs) -> tuple[FloatArray, FloatArray]:
    """`(share (pools, active kinds), inner argument of each pool)` under `dominant`, for a tree
    with capacity and pools: a leaf's inner argument is its jobs' common one (a job of demand
    share `d` and weight `w` holds `d / max(d) * min(max(d), w * t)`)."""
    n = len(arr.paths)
    active = drf.active
    cap, g, lim = drf.cap, drf.guarantee, drf.limit
    job_demand, job_weight, job_row = drf.job_demand, drf.job_weight, drf.job_row
    dims = len(active)
    weight = arr.weight
    # kinds-major from here on (see polylines.py): one row per kind
    box = np.ascontiguousarray(np.where((weight > EPS)[:, None], lim, np.minimum(lim, g)).T)
    g_t = np.ascontiguousarray(g.T)
    job_share = job_demand[active] * (1.0 / cap)[:, None]

    levels = arr.levels
    shares_of: list[Polylines] = []
    child: Polylines | None = None
    for depth in range(len(levels) - 1, -1, -1):
        lv = levels[depth]
        rows = lv.stop - lv.start
        init = np.zeros((dims, rows))
        parts: list[Events] = []
        if child is not None:
            below = levels[depth + 1]
            events, at0 = polyline_events(child, below.group_parent[below.group_of_row] - lv.start)
            sums = np.add.reduceat(at0, below.group_starts, axis=1)
            for kd in range(dims):
                init[kd][below.group_parent - lv.start] = sums[kd]
            parts.append(events)
        lo, hi = np.searchsorted(job_row, [lv.start, lv.stop])
        if hi > lo or not parts:
            parts.append(ramp_events(job_share[:, lo:hi], job_weight[lo:hi], job_row[lo:hi] - lv.start))
        h = sum_events(rows, init, Events.concat(parts))
        sl = slice(lv.start, lv.stop)
        child = compose(h, g_t[:, sl], box[:, sl], weight[sl])
        shares_of.append(child)
    shares_of.reverse()

    assert child is not None
    top = levels[0]
    events, at0 = polyline_events(child, np.zeros(top.stop - top.start, dtype=np.intp))
    # the root's sum starts at what static reservations hold: the capacity left bounds the rest
    h_root = sum_events(1, np.add.reduceat(at0, [0], axis=1) + drf.held[:1].T, events)
    value, t, r = fit(h_root)
    share = np.zeros((n, dims))
    share[0] = value
    inner_t = np.zeros(n)
    inner_r = np.zeros(n, dtype=bool)
    inner_t[0], inner_r[0] = t, r
    for lv, paths in zip(levels, shares_of, strict=True):
        sl = slice(lv.start, lv.stop)
        up = arr.parent[sl]
        v, inner_t[sl], inner_r[sl] = evaluate(paths, inner_t[up], inner_r[up])
        share[sl] = v.T + drf.held[sl]
    return share, inner_t
