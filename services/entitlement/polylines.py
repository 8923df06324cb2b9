"""Vectorised piecewise-linear vector functions for policy `dominant` (see `dominant.py`).

A `Polylines` holds one nondecreasing, left-continuous vector polyline per row of a level of the
tree, all in flat arrays (CSR): row `i` owns vertices `off[i]:off[i + 1]` (never none). Vertex `j`
sits at argument `x[j]` with value `v[:, j]` (kinds-major: one row of `v` per kind); vertices
sharing an argument form a jump (lower first). `t[j]` is the row's inner argument there and `r[j]`
whether that is the top of a jump of the inner function.

The operations of the computation, each a fixed number of array operations over a whole level
whatever its shape (no Python loop over pools or vertices):

* `sum_events`: pointwise sums of polylines (`polyline_events`) and of jobs' ramps
  (`ramp_events`), given as events (slope changes and jumps at arguments) per row. One sort of the
  level's breakpoints by (row, argument), then cumulative sums.
* `compose`: a pool's share as a function of its siblings' argument, from its inner sum.
* `evaluate`: every row's value at its parent's argument (top down); `fit` for the root.

Each is the vectorised counterpart of a step of the literal one-pool-at-a-time implementation
this replaced: the same vertices, tolerances and tie rules; only floating-point sums are
associated differently (last-bit differences). The test oracle is written from DOMAIN §3 alone
(`tests/entitlement/dominant_oracle.py`), not from this code. A point interpolated
along a segment is not the top of a jump, unless its inner argument is (or rounds to) that of the
segment's first vertex: then it is that vertex, jump-top flag included, so that the children are
read where their parent is whatever the last bit of a sum (see the oracle's docstring).

Layout and numpy: values are `(kinds, vertices)` so that per-vertex reductions over the kinds are
reductions along axis 0 and per-vertex scalars broadcast along the contiguous axis; rows of
vertices are gathered with `np.take` and `np.compress` (much faster than fancy indexing).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from services.entitlement.model import BoolArray, FloatArray, IntArray

EPS = 1e-12
"""Fit tolerance, in shares."""
TINY = 1e-13
"""Arguments closer than this (relatively) are one: a steeper segment is taken as a jump."""
_NO_STOP = int(np.iinfo(np.intp).max)
"""`compose`'s stop of a row that never leaves its box (`np.iinfo` costs microseconds a call)."""


@dataclass(slots=True)
class Polylines:
    off: IntArray
    x: FloatArray
    v: FloatArray
    t: FloatArray
    r: BoolArray

    @property
    def rows(self) -> int:
        return len(self.off) - 1

    def row_ids(self) -> IntArray:
        return np.arange(self.rows, dtype=np.intp).repeat(int_diff(self.off))


@dataclass(slots=True)
class Events:
    """What the parts summed into each row of a level do: changes of slope (`jump` False: from `x`
    on, the slope grows by `vec[:, i]`) and jumps (`vec` is added at `x`), each for the row
    `group`; and, apart (they need no sorting), the slopes that start at 0: `start_vec[:, i]` for
    the row `start_group[i]`."""

    x: FloatArray
    vec: FloatArray
    jump: BoolArray
    group: IntArray
    start_vec: FloatArray
    start_group: IntArray

    @staticmethod
    def concat(parts: list[Events]) -> Events:
        if len(parts) == 1:
            return parts[0]
        return Events(
            np.concatenate([p.x for p in parts]),
            np.concatenate([p.vec for p in parts], axis=1),
            np.concatenate([p.jump for p in parts]),
            np.concatenate([p.group for p in parts]),
            np.concatenate([p.start_vec for p in parts], axis=1),
            np.concatenate([p.start_group for p in parts]),
        )


def trues(n: int) -> BoolArray:
    """`np.ones(n, dtype=bool)` without its Python-level cost (`np.ones` and `np.full` are Python
    functions: ~2 µs a call against ~0.4, called a few hundred times a computation)."""
    out: BoolArray = np.empty(n, dtype=bool)
    out.fill(True)
    return out


def stable_argsort(x: FloatArray | IntArray) -> IntArray:
    """`x.argsort(kind="stable")`, the same permutation: numpy's default sort (a SIMD kernel, some
    4x faster here than its merge sort on floats) puts the values in order, then each run of equal
    values is put in index order (one integer sort of unique keys) when there is one. The result is
    fixed whatever the kernel: values in order, ties by index, as the stable sort has them. A NaN
    (last in either sort, never equal to itself) takes the stable sort; values in order already (a
    NaN compares false) are their own order."""
    n = x.size
    if n < 2 or np.count_nonzero(x[1:] >= x[:-1]) == n - 1:
        return np.arange(n, dtype=np.intp)
    order: IntArray = x.argsort()
    xs = x[order]
    if xs[-1] != xs[-1]:
        out: IntArray = x.argsort(kind="stable")
        return out
    new = np.empty(n, dtype=bool)
    new[0] = True
    np.greater(xs[1:], xs[:-1], out=new[1:])
    if np.count_nonzero(new) == n:
        return order
    return sorted_minor(new.cumsum() - 1, order, n)


def sorted_minor(major: IntArray, minor: IntArray, n: int) -> IntArray:
    """`minor` (distinct integers in `[0, n)`, `major` non-negative) put in order of `(major,
    minor)`: one sort of the unique int64 keys `major << bits | minor`, read back with a mask
    (`major * n + minor` orders them the same, but reading it back is a `% n`, an integer
    division per key)."""
    bits = max(1, (n - 1).bit_length())
    key = major.astype(np.int64) << bits
    key |= minor
    key.sort()
    key &= (1 << bits) - 1
    return key


def by_group_and_x(group: IntArray, x: FloatArray) -> IntArray:
    """The order of events by `(group, x)`, equal ones by index (the stable sort's): one stable
    sort of the complex numbers `group + x i`, which numpy orders by real part, then imaginary
    part. Its merge sort takes the runs of sorted events a level is made of (each child's
    vertices in order, children by row) whole: 0.2-1 ms on 13-26k events, where ranking by `x`
    and sorting `(group, rank)` took 1.6-3.7. A NaN argument (numpy's sort puts a complex number
    with a NaN part after every other, whatever its group: there is one when the last is one)
    takes that way instead: a NaN last in its group, as the stable sort by `x` has it."""
    n = x.size
    key = np.empty(n, dtype=np.complex128)
    key.real = group
    key.imag = x
    order: IntArray = key.argsort(kind="stable")
    if n and x[order[-1]] != x[order[-1]]:
        by_x = stable_argsort(x)
        rank = np.empty(n, dtype=np.int64)
        rank[by_x] = np.arange(n, dtype=np.int64)
        out: IntArray = by_x[sorted_minor(group, rank, n)]
        return out
    return order


def int_diff(a: IntArray) -> IntArray:
    """`np.diff` of a 1-d array, without its Python-level overhead (~10 µs a call, called a few
    hundred times a computation on arrays of a few dozen entries in `hdrf`'s later epochs)."""
    out: IntArray = a[1:] - a[:-1]
    return out


def _segments(off: IntArray) -> tuple[IntArray, IntArray]:
    """Index of the first vertex of every segment (two consecutive vertices of one row), and its
    row. Row `r` has `off[r + 1] - off[r] - 1` segments, and the `i`-th segment of all is at
    vertex `i + r` (each row before it has one vertex more than segments): two passes, where a
    mask of the rows' last vertices and its `nonzero` took ~5x as long."""
    row = np.arange(off.size - 1, dtype=np.intp).repeat(int_diff(off) - 1)
    first: IntArray = np.arange(row.size, dtype=np.intp) + row
    return first, row


def offsets_of(counts: IntArray) -> IntArray:
    off = np.zeros(len(counts) + 1, dtype=np.intp)
    counts.cumsum(out=off[1:])
    return off


def first_places(ids: IntArray, counts: IntArray | BoolArray, rows: int) -> IntArray:
    """Where each of `rows` rows' places start when it has one of its own and `counts` more per
    entry `ids` gives it (`ids` in order): the running sums of `counts` read at each row's first
    entry (a bincount with `counts` as weights, which converts them to floats and back, took ~2x)."""
    every = np.arange(rows + 1, dtype=np.intp)
    first_entry = offsets_of(np.bincount(ids, minlength=rows))
    out: IntArray = every + np.concatenate(([0], counts.cumsum())).take(first_entry)
    return out


def shifted(a: FloatArray, first: IntArray, fill: FloatArray | float) -> FloatArray:
    """`a` moved one step along the last axis; at the indices `first`, `fill` instead."""
    out = np.empty_like(a)
    out[..., 1:] = a[..., :-1]
    if a.ndim == 1 or isinstance(fill, float):
        out[..., first] = fill
    else:
        scatter(out, first, fill)
    return out


def polyline_events(p: Polylines, group_of_row: IntArray) -> tuple[Events, FloatArray]:
    """The events of the rows of `p` (each summed into group `group_of_row[row]`), and each row's
    value at 0. A segment shorter than `TINY` (relatively) is a jump at its start."""
    events, at0, _, _ = polyline_jumps(p, group_of_row)
    return events, at0


def polyline_jumps(p: Polylines, group_of_row: IntArray) -> tuple[Events, FloatArray, IntArray, IntArray]:
    """`polyline_events`, and the first vertex and the row of each segment taken as a jump (in
    the order of its events, which come last), for `hdrf`'s runs (found once, not again)."""
    i0, seg_row = _segments(p.off)
    i1 = i0 + 1
    grp = group_of_row.take(seg_row)
    x0, x1 = p.x.take(i0), p.x.take(i1)
    delta = (p.v[:, 1:] - p.v[:, :-1]).take(i0, axis=1)  # (one difference, then one gather, not two)
    dx = x1 - x0
    sloped = dx > TINY * np.maximum(1.0, x1)
    s = sloped.nonzero()[0]
    j = (~sloped).nonzero()[0]
    sl = delta.take(s, axis=1) * (1.0 / dx.take(s))
    x0s = x0.take(s)
    at0 = x0s <= 0.0
    s0 = at0.nonzero()[0]
    s1 = (~at0).nonzero()[0]
    sg = grp.take(s)
    ns, nj = s1.size, j.size
    x = np.concatenate([x0s.take(s1), x1.take(s), x0.take(j)])
    vec = np.concatenate([sl.take(s1, axis=1), -sl, delta.take(j, axis=1)], axis=1)
    jump = np.zeros(ns + s.size + nj, dtype=bool)
    jump[ns + s.size :] = True
    group = np.concatenate([sg.take(s1), sg, grp.take(j)])
    events = Events(x, vec, jump, group, sl.take(s0, axis=1), sg.take(s0))
    return events, p.v.take(p.off[:-1], axis=1), i0.take(j), seg_row.take(j)


def ramp_events(shares: FloatArray, weight: FloatArray, group: IntArray) -> Events:
    """Jobs as events: a job of share vector `d` (dominant component `D`) and weight `w` grows
    along its own direction, `d / D * min(D, w * t)`: slope `d * (w / D)` from 0 to `D / w`."""
    top = shares.max(axis=0) if len(shares) else np.zeros(shares.shape[1])
    keep = (top > EPS) & (weight > EPS)
    d = shares.compress(keep, axis=1)
    w, top, grp = weight[keep], top[keep], group[keep]
    sl = d * (w / top)
    return Events(top / w, -sl, np.zeros(w.size, dtype=bool), grp, sl, grp)


_PAIRED = 4_000
"""From this many columns on, `cumsum_rows` sums two rows at a time as complex numbers."""
_LARGE = 4_000
"""From this many vertices on, `compose` gathers its values without first joining their sources
(a copy of every vertex's values, `(kinds, n)`, to keep some); below it, in fewer calls."""


def cumsum_rows(values: FloatArray, out: FloatArray | None = None) -> FloatArray:
    """`values.cumsum(axis=1)` of a `(kinds, n)` array, the same bits: from `_PAIRED` columns on,
    two rows at a time as the real and imaginary parts of complex numbers. A complex sum is the
    sums of its parts, each rounded as on its own, and numpy's running sum costs about as much a
    complex term as a float one (~4-5 ns here, bound by its loop, not by the adds): half the passes."""
    dims, n = values.shape
    if out is None:
        out = np.empty((dims, n))
    if n < _PAIRED or dims < 2:
        np.cumsum(values, axis=1, out=out)
        return out
    pairs = dims // 2
    both = np.empty((pairs, n), dtype=np.complex128)
    both.real = values[0 : 2 * pairs : 2]
    both.imag = values[1 : 2 * pairs : 2]
    summed = both.cumsum(axis=1)  # (not in place: numpy copies an input its output overlaps)
    out[0 : 2 * pairs : 2] = summed.real
    out[1 : 2 * pairs : 2] = summed.imag
    if dims % 2:
        np.cumsum(values[-1], out=out[-1])
    return out


def segmented_cumsum(values: FloatArray, starts: IntArray, rebase: bool, scratch: bool = False) -> FloatArray:
    """Inclusive cumulative sums along axis 1, restarting at the indices `starts` (0 among them).

    One cumulative sum over all segments, less its value before each segment. With `rebase`
    (terms of one sign, whose sums keep growing), a second pass takes each segment's total (as the
    first pass found it) off at its last term, so that the running sum is back near 0 at every
    segment's start and rounding is relative to each segment's own sums, not to all before it.
    `scratch`: `values` is the caller's temporary, changed here rather than copied (a `(kinds, n)`
    copy less: the first epoch of `hdrf` sums some 80k terms a depth)."""
    lengths = int_diff(np.concatenate((starts, [values.shape[1]])))
    c = cumsum_rows(values)
    ends: IntArray | None = None
    totals = np.zeros(0)
    if rebase and starts.size > 1:
        ends = np.concatenate((starts[1:], [values.shape[1]])) - 1
        totals = c.take(ends, axis=1)  # np.diff(.., prepend=0.0), without its Python-level cost
        totals[:, 1:] -= totals[:, :-1].copy()
        if not scratch:
            values = values.copy()
        for k in range(values.shape[0]):
            values[k][ends] -= totals[k]
        cumsum_rows(values, out=c)
    before = np.zeros((values.shape[0], starts.size))
    before[:, 1:] = c.take(starts[1:] - 1, axis=1)
    out: FloatArray = c
    out -= before.repeat(lengths, axis=1)  # in place: `c` is this function's own
    if ends is not None:
        for k in range(values.shape[0]):
            out[k][ends] += totals[k]
    return out


def segmented_cumsum_at(values: FloatArray, starts: IntArray, at: IntArray, seg: IntArray | None = None
                        ) -> FloatArray:
    """`segmented_cumsum(values, starts, rebase=False)[:, at]`, the same numbers, without the
    whole `(kinds, n)` difference: each `at`'s cumulative sum less its segment's sum before it.
    `at` increasing (distinct columns); `seg`, when the caller has it: the segment of each `at`
    (else searched for)."""
    c = cumsum_rows(values)
    before = np.zeros((values.shape[0], starts.size))
    before[:, 1:] = c.take(starts[1:] - 1, axis=1)
    if seg is None:
        seg = starts.searchsorted(at, side="right") - 1
    if at.size == c.shape[1]:  # every column (a level of jobs: one event an argument), in order
        c -= before.take(seg, axis=1)
        return c
    out: FloatArray = c.take(at, axis=1) - before.take(seg, axis=1)
    return out


def scatter(dst: FloatArray, idx: IntArray, src: FloatArray) -> None:
    """`dst[:, idx] = src`, one kind at a time (faster than a 2-d fancy assignment)."""
    for k in range(dst.shape[0]):
        dst[k][idx] = src[k]


def start_slopes(start_group: IntArray, start_vec: FloatArray, dims: int, rows: int) -> FloatArray:
    """Each row's slope from argument 0, `(dims, rows)`: the summed slopes `start_vec` of the
    segments that start at 0, by row `start_group` (they need no sorting)."""
    slope0 = np.zeros((dims, rows))
    if start_group.size:
        for k in range(dims):
            slope0[k] = np.bincount(start_group, weights=start_vec[k], minlength=rows)
    return slope0


def sum_events(rows: int, init: FloatArray, ev: Events) -> Polylines:
    """Per row of the level, the sum of its parts: `init[:, row]` plus the effect of its events,
    walked in order of argument. A vertex (the foot) at each argument where something happens, and
    a second one (flagged) on top when something jumps there; a jump at 0 lifts the first vertex."""
    dims = init.shape[0]
    # slopes that start at 0 (most jobs' and most children's first segments) need no sorting
    slope0 = start_slopes(ev.start_group, ev.start_vec, dims, rows)
    n = ev.x.size
    if n == 0:
        x0 = np.zeros(rows)
        return Polylines(np.arange(rows + 1, dtype=np.intp), x0, init.copy(), x0.copy(), np.zeros(rows, dtype=bool))
    # sort by (group, x, event): equal ones by event (a stable sort, whatever numpy's kernels
    # for this CPU)
    order = by_group_and_x(ev.group, ev.x)
    xs, gs, js = ev.x[order], ev.group[order], ev.jump[order]
    vs = ev.vec.take(order, axis=1)
    gnew = trues(n)
    gnew[1:] = gs[1:] != gs[:-1]
    new = gnew.copy()
    new[1:] |= xs[1:] != xs[:-1]
    ds = new.nonzero()[0]  # first event of each distinct (group, x)
    de = np.concatenate((ds[1:], [n])) - 1  # last one
    dg, dx = gs[ds], xs[ds]
    nd = ds.size
    gfirst = gnew[ds].nonzero()[0]
    any_jump = bool(js.any())
    # slope after each distinct argument: cumulative sums of the slope changes, per group, from
    # the slope at 0
    slopes = vs * ~js if any_jump else vs.copy()
    gi = gnew.nonzero()[0]
    start_slope = slope0.take(gs[gi], axis=1)
    for k in range(dims):
        slopes[k][gi] += start_slope[k]
    slope_after = segmented_cumsum_at(slopes, gi, de)
    slope_before = shifted(slope_after, gfirst, start_slope)
    xprev = shifted(dx, gfirst, 0.0)
    inc = slope_before * (dx - xprev)
    dj = np.zeros((dims, nd))
    lifted = np.zeros(nd, dtype=bool)
    if any_jump:
        ji = js.nonzero()[0]
        run = (new.cumsum() - 1)[ji]
        rnew = trues(ji.size)
        rnew[1:] = run[1:] != run[:-1]
        runs = run[rnew]
        sums = np.maximum(np.add.reduceat(vs.take(ji, axis=1), rnew.nonzero()[0], axis=1), 0.0)
        scatter(dj, runs, sums)
        lifted[runs] = (sums > 0.0).any(axis=0)
    top = init.take(dg, axis=1) + segmented_cumsum(inc + dj if any_jump else inc, gfirst, rebase=True)
    before = shifted(top, gfirst, init.take(dg[gfirst], axis=1))
    foot = before + inc
    emit_foot = dx > xprev
    emit_top = lifted & (dx > 0.0)
    v0 = init.copy()
    at0 = (lifted & (dx <= 0.0)).nonzero()[0]  # a jump at 0 lifts the first vertex
    scatter(v0, dg[at0], top.take(at0, axis=1))
    cnt = emit_foot.astype(np.intp) + emit_top
    off = first_places(dg, cnt, rows)
    total = int(off[-1])
    x = np.zeros(total)
    r = np.zeros(total, dtype=bool)
    # every vertex's source: the first vertices, then the feet, then the tops
    pos_foot = cnt.cumsum() - cnt + dg + 1
    fi = emit_foot.nonzero()[0]
    ti = emit_top.nonzero()[0]
    src = np.empty(total, dtype=np.intp)
    src[off[:-1]] = np.arange(rows)
    pf = pos_foot[fi]
    src[pf] = rows + np.arange(fi.size)
    x[pf] = dx[fi]
    if ti.size:
        pt = pos_foot[ti] + emit_foot[ti]
        src[pt] = rows + fi.size + np.arange(ti.size)
        x[pt] = dx[ti]
        r[pt] = True
    pool = np.concatenate([v0, foot.take(fi, axis=1), top.take(ti, axis=1)], axis=1)
    return Polylines(off, x, pool.take(src, axis=1), x.copy(), r)


def _y_of(above: FloatArray, inv: FloatArray, weighted: BoolArray | None) -> FloatArray:
    """`max(0, max_k (v_k - g_k) / w)` per vertex from `above = v - g` (0 for a pool without
    weight; `weighted` None: every pool has one)."""
    y: FloatArray = np.maximum((above * inv).max(axis=0), 0.0)
    if weighted is not None:
        y = np.where(weighted, y, 0.0)
    return y


_WIDE = 256
"""From this many columns on, `_first_true` takes a maximum down the columns rather than numpy's
`argmax(axis=0)`, which walks each column on its own (~20 ns an element against ~1: 0.2 ms for
5 x 10k, several times per depth in `compose`); below it, `argmax` (fewer calls)."""


def _first_true(mask: BoolArray, none: int | None = None) -> IntArray:
    """Per column, the first row where `mask` holds; where none does, `none` (None: the number
    of rows)."""
    lines, n = mask.shape
    if none is None:
        none = lines
    if n < _WIDE or lines > 127:
        # argmax of booleans is the first True (0 when none): three calls, not one per row
        out: IntArray = mask.argmax(axis=0)
        if none != 0:
            out[~mask.any(axis=0)] = none
        return out
    # row r weighs lines - r: the largest weight held is the first row's (0: none holds)
    top = (mask * _DESCENDING[lines]).max(axis=0)
    out = lines - top.astype(np.intp)
    if none != lines:
        out[top == 0] = none
    return out


_DESCENDING = [np.arange(lines, 0, -1, dtype=np.int8)[:, None] for lines in range(128)]
"""`_first_true`'s weights, `lines, lines - 1, ..., 1` down a column, for up to 127 rows."""


def _top_line(above: FloatArray) -> IntArray:
    """Which of the lines (0 = the floor at 0, k + 1 = kind k) is on top, from `above = v - g`; the
    first on ties."""
    best: IntArray = np.zeros(above.shape[1], dtype=np.intp)
    m = np.zeros(above.shape[1])
    for k in range(above.shape[0]):
        d = above[k]
        up = d > m
        np.copyto(best, k + 1, where=up)
        # `np.where(up, d, m)` in place: fmax keeps `m` where `d` is NaN, and where they are equal
        # either is the same number (a zero's sign aside, which `d > m` does not see)
        np.fmax(m, d, out=m)
    return best


_FEW = 16
"""`_kinks` on at most this many columns walks them in plain Python (`_kinks_few`): its numpy form
costs ~20 calls a line whatever the width (0.1-0.2 ms), which `hdrf`'s later epochs pay on a few
columns a depth."""


def _kinks(c: FloatArray, m: FloatArray, smax: FloatArray) -> tuple[FloatArray, IntArray]:
    """Where the top of the lines `c[j] + m[j] * s` changes, for s in (0, smax), per column:
    `(kinks (lines, n) padded with nan, count)`. Ties: the highest line at 0 (the steepest among
    equals) starts; the next is the earliest crossing (the steepest, then the first, among equals)."""
    if c.shape[1] <= _FEW:
        return _kinks_few(c, m, smax)
    return _kinks_many(c, m, smax)


def _nan_max(values: list[float]) -> float:
    """`np.max` of a few floats: NaN when any is (Python's `max` depends on where it is)."""
    for v in values:
        if v != v:
            return v
    return max(values)


def _kinks_few(c: FloatArray, m: FloatArray, smax: FloatArray) -> tuple[FloatArray, IntArray]:
    """`_kinks_many`, column by column in Python floats: the same IEEE operations on the same
    operands (a difference, a quotient where the slope rises), the same comparisons and ties,
    so the same bits; without its fixed cost in numpy calls."""
    lines, n = c.shape
    out = np.empty((lines, n))
    out.fill(np.nan)
    cnt = np.zeros(n, dtype=np.intp)
    inf = math.inf
    every = range(lines)
    for j, (cj, mj, sa) in enumerate(zip(c.T.tolist(), m.T.tolist(), smax.tolist(), strict=True)):
        c_top = _nan_max(cj)
        top = [i for i in every if cj[i] == c_top]
        m_top = _nan_max([mj[i] for i in top]) if top else -inf
        cur = next((i for i in top if mj[i] == m_top), lines)  # (as `_first_true`: none, `lines`)
        steepest = _nan_max(mj)
        s = 0.0
        found = 0
        for _ in every:
            m_cur, c_cur = mj[cur], cj[cur]
            sj = [inf] * lines
            for i in every:
                dm = mj[i] - m_cur
                if dm > 0.0:
                    q = (c_cur - cj[i]) / dm
                    if q < sa:
                        sj[i] = q
            best_s = min(sj)
            tie = [i for i in every if sj[i] == best_s]
            m_tie = _nan_max([mj[i] for i in tie])
            best = next((i for i in tie if mj[i] == m_tie), 0)
            if best_s == inf:
                break
            if best_s > s:
                out[found, j] = best_s
                found += 1
                s = best_s
            cur = best
            if not steepest > mj[best]:
                break
        cnt[j] = found
    return out, cnt


def _kinks_many(c: FloatArray, m: FloatArray, smax: FloatArray) -> tuple[FloatArray, IntArray]:
    """`_kinks`, a whole level's columns at once, line by line."""
    lines, n = c.shape
    top = c == c.max(axis=0)
    cur = _first_true(top & (m == np.where(top, m, -np.inf).max(axis=0)))
    s = np.zeros(n)
    out = np.empty((lines, n))
    out.fill(np.nan)
    cnt = np.zeros(n, dtype=np.intp)
    alive = np.arange(n)
    # (C order: the line `cu` of column `k` is item `cu * columns + k`, one gather, not a 2-d one)
    ca, ma, sa = np.ascontiguousarray(c), np.ascontiguousarray(m), smax
    top_m = ma.max(axis=0)
    flat_out = out.reshape(-1)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for _ in range(lines):
            if alive.size == 0:
                break
            k = np.arange(alive.size)
            at = cur.take(alive) * alive.size + k
            dm = ma - ma.take(at)
            sj = np.where(dm > 0.0, (ca.take(at) - ca) / dm, np.inf)
            # a crossing before `sa` (where no line rises above the current one `sj` is inf, and
            # inf < sa is false whatever `sa`); a column has one when its least is below inf
            sj = np.where(sj < sa, sj, np.inf)
            best_s = sj.min(axis=0)
            has = best_s < np.inf
            # the columns without one take no `best` below: their ties need no mask
            tie = sj == best_s
            best = _first_true(tie & (ma == np.where(tie, ma, -np.inf).max(axis=0)), none=0)
            app = has & (best_s > s.take(alive))
            done = alive.compress(app)
            found = best_s.compress(app)
            flat_out[cnt.take(done) * n + done] = found
            cnt[done] += 1
            s[done] = found
            cur[alive.compress(has)] = best.compress(has)
            # from the steepest line, nothing crosses above any more
            has &= top_m > ma.take(best * alive.size + k)
            alive = alive.compress(has)
            ca, ma = ca.compress(has, axis=1), ma.compress(has, axis=1)
            sa, top_m = sa.compress(has), top_m.compress(has)
    return out, cnt


def snap(y: FloatArray, off: IntArray) -> tuple[FloatArray, FloatArray]:
    """Per row (vertices `off[i]:off[i + 1]`), an argument within `TINY` (relatively) above, or
    below, the previous one kept is that one: with `last = 0` at each row's start, `y <= last +
    TINY * max(1, y)` gives `last`, else `y` (and `last = y`). `(snapped, last before each)`.

    A causal recurrence, solved without a loop over vertices: guess each decision from the raw
    previous argument, then correct from the arguments kept until the decisions are a fixed point
    (by induction, then the recurrence's own); one or two passes unless arguments creep up by less
    than `TINY` at a time."""
    start = off[:-1]
    tol = TINY * np.maximum(1.0, y)
    prev = shifted(y, start, 0.0)
    new = y - prev > tol
    row_first = off[:-1].repeat(int_diff(off))
    while True:
        # the last new one at or before each vertex (-1: none), as the count of new ones so far
        # into their list (a running maximum of indices took twice as long)
        last_new = np.concatenate(([-1], new.nonzero()[0])).take(new.cumsum())
        kept = np.where(last_new >= row_first, y.take(np.maximum(last_new, 0)), 0.0)
        prev = shifted(kept, start, 0.0)
        again = y - prev > tol
        if np.count_nonzero(again != new) == 0:
            return np.where(new, y, prev), prev
        new = again


def compose(h: Polylines, g: FloatArray, cap: FloatArray, weight: FloatArray, ordinal: bool = False) -> Polylines:
    """Each row's share as a function of its siblings' argument `y`, from its inner polyline `h`:
    `h` re-parametrized by `y = max(0, max_k (h_k - g_k) / w)`, cut where it leaves `cap`.

    Along `h`: a jump of `h` is taken (at the `y` of its top, after waiting at its foot) only when
    all of it fits, else the row ends at its foot; a segment is cut where it leaves `cap` (the row
    ends there), with a vertex wherever the kind that gives `y` changes. Arguments within `TINY`
    of the previous one are the previous one; at `y = 0` only the top of the chain is kept.

    `ordinal`: `h`'s arguments are its vertices' ordinals in their row, and no vertex is the top
    of a jump (`hdrf`'s inner sums, `Inner.as_polylines`): no segment is a jump, so the passes
    over jumps are left out (the same vertices: they would find none), and neither `h.x`, `h.t`
    nor `h.r` is read (`Inner.as_ordinal` leaves them empty)."""
    dims, rows = g.shape
    weighted = weight > EPS
    inv = np.where(weighted, 1.0 / np.where(weighted, weight, 1.0), 0.0)
    off = h.off
    i0, srow = _segments(off)
    i1 = i0 + 1
    counts = int_diff(off)
    pos = i0 - off.take(srow)  # (each segment's place in its row)
    if ordinal:  # the arguments are the ordinals: each segment's is its place (`h.x` is not read)
        x0 = pos.astype(np.float64)
        x1 = x0 + 1.0
    else:
        x0, x1 = h.x.take(i0), h.x.take(i1)
    # at every vertex of h: whether it fits, how far above its guarantee, its y, and which line
    # gives that y (each row's numbers repeated for its vertices: a repeat copies runs, ~2x a gather)
    fits = np.logical_not((h.v > (cap + EPS).repeat(counts, axis=1)).any(axis=0))  # (the same sums, per row)
    above = h.v - g.repeat(counts, axis=1)
    all_weighted = bool(weighted.all())  # (mostly: then no vertex's y is put to 0 for its row)
    yh = _y_of(above, inv.repeat(counts), None if all_weighted else weighted.repeat(counts))
    line = _top_line(above)
    is_jump = None if ordinal else x1 <= x0  # (None: no jump)
    fits_b = fits.take(i1)
    # where a segment leaves the box: the largest s in [0, 1] with a + s (b - a) <= cap (1 when b fits)
    smax = np.empty(i0.size)
    smax.fill(1.0)
    out = (~fits_b if is_jump is None else ~fits_b & ~is_jump).nonzero()[0]
    if out.size:
        ao, bo, co = h.v.take(i0[out], axis=1), h.v.take(i1[out], axis=1), cap.take(srow[out], axis=1)
        over = (bo > co + EPS) & (bo > ao)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            ratio = np.where(over, (co - ao) / (bo - ao), 1.0)
        smax[out] = np.maximum(ratio.min(axis=0), 0.0)
    fail = smax < 1.0 if is_jump is None else np.where(is_jump, ~fits_b, smax < 1.0)
    # each row stops at its first failing segment (included: a cut segment still gives vertices)
    stop = np.empty(rows, dtype=np.intp)
    stop.fill(_NO_STOP)
    fi = fail.nonzero()[0]
    if fi.size:
        fr = srow[fi]
        firsts = trues(fi.size)
        firsts[1:] = fr[1:] != fr[:-1]
        stop[fr[firsts]] = pos[fi[firsts]]
    active = pos <= stop.take(srow)
    brk = active & fail
    seg_ok = active if is_jump is None else active & ~is_jump
    # where the kind that gives y changes along a segment (y is convex along it: if one line is on
    # top at both ends, it is on top throughout)
    nk = np.zeros(i0.size, dtype=np.intp)
    kink_s = np.zeros((dims + 1, 0))
    kseg = (seg_ok & weighted.take(srow) & (smax > 0.0)).nonzero()[0]
    if kseg.size:
        sc = smax.take(kseg)
        end_line = line.take(i1.take(kseg))
        part = (sc < 1.0).nonzero()[0]
        if part.size:
            pk = kseg[part]
            ap = h.v.take(i0[pk], axis=1)
            cut = ap + sc[part] * (h.v.take(i1[pk], axis=1) - ap)
            end_line[part] = _top_line(cut - g.take(srow[pk], axis=1))
        kseg = kseg.compress(line.take(i0.take(kseg)) != end_line)
        if kseg.size:
            invk = inv[srow[kseg]]
            cs = np.zeros((dims + 1, kseg.size))
            ms = np.zeros((dims + 1, kseg.size))
            cs[1:] = above.take(i0[kseg], axis=1) * invk
            ms[1:] = (h.v.take(i1[kseg], axis=1) - h.v.take(i0[kseg], axis=1)) * invk
            kink_s, kc = _kinks(cs, ms, smax[kseg])
            nk[kseg] = kc
    # how many vertices each segment gives, and where they go (after the row's first vertex)
    cnt = np.where(seg_ok, nk + np.where(brk, smax > 0.0, 1), 0)
    if is_jump is not None:
        jump_ok = active & is_jump & ~brk
        cnt = np.where(jump_ok, 2, 0) + cnt
    # each row's first output vertex: the row's own first, then its segments' (row r's segments
    # start at segment off[r] - r): running sums, where a bincount of them by row took ~2x
    ccnt = cnt.cumsum()
    every = np.arange(rows + 1, dtype=np.intp)
    ooff = every + np.concatenate(([0], ccnt)).take(off - every)
    total = int(ooff[-1])
    orow = every[:-1].repeat(int_diff(ooff))
    pos_seg = ccnt - cnt + srow + 1
    ot = np.empty(total)
    orr = np.zeros(total, dtype=bool)  # (`ordinal`: no vertex is a jump's top, nor any of these)
    src = np.empty(total, dtype=np.intp)  # where each vertex's value comes from, in `pool` below
    first = off[:-1]
    src[ooff[:-1]] = first  # h's vertices come first in the pool
    ot[ooff[:-1]] = 0.0 if ordinal else h.x.take(first)
    if not ordinal:
        orr[ooff[:-1]] = h.r.take(first)
    nv = h.v.shape[1]
    # kinks and cuts: points inside segments, at s
    kq = (nk[kseg] > 0).nonzero()[0] if kseg.size else np.zeros(0, dtype=np.intp)
    reps = nk[kseg[kq]]
    ks = kseg[kq].repeat(reps)
    within = np.arange(ks.size) - (reps.cumsum() - reps).repeat(reps)
    c = (seg_ok & brk & (smax > 0.0)).nonzero()[0]
    inner_seg = np.concatenate([ks, c])
    inner_s = np.concatenate([kink_s[within, kq.repeat(reps)], smax[c]])
    inner_pos = np.concatenate([pos_seg[ks] + within, pos_seg[c] + nk[c]])
    ai = h.v.take(i0[inner_seg], axis=1)
    inner_v = ai + inner_s * (h.v.take(i1[inner_seg], axis=1) - ai)
    src[inner_pos] = nv + np.arange(inner_seg.size)
    x0i = x0.take(inner_seg)
    ti = x0i + inner_s * (x1.take(inner_seg) - x0i)
    ot[inner_pos] = ti
    if not ordinal:
        orr[inner_pos] = (ti == x0i) & h.r[i0[inner_seg]]  # a point at its segment's start is that vertex
    # segment ends: h's vertices
    e = (seg_ok & ~brk).nonzero()[0]
    p = pos_seg.take(e) + nk.take(e)
    i1e = i1.take(e)
    src[p] = i1e
    ot[p] = x1.take(e)
    if not ordinal:
        orr[p] = h.r.take(i1e)
    if is_jump is not None:
        # jumps of h: the foot (kept only when its top needs a larger y), then the top
        jj = jump_ok.nonzero()[0]
        pj = pos_seg[jj]
        src[pj] = i0[jj]
        ot[pj] = x0[jj]
        orr[pj] = h.r[i0[jj]]
        src[pj + 1] = i1[jj]
        ot[pj + 1] = x1[jj]
        orr[pj + 1] = h.r[i1[jj]]
    ri = srow[inner_seg]
    y_inner = _y_of(inner_v - g.take(ri, axis=1), inv.take(ri), None if all_weighted else weighted.take(ri))
    oy = np.concatenate([yh, y_inner]).take(src)
    if is_jump is None:  # no jump, no foot: every vertex is kept (but at y = 0, below)
        y = snap(oy, ooff)[0]
        keep = trues(total)
    else:
        oy[pj] = yh[i1[jj]]
        y, prev = snap(oy, ooff)
        ofoot = np.zeros(total, dtype=bool)
        ofoot[pj] = True
        keep = ~ofoot | (oy > prev)
    # at y = 0 only the top of the chain is kept
    # (every row has its first vertex: sums over each row's vertices by reduceat and running sums)
    zeros_in_row = np.add.reduceat(keep & (y <= 0.0), ooff[:-1], dtype=np.intp)
    kept_before: IntArray = keep.cumsum() - keep
    kept_rank: IntArray = kept_before - kept_before.take(ooff[:-1]).take(orow)
    keep &= kept_rank >= zeros_in_row.take(orow) - 1
    noff = np.zeros(rows + 1, dtype=np.intp)
    noff[1:] = keep.cumsum().take(ooff[1:] - 1)
    kept = keep.nonzero()[0]
    # the values of the kept vertices only, gathered once from their sources
    sk = src.take(kept)
    if nv < _LARGE:
        ov = np.concatenate([h.v, inner_v], axis=1).take(sk, axis=1)
    else:  # (without a copy of all of `h.v`: at a level of jobs, 4 x 34k values for 25k kept)
        ov = h.v.take(sk, axis=1, mode="clip")
        from_inner = (sk >= nv).nonzero()[0]
        scatter(ov, from_inner, inner_v.take(sk[from_inner] - nv, axis=1))
    return Polylines(noff, y.take(kept), ov, ot.take(kept), orr.take(kept))


def _locate(p: Polylines, y: FloatArray, right: BoolArray | None) -> tuple[IntArray, IntArray, IntArray, IntArray,
                                                                         FloatArray]:
    """Where each row's own `y` falls (`evaluate`): the vertex of each row (`idx`), and for the rows
    `k` between two vertices, those vertices (`lo_i`, `hi_i`) and the fraction `f` between them.
    `right` None: every row at the foot of a jump."""
    off = p.off
    n = int_diff(off)
    yv = y.repeat(n)
    # (every row has a vertex: its counts by reduceat over its vertices)
    lo = np.add.reduceat(p.x < yv, off[:-1], dtype=np.intp)
    hi = np.add.reduceat(p.x <= yv, off[:-1], dtype=np.intp)
    first, last = off[:-1], off[1:] - 1
    at_first = (y <= 0.0) | (n == 1)
    at_last = ~at_first & (lo == n)
    exact = ~at_first & ~at_last & (hi > lo)
    idx = np.where(at_first, first, last)
    idx = np.where(exact, first + lo if right is None else np.where(right, first + hi - 1, first + lo), idx)
    k = (~at_first & ~at_last & ~exact).nonzero()[0]
    hi_i = first[k] + lo[k]
    lo_i = np.where(lo[k] >= 1, hi_i - 1, last[k])
    f = (y[k] - p.x[lo_i]) / (p.x[hi_i] - p.x[lo_i]) if k.size else np.zeros(0)
    return idx, k, lo_i, hi_i, f


def evaluate(p: Polylines, y: FloatArray, right: BoolArray) -> tuple[FloatArray, FloatArray, BoolArray]:
    """Each row's value, inner argument and jump-top flag at its own `y`: at an argument where the
    row jumps, the top of the jump when `right`, else its foot; between vertices, interpolated."""
    idx, k, lo_i, hi_i, f = _locate(p, y, right)
    v = p.v.take(idx, axis=1)
    t = p.t[idx]
    r = p.r[idx]
    if k.size:
        va = p.v.take(lo_i, axis=1)
        scatter(v, k, va + f * (p.v.take(hi_i, axis=1) - va))
        ta = p.t[lo_i]
        tk = ta + f * (p.t[hi_i] - ta)
        t[k] = tk
        r[k] = (tk == ta) & p.r[lo_i]  # a point at its segment's start is that vertex
    return v, t, r


def argument_at(p: Polylines, y: FloatArray) -> FloatArray:
    """`evaluate(p, y, right=False)[1]` (each row's inner argument at its own `y`, the foot of a
    jump there), the same numbers, without the values (`hdrf`'s positions read only this)."""
    idx, k, lo_i, hi_i, f = _locate(p, y, None)
    t: FloatArray = p.t.take(idx)
    if k.size:
        ta = p.t[lo_i]
        t[k] = ta + f * (p.t[hi_i] - ta)
    return t


def fit(p: Polylines) -> tuple[FloatArray, float, bool]:
    """The furthest point of the single polyline `p` that fits in 1 (every kind): the root's."""
    x, v, r = p.x, p.v, p.r
    bad = np.flatnonzero((v[:, 1:] > 1.0 + EPS).any(axis=0))
    if bad.size == 0:
        return v[:, -1], float(x[-1]), bool(r[-1])
    i = int(bad[0])
    a, b = v[:, i], v[:, i + 1]
    if x[i + 1] <= x[i]:
        return a, float(x[i]), bool(r[i])
    over = (b > 1.0 + EPS) & (b > a)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ratio = np.where(over, (1.0 - a) / (b - a), 1.0)
    s = max(float(ratio.min()), 0.0)
    t = float(x[i] + s * (x[i + 1] - x[i]))
    return a + s * (b - a), t, bool(r[i]) and t == x[i]
