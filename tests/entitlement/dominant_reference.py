"""The exact, pure-Python piecewise-linear implementation of policy `dominant` that
`services/admission/domain/entitlement/dominant.py` replaced: the oracle the vectorised one is
checked against (`test_dominant_equivalence.py`). Slow and literal on purpose; do not optimise
it. Its semantics (the model, the jump rule, left-continuity) are described in `dominant.py`.

Verbatim but for this docstring and ONE deliberate change, `_flag_of_start`. A point interpolated
along a segment (a cut where a pool meets its limit or the root the capacity, a kink, a reading
between two vertices) carries its inner argument `t0 + s * (t1 - t0)` and the flag "not the top of
a jump". When `s` is 0, or so small that the argument rounds to `t0`, and the segment starts at the
top of a jump, the point *is* that top, but the replaced code said "not a top": the children were
then read at the foot of their jumps while the parent kept the top, and the parent held more than
its children added up to. Whether that happened hung on the last bit of a sum (a jump top
adding up to exactly 1.0 gave the foot, 0.9999999999999999 the top), so no reimplementation could
agree with it there. Now such a point keeps the vertex's flag, and the children add up to their
parent in every case.
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


def _flag_of_start(t: float, t0: float, r0: bool) -> bool:
    """The jump-top flag of a point interpolated from a vertex at inner argument `t0` (flag `r0`):
    none, unless its own inner argument rounds to `t0`, where it is that vertex, flag included
    (DEVIATION from the replaced code, which said none: see the module docstring)."""
    return r0 if t == t0 else False


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
                t = t0 + s * (t1 - t0)
                push(y_of(v), v, t, _flag_of_start(t, t0, hr[i]))
        if smax < 1.0:
            if smax > 0.0:
                v = _lerp(a, b, smax)
                t = t0 + smax * (t1 - t0)
                push(y_of(v), v, t, _flag_of_start(t, t0, hr[i]))
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
    t = p.ts[a] + f * (p.ts[lo] - p.ts[a])
    return _lerp(p.vs[a], p.vs[lo], f), t, _flag_of_start(t, p.ts[a], p.rs[a])


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
        t = xs[i] + s * (xs[i + 1] - xs[i])
        return _lerp(a, b, s), t, _flag_of_start(t, xs[i], rs[i])
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
