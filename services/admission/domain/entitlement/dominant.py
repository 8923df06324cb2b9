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

How it is computed
------------------
Exactly, with piecewise-linear vector functions (`_Path`), bottom up then top down:

1. bottom up, each pool's `H` is the sum of its children's `S` (one sort of their breakpoints),
   and its `S` is `H` re-parametrized by `y = max(0, max_k (H_k - g_k) / w)`, cut where it leaves
   the limit (breakpoints added where the maximizing kind changes);
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
the kinds), so the whole is O(jobs * depth * kinds) in pure Python: see `bench/entitlement.py`.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from operator import itemgetter

import numpy as np

from services.admission.domain.entitlement.arrays import TreeArrays
from services.admission.domain.entitlement.model import TOLERANCE, Alert, FloatArray
from services.admission.domain.entitlement.per_resource import aggregate

_EPS = 1e-12
_TINY = 1e-13
"""Arguments closer than this (relatively) are one: a steeper segment is taken as a jump."""
Vec = list[float]


@dataclass(slots=True)
class _Path:
    """A nondecreasing vector polyline: vertex i at argument `xs[i]` has value `vs[i]`; vertices
    sharing an argument form a jump (lower first). `ts[i]` is the element's inner argument at
    vertex i and `rs[i]` whether that is the top of a jump of the inner function."""

    xs: list[float]
    vs: list[Vec]
    ts: list[float]
    rs: list[bool]


def _fits(v: Vec, cap: Vec) -> bool:
    return all(x <= c + _EPS for x, c in zip(v, cap, strict=True))


def _lerp(a: Vec, b: Vec, s: float) -> Vec:
    return [x + s * (y - x) for x, y in zip(a, b, strict=True)]


def _cut(a: Vec, b: Vec, cap: Vec) -> float:
    """Largest s in [0, 1] with a + s (b - a) <= cap (a fits)."""
    s = 1.0
    for x, y, c in zip(a, b, cap, strict=True):
        if y > c + _EPS and y > x:
            s = min(s, (c - x) / (y - x))
    return max(s, 0.0)


def _sum(paths: list[_Path], dims: int) -> _Path:
    """Pointwise sum of left-continuous polylines (of the same argument)."""
    init = [0.0] * dims
    slopes: list[tuple[float, Vec]] = []
    jumps: list[tuple[float, Vec]] = []
    for p in paths:
        xs, vs = p.xs, p.vs
        v0 = vs[0]
        for k in range(dims):
            init[k] += v0[k]
        for i in range(len(xs) - 1):
            x0, x1 = xs[i], xs[i + 1]
            a, b = vs[i], vs[i + 1]
            if x1 - x0 > _TINY * max(1.0, x1):
                inv = 1.0 / (x1 - x0)
                sl = [(y - x) * inv for x, y in zip(a, b, strict=True)]
                slopes.append((x0, sl))
                slopes.append((x1, [-z for z in sl]))
            else:
                jumps.append((x0, [y - x for x, y in zip(a, b, strict=True)]))
    xs_out = [0.0]
    vs_out = [init]
    rs_out = [False]
    if not slopes and not jumps:
        return _Path(xs_out, vs_out, list(xs_out), rs_out)
    events = [(x, 0, v) for x, v in slopes] + [(x, 1, v) for x, v in jumps]
    events.sort(key=itemgetter(0))
    cur = list(init)
    slope = [0.0] * dims
    x = 0.0
    i, n = 0, len(events)
    while i < n:
        xe = events[i][0]
        dsl = [0.0] * dims
        jump = [0.0] * dims
        jumped = False
        while i < n and events[i][0] == xe:
            _, kind, vec = events[i]
            target = jump if kind else dsl
            for k in range(dims):
                target[k] += vec[k]
            jumped = jumped or bool(kind)
            i += 1
        if xe > x:
            cur = [c + s * (xe - x) for c, s in zip(cur, slope, strict=True)]
            x = xe
            xs_out.append(xe)
            vs_out.append(cur)
            rs_out.append(False)
        if jumped and any(j > 0 for j in jump):
            cur = [max(c + j, c) for c, j in zip(cur, jump, strict=True)]
            if xe <= 0.0:
                vs_out[0] = cur
            else:
                xs_out.append(xe)
                vs_out.append(cur)
                rs_out.append(True)
        slope = [s + d for s, d in zip(slope, dsl, strict=True)]
    return _Path(xs_out, vs_out, list(xs_out), rs_out)


def _kinks(c: Vec, m: Vec, smax: float) -> list[float]:
    """Where the top of the lines `c[j] + m[j] * s` changes, for s in (0, smax)."""
    n = len(c)
    cur = max(range(n), key=lambda j: (c[j], m[j]))
    s = 0.0
    out: list[float] = []
    while True:
        best, best_s = -1, smax
        for j in range(n):
            dm = m[j] - m[cur]
            if dm <= 0.0:
                continue
            sj = (c[cur] - c[j]) / dm
            if sj < best_s or (sj == best_s and best >= 0 and m[j] > m[best]):
                best, best_s = j, sj
        if best < 0:
            return out
        if best_s > s:
            out.append(best_s)
            s = best_s
        cur = best


def _compose(h: _Path, g: Vec, lim: Vec, w: float) -> _Path:
    """The share of a pool as a function of its siblings' argument, from its inner `h`."""
    dims = len(g)
    weighted = w > _EPS
    cap = lim if weighted else [min(a, b) for a, b in zip(lim, g, strict=True)]
    inv = 1.0 / w if weighted else 0.0

    def y_of(v: Vec) -> float:
        if not weighted:
            return 0.0
        m = 0.0
        for k in range(dims):
            d = (v[k] - g[k]) * inv
            if d > m:
                m = d
        return m

    def top_line(v: Vec) -> int:
        """Which of the lines (0 = the floor at 0, k + 1 = kind k) gives `y_of(v)`."""
        m, best = 0.0, 0
        for k in range(dims):
            d = v[k] - g[k]
            if d > m:
                m, best = d, k + 1
        return best

    xs: list[float] = []
    vs: list[Vec] = []
    ts: list[float] = []
    rs: list[bool] = []

    def push(y: float, v: Vec, t: float, r: bool) -> None:
        # Arguments within rounding of the previous one are the same (a jump): `_sum` reads them so.
        last = xs[-1] if xs else 0.0
        if y - last <= _TINY * max(1.0, y):
            y = last
        xs.append(y)
        vs.append(v)
        ts.append(t)
        rs.append(r)

    hx, hv, hr = h.xs, h.vs, h.rs
    push(y_of(hv[0]), hv[0], hx[0], hr[0])
    for i in range(len(hx) - 1):
        a, b = hv[i], hv[i + 1]
        if hx[i + 1] <= hx[i]:  # a jump of h: the pool waits at its foot until all of it fits
            if not _fits(b, cap):
                break
            yb = y_of(b)
            if yb > xs[-1]:
                push(yb, a, hx[i], hr[i])
            push(yb, b, hx[i + 1], hr[i + 1])
            continue
        smax = _cut(a, b, cap)
        t0, t1 = hx[i], hx[i + 1]
        # y is convex along the segment: if one line is on top at both ends, it is on top throughout.
        if weighted and smax > 0.0 and top_line(a) != top_line(_lerp(a, b, smax) if smax < 1.0 else b):
            cs = [0.0] + [(a[k] - g[k]) * inv for k in range(dims)]
            ms = [0.0] + [(b[k] - a[k]) * inv for k in range(dims)]
            for s in _kinks(cs, ms, smax):
                v = _lerp(a, b, s)
                push(y_of(v), v, t0 + s * (t1 - t0), False)
        if smax < 1.0:
            if smax > 0.0:
                v = _lerp(a, b, smax)
                push(y_of(v), v, t0 + smax * (t1 - t0), False)
            break
        push(y_of(b), b, t1, hr[i + 1])
    # At y = 0 the pool has its guarantee: keep only the top of the chain at 0.
    first = bisect_right(xs, 0.0) - 1
    if first > 0:
        del xs[:first], vs[:first], ts[:first], rs[:first]
    return _Path(xs, vs, ts, rs)


def _at(p: _Path, y: float, right: bool) -> tuple[Vec, float, bool]:
    """Value, inner argument and jump-top flag at `y` (the top of a jump when `right`)."""
    xs = p.xs
    if y <= 0.0 or len(xs) == 1:
        return p.vs[0], p.ts[0], p.rs[0]
    lo = bisect_left(xs, y)
    if lo == len(xs):
        return p.vs[-1], p.ts[-1], p.rs[-1]
    if xs[lo] == y:
        i = bisect_right(xs, y) - 1 if right else lo
        return p.vs[i], p.ts[i], p.rs[i]
    a = lo - 1
    f = (y - xs[a]) / (xs[lo] - xs[a])
    return _lerp(p.vs[a], p.vs[lo], f), p.ts[a] + f * (p.ts[lo] - p.ts[a]), False


def _fit(h: _Path, cap: Vec) -> tuple[Vec, float, bool]:
    """The furthest point of `h` that fits in `cap`."""
    xs, vs, rs = h.xs, h.vs, h.rs
    for i in range(len(xs) - 1):
        a, b = vs[i], vs[i + 1]
        if _fits(b, cap):
            continue
        if xs[i + 1] <= xs[i]:
            return a, xs[i], rs[i]
        s = _cut(a, b, cap)
        return _lerp(a, b, s), xs[i] + s * (xs[i + 1] - xs[i]), False
    return vs[-1], xs[-1], rs[-1]


def _ramps(jobs: list[tuple[Vec, float]], dims: int) -> _Path:
    """The inner function of a leaf: the sum of its jobs' shares `d / D * min(D, w * t)`."""
    slope = [0.0] * dims
    ends: list[tuple[float, Vec]] = []
    for d, w in jobs:
        top = max(d, default=0.0)
        if top <= _EPS or w <= _EPS:
            continue
        f = w / top
        sl = [x * f for x in d]
        slope = [s + q for s, q in zip(slope, sl, strict=True)]
        ends.append((top / w, sl))
    xs, vs = [0.0], [[0.0] * dims]
    if ends:
        ends.sort(key=itemgetter(0))
        cur, x = vs[0], 0.0
        for end, sl in ends:
            if end > x:
                cur = [c + s * (end - x) for c, s in zip(cur, slope, strict=True)]
                x = end
                xs.append(end)
                vs.append(cur)
            slope = [s - q for s, q in zip(slope, sl, strict=True)]
    return _Path(xs, vs, list(xs), [False] * len(xs))


def _guarantees(arr: TreeArrays, active: list[int], cap: FloatArray) -> tuple[FloatArray, FloatArray, list[Alert]]:
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
        over = sums > gp * (1.0 + _EPS) + _EPS
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


def dominant_entitlements(arr: TreeArrays) -> tuple[FloatArray, FloatArray, list[Alert]]:
    """`(entitlement, requirement, alerts)` of every row under `dominant`."""
    n, k = len(arr.paths), len(arr.kinds)
    kinds = arr.kinds
    # Each leaf's jobs as (absolute demand over all kinds, weight); the revocable pseudo-job last.
    own = (arr.allocation + arr.demand).tolist()
    rev_arr = np.minimum(arr.slack_fraction[:, None] * arr.reservation, arr.revocable_allocation + arr.revocable_demand)
    if arr.cpu >= 0:
        rev_arr[:, arr.cpu] = 0.0
    rev = rev_arr.tolist()
    limits = arr.limit.tolist()
    req_rows = [[0.0] * k for _ in range(n)]
    leaf_jobs: dict[int, list[tuple[Vec, float]]] = {}
    for row in np.flatnonzero(arr.is_leaf).tolist():
        if row == 0:
            continue
        given = arr.jobs[row]
        jobs: list[tuple[Vec, float]]
        if given is None:
            jobs = [(own[row], 1.0)]
        else:
            jobs = [([max(0.0, job.demand.get(kd, 0.0)) for kd in kinds], max(0.0, job.weight)) for job in given]
        if any(x > 0.0 for x in rev[row]):
            jobs.append((rev[row], 1.0))
        leaf_jobs[row] = jobs
        total = [0.0] * k
        for vec, _ in jobs:
            total = [a + b for a, b in zip(total, vec, strict=True)]
        req_rows[row] = [min(a, b) for a, b in zip(total, limits[row], strict=True)]
    requirement = np.array(req_rows, dtype=np.float64).reshape(n, k)
    aggregate(arr, requirement)

    active = [i for i in range(k) if arr.capacity[i] > 0]
    entitlement = np.zeros((n, k))
    if not active or n == 1:
        return entitlement, requirement, []
    cap = arr.capacity[active]
    dims = len(active)
    g_arr, lim_arr, alerts = _guarantees(arr, active, cap)
    g = g_arr.tolist()
    lim = [[math.inf if math.isinf(x) else x for x in row] for row in lim_arr.tolist()]
    weight = arr.weight.tolist()
    inv_cap = (1.0 / cap).tolist()

    paths: list[_Path | None] = [None] * n
    zero = _Path([0.0], [[0.0] * dims], [0.0], [False])
    for lv in reversed(arr.levels):
        for row in range(lv.start, lv.stop):
            if row in leaf_jobs:
                shares = [([vec[a] * inv_cap[j] for j, a in enumerate(active)], w) for vec, w in leaf_jobs[row]]
                h = _ramps(shares, dims)
            else:
                parts = [p for c in arr.children[row] if (p := paths[c]) is not None]
                h = _sum(parts, dims) if parts else zero
            paths[row] = _compose(h, g[row], lim[row], weight[row])

    top = [p for c in arr.children[0] if (p := paths[c]) is not None]
    value, t, r = _fit(_sum(top, dims), [1.0] * dims)
    share = np.zeros((n, dims))
    share[0] = value
    inner: list[tuple[float, bool]] = [(0.0, False)] * n
    inner[0] = (t, r)
    for lv in arr.levels:
        for row in range(lv.start, lv.stop):
            p = paths[row]
            assert p is not None
            pt, pr = inner[int(arr.parent[row])]
            v, ct, cr = _at(p, pt, pr)
            share[row] = v
            inner[row] = (ct, cr)
    entitlement[:, active] = share * cap
    return entitlement, requirement, alerts
