"""`hdrf`'s piecewise-linear functions: `dominant`'s (`polylines.py`), with its runs taken in order.

`dominant` gives every row, as a function of its siblings' argument `y`, its share `S(y)`; a row
*jumps* (a vertical run of vertices at one `y`) where the kind holding its key up stops growing
while its other kinds still grow. Two things of `dominant` are not `hdrf`'s there:

1. `dominant` sums its children's runs at one argument into one jump of the inner sum `h`, and a
   jump of `h` is taken whole, when the key its top needs is reached (the row waits at the
   foot). In `hdrf`'s discrete filling a jumping child keeps its key while it grows, so it stays
   the least of its siblings and takes every step; siblings jumping at one argument take their
   runs one after the other, in row order (its tie rule); and the parent's key rises *along* the
   run, as its share does.
2. So a filling can stop anywhere inside a run (a kind used up part-way up it).

Here the inner sum `h` of a row has one vertex per segment of each child's run, in that order
(`sum_runs`), over an argument `u` that is the vertex's ordinal in the row (the real inner
argument is kept apart, `Inner.x`); `polylines.compose` then turns every segment of `h`, runs
included, into the row's share as a function of its key, exactly as it does a sloped segment
(kinks where the kind giving the key changes), and the `t` it keeps for each vertex of `S` is the
position along `h` (`j + s`: segment `j`, fraction `s`). Top down, a row's position along its
`h` says where each child is: on a sloped segment, at the real argument there; on a run, the
child whose segment it is part-way along its own, the children before it in the run's order at
their run's top, the others at its foot.

From epoch to epoch (`hdrf_runs.py`: the jobs stopped by a kind used up are cut to what they
hold) a row may be part-way up a run. The functions of an epoch start where the last one
stopped: every row's `h` at its own inner argument there, its value there (what its children, or
its jobs, hold) its first vertex, and only what still grows (children's functions, jobs' ramps
from their leaf's argument to their demand) as events; so the runs go on from the state in row
order, and jobs stopped (or met) cost nothing but their value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from services.entitlement.arrays import Level
from services.entitlement.dominant import DrfInputs
from services.entitlement.model import BoolArray, FloatArray, IntArray
from services.entitlement.polylines import (
    EPS,
    TINY,
    Polylines,
    argument_at,
    by_group_and_x,
    compose,
    first_places,
    fit,
    int_diff,
    polyline_jumps,
    scatter,
    segmented_cumsum,
    segmented_cumsum_at,
    shifted,
    sorted_minor,
    start_slopes,
    trues,
)

NONE = -1
"""`Inner.owner` of a vertex that ends no child's run segment."""
FULL_SHARE = 1e-12
"""A share within this of a limit has reached it (`hdrf.FULL`)."""


def nones(n: int) -> IntArray:
    """`np.full(n, NONE, dtype=np.intp)`, without `np.full`'s Python-level cost (`polylines.trues`)."""
    out: IntArray = np.empty(n, dtype=np.intp)
    out.fill(NONE)
    return out


class Rows(Protocol):
    """The rows an epoch's functions are built on: the whole tree (`TreeArrays`), or the rows
    still growing taken as a tree of their own (`hdrf_runs.Live`)."""

    parent: IntArray
    levels: list[Level]
    weight: FloatArray


@dataclass(slots=True, eq=False)
class Inner:
    """One depth's inner sums `h`: row `i` owns vertices `off[i]:off[i + 1]`, at real inner
    argument `x`, value `v` (kinds-major); a vertex that ends a segment of a child's run names
    the child (`owner`, a row) and that child's vertex ending it (`end`, an index into the child
    depth's `S`); else `owner` is `NONE`."""

    off: IntArray
    x: FloatArray
    v: FloatArray
    owner: IntArray
    end: IntArray

    def as_ordinal(self) -> Polylines:
        """`h` for `compose(..., ordinal=True)`, which takes its arguments as the ordinals and
        reads neither them nor the flags: those arrays left empty (a read would fail)."""
        none = np.zeros(0)
        return Polylines(self.off, none, self.v, none, np.zeros(0, dtype=bool))

    def as_polylines(self) -> Polylines:
        """`h` over its ordinal argument (the root's, for `fit`)."""
        u = (np.arange(self.x.size) - self.off[:-1].repeat(int_diff(self.off))).astype(np.float64)
        # (`t` is `x` itself: `fit` reads it, and does not write it)
        return Polylines(self.off, u, self.v, u, np.zeros(u.size, dtype=bool))


@dataclass(slots=True, eq=False)
class Curves:
    """One epoch's functions, depth by depth (`levels` order), and the root's inner sum."""

    h: list[Inner]
    s: list[Polylines]
    root: Inner


@dataclass(slots=True, eq=False)
class State:
    """Where a filling stands: every row's real inner argument and share."""

    t: FloatArray
    share: FloatArray


@dataclass(slots=True, eq=False)
class _Events:
    """What a depth's children (or jobs) do to their parents' sums: slope changes and run
    segments at `x` (`jump`), for the parent `group`; a run segment names its child (`owner`) and
    the child's vertex ending it (`end`)."""

    x: FloatArray
    vec: FloatArray
    jump: BoolArray
    group: IntArray
    owner: IntArray
    end: IntArray
    start_vec: FloatArray
    start_group: IntArray


def _run_events(s: Polylines, group_of_row: IntArray, first_row: int) -> tuple[_Events, FloatArray]:
    """`polylines.polyline_events` of the rows of `s` (rows `first_row + i`, summed into
    `group_of_row[i]`), and each row's first value, with each run segment (a segment shorter than
    `TINY`, relatively: those events come last, in segment order) naming its row and the vertex
    ending it."""
    ev, at0, run_first, run_row = polyline_jumps(s, group_of_row)
    ns = ev.x.size - run_first.size
    owner = nones(ev.x.size)
    end = owner.copy()
    owner[ns:], end[ns:] = first_row + run_row, run_first + 1
    vec = ev.vec  # (`polyline_jumps`' own array: changed in place)
    np.maximum(vec[:, ns:], 0.0, out=vec[:, ns:])  # a run never goes down (but by the last bits)
    return _Events(ev.x, vec, ev.jump, ev.group, owner, end, ev.start_vec, ev.start_group), at0


def _job_events(job_share: FloatArray, weight: FloatArray, group: IntArray, tau: FloatArray,
                growing: BoolArray) -> _Events:
    """The jobs still growing, from their leaf's argument `tau` on: a job of share vector `d`
    (dominant component `D`) and weight `w` holds `d / D * min(D, w * t)` (`ramp_events`): slope
    `d * (w / D)` from `tau` (the row's start) to `D / w`."""
    top = job_share.max(axis=0) if len(job_share) else np.zeros(job_share.shape[1])
    keep = growing & (top > EPS) & (weight > EPS)
    kept = keep.nonzero()[0]
    keep[kept] = tau.take(kept) < top.take(kept) / weight.take(kept)
    d = job_share.compress(keep, axis=1)
    w, top, grp = weight.compress(keep), top.compress(keep), group.compress(keep)
    sl = d * (w / top)
    none = nones(w.size)
    return _Events(top / w, -sl, np.zeros(w.size, dtype=bool), grp, none, none, sl, grp)


def _concat(parts: list[_Events]) -> _Events:
    if len(parts) == 1:
        return parts[0]
    return _Events(*(np.concatenate([getattr(p, f) for p in parts], axis=1 if f in ("vec", "start_vec") else 0)
                     for f in _Events.__slots__))


def _snap_sorted(x: FloatArray, new_group: BoolArray) -> FloatArray:
    """Arguments sorted within groups, each within `TINY` (relatively) of the one before made
    equal to it (the first of the cluster): siblings' runs an ulp apart are one run."""
    step = np.empty_like(x)  # np.diff(x, prepend=-inf), without its Python-level cost
    step[:1] = np.inf
    np.subtract(x[1:], x[:-1], out=step[1:])
    gap = step > TINY * np.maximum(1.0, np.abs(x))
    start = gap | new_group
    # each one's cluster's first, as the count of firsts so far into their list (`start[0]` holds:
    # `new_group`'s first does); a running maximum of indices took twice as long
    out: FloatArray = x.take(start.nonzero()[0].take(start.cumsum() - 1))
    return out


def sum_runs(rows: int, init: FloatArray, ev: _Events, start: FloatArray) -> Inner:
    """Per row, the sum of its parts from argument `start` on (`init` there, plus the effect of
    the events, walked in order of argument): a vertex (the foot) at each argument where
    something happens, then one vertex per run segment there, by child row and along the
    child's run."""
    dims = init.shape[0]
    slope0 = start_slopes(ev.start_group, ev.start_vec, dims, rows)
    n = ev.x.size
    if n == 0:
        none = nones(rows)
        return Inner(np.arange(rows + 1, dtype=np.intp), start.copy(), init.copy(), none, none.copy())
    # by (group, x, event): equal ones by event (stable, as `sum_events`)
    first = by_group_and_x(ev.group, ev.x)
    gs0 = ev.group.take(first)
    gnew0 = trues(n)
    gnew0[1:] = gs0[1:] != gs0[:-1]
    # nothing before a row's start (a child's key an ulp below its parent's argument)
    xsnap = _snap_sorted(np.maximum(ev.x.take(first), start.take(gs0)), gnew0)
    point0 = gnew0.copy()
    point0[1:] |= xsnap[1:] != xsnap[:-1]
    # then, at one (group, argument): slope changes, then the run segments by vertex (a vertex's
    # index orders runs by child row, then along the child's run)
    # (one event at each (group, argument), as in a level of jobs, or keys in order already, as
    # mostly: the order found, and what was found of it, are kept)
    in_order = True
    if not point0.all():
        ends = ev.end.take(first).astype(np.int64) + 1
        key = (point0.cumsum() * 2 + ev.jump.take(first)) * (int(ends.max()) + 1) + ends
        in_order = np.count_nonzero(key[1:] >= key[:-1]) == n - 1
    if in_order:
        order, xs, gs, gnew, new = first, xsnap, gs0, gnew0, point0
    else:
        # equal keys in the order above, on any CPU: numpy's stable sort (a merge sort that takes
        # runs in order whole; the keys are in order but for each argument's few events): 1-6 µs
        # on 0.1-4.4k keys, where `stable_argsort` (a quicksort, then ties by index) took 10-260
        by_key = key.argsort(kind="stable")
        order, xs = first.take(by_key), xsnap.take(by_key)
        gs = ev.group.take(order)
        gnew = trues(n)
        gnew[1:] = gs[1:] != gs[:-1]
        new = gnew.copy()
        new[1:] |= xs[1:] != xs[:-1]
    js = ev.jump.take(order)
    vs = ev.vec.take(order, axis=1)
    ds = new.nonzero()[0]
    de = np.concatenate((ds[1:], [n])) - 1
    dg, dx = gs.take(ds), xs.take(ds)
    nd = ds.size
    gd = gnew.take(ds)
    gfirst = gd.nonzero()[0]
    ji = js.nonzero()[0]
    jv = vs.take(ji, axis=1)
    # `vs * ~js` (a run segment's vector is no slope), in place: `vs` is this function's own, and
    # x * 0.0 is what the product gives (a -0.0 for a negative x, as there)
    slopes = vs
    if ji.size:
        slopes[:, ji] *= 0.0
    gi = gnew.nonzero()[0]
    start_slope = slope0.take(gs.take(gi), axis=1)
    for k in range(dims):
        slopes[k][gi] += start_slope[k]
    slope_after = segmented_cumsum_at(slopes, gi, de, gd.cumsum() - 1)
    slope_before = shifted(slope_after, gfirst, start_slope)
    xprev = shifted(dx, gfirst, start.take(dg.take(gfirst)))
    inc = slope_before * (dx - xprev)
    emit_foot = dx > xprev
    if ji.size == 0:  # no run here (a level of jobs): every vertex a foot, as below with no jump
        # (`inc + 0.0` is `inc + dj` with `dj` all zeros: a -0.0 made +0.0; `top - 0.0` is `top`)
        foot = segmented_cumsum(inc + 0.0, gfirst, rebase=True, scratch=True)
        if init.any():  # (adding zeros changes nothing: the sums hold no -0.0, as `inc + 0.0` has none)
            foot += init.take(dg, axis=1)  # (a sum is the same bits either way round)
        off = first_places(dg, emit_foot, rows)
        total = int(off[-1])
        x = np.empty(total)  # (every vertex is written: each row's first, then its feet)
        x[off[:-1]] = start
        v = np.empty((dims, total))
        scatter(v, off[:-1], init)
        pos = emit_foot.cumsum() - emit_foot + dg + 1
        fi = emit_foot.nonzero()[0]
        pf = pos.take(fi)
        x[pf] = dx.take(fi)
        scatter(v, pf, foot.take(fi, axis=1))
        return Inner(off, x, v, nones(total), nones(total))
    point = new.cumsum() - 1  # the distinct argument of each event
    pji = point.take(ji)  # (each run segment's)
    dj = np.zeros((dims, nd))
    for k in range(dims):
        dj[k] = np.bincount(pji, weights=jv[k], minlength=nd)
    top = segmented_cumsum(inc + dj, gfirst, rebase=True, scratch=True)
    top += init.take(dg, axis=1)
    foot = top - dj
    # each run segment's vertex: the foot of its argument plus the segments before it there
    rstart = trues(ji.size)
    rstart[1:] = pji[1:] != pji[:-1]
    run_v = foot.take(pji, axis=1) + segmented_cumsum(jv, rstart.nonzero()[0], rebase=False)
    nj = np.bincount(pji, minlength=nd)
    cnt = emit_foot.astype(np.intp) + nj
    off = first_places(dg, cnt, rows)
    total = int(off[-1])
    x = np.zeros(total)
    x[off[:-1]] = start
    v = np.empty((dims, total))
    owner = nones(total)
    end = nones(total)
    scatter(v, off[:-1], init)
    pos = cnt.cumsum() - cnt + dg + 1
    fi = emit_foot.nonzero()[0]
    pf = pos.take(fi)
    x[pf] = dx.take(fi)
    scatter(v, pf, foot.take(fi, axis=1))
    rank = np.arange(ji.size) - rstart.nonzero()[0][rstart.cumsum() - 1]
    pr = pos.take(pji) + emit_foot.take(pji) + rank
    x[pr] = xs.take(ji)
    scatter(v, pr, run_v)
    oji = order.take(ji)
    owner[pr] = ev.owner.take(oji)
    end[pr] = ev.end.take(oji)
    return Inner(off, x, v, owner, end)


def curves(arr: Rows, drf: DrfInputs, job_share: FloatArray, state: State, given: FloatArray,
           growing: BoolArray, base: FloatArray | None = None) -> Curves:
    """Every depth's `h` and `S`, bottom up, from `state` on (the module doc): jobs of share
    `job_share` (`(active kinds, jobs)`, their whole demand) holding `given` of it, those
    `growing` from their leaf's argument on; `base` (`(active kinds, rows)`), what each row holds
    besides (its children left out of `arr`, which no longer grow)."""
    g, lim, weight = drf.guarantee, drf.limit, arr.weight
    box = np.ascontiguousarray(np.where((weight > EPS)[:, None], lim, np.minimum(lim, g)).T)
    g_t = np.ascontiguousarray(g.T)
    hs: list[Inner] = []
    ss: list[Polylines] = []
    below: Polylines | None = None
    for depth in range(len(arr.levels) - 1, -1, -1):
        lv = arr.levels[depth]
        rows = lv.stop - lv.start
        init = np.zeros((job_share.shape[0], rows)) if base is None else base[:, lv.start : lv.stop].copy()
        parts: list[_Events] = []
        if below is not None:
            nxt = arr.levels[depth + 1]
            events, at0 = _run_events(below, nxt.group_parent[nxt.group_of_row] - lv.start, nxt.start)
            init[:, nxt.group_parent - lv.start] += np.add.reduceat(at0, nxt.group_starts, axis=1)
            parts.append(events)
        lo, hi = drf.job_row.searchsorted([lv.start, lv.stop])
        if hi > lo or not parts:
            group = drf.job_row[lo:hi] - lv.start
            if given[lo:hi].any():  # (nothing is held yet in the first epoch: adding zeros changes nothing)
                held = job_share[:, lo:hi] * given[lo:hi]
                for k in range(init.shape[0]):
                    init[k] += np.bincount(group, weights=held[k], minlength=rows)
            parts.append(_job_events(job_share[:, lo:hi], drf.job_weight[lo:hi], group,
                                     state.t[drf.job_row[lo:hi]], growing[lo:hi]))
        sl = slice(lv.start, lv.stop)
        h = sum_runs(rows, init, _concat(parts), state.t[sl])
        below = compose(h.as_ordinal(), g_t[:, sl], box[:, sl], weight[sl], ordinal=True)
        hs.append(h)
        ss.append(below)
    hs.reverse()
    ss.reverse()
    assert below is not None
    top = arr.levels[0]
    events, at0 = _run_events(below, np.zeros(top.stop - top.start, dtype=np.intp), top.start)
    root_init = at0.sum(axis=1, keepdims=True)
    if base is not None:
        root_init += base[:, :1]
    return Curves(hs, ss, sum_runs(1, root_init, events, state.t[:1]))


def root_fit(c: Curves, room: FloatArray | None = None) -> float:
    """The root's position where the capacity stops it: the furthest point of its `h` within 1 in
    every kind, or within `room` (per active kind: the capacity left after the static holds)."""
    p = c.root.as_polylines()
    if room is not None and (room < 1.0).any():  # within room <=> within 1, shifted up by what room lacks of 1
        p = Polylines(p.off, p.x, p.v + (1.0 - room)[:, None], p.t, p.r)
    return float(fit(p)[1])


def first_limit(arr: Rows, c: Curves, box: FloatArray, held: FloatArray) -> float | None:
    """The root's position where the first pool reaches a limit of a kind it had not reached in
    the state (`held`: every row's share there; `box`: every row's limits, as shares), None
    when none does, NaN when that point is not known (a pool of weight 0, or below its
    guarantees, whose run at key 0 `compose` keeps as its top only). `compose` ends a pool's
    function where it leaves its limit (as `dominant`'s does: all of it stops), so the
    functions are `hdrf`'s up to the first such point only.

    Bottom up, each pool reaching a limit is where its function ends; that vertex is a vertex of
    its parent's `h` (the vertex of the run segment it ends, or the first vertex at its argument,
    where its slope stops), which is a vertex of the parent's function (its `t`), and so on up:
    a few searches per such pool and depth."""
    found: dict[int, int] = {}  # row -> vertex of its function where it (or one below) reaches a limit
    levels = arr.levels
    for depth in range(len(levels) - 1, -1, -1):
        lv, s = levels[depth], c.s[depth]
        last = s.off[1:] - 1
        full = (box[lv.start : lv.stop] - FULL_SHARE).T  # kinds-major: `any` over a short axis is slow
        reach = ((s.v.take(last, axis=1) >= full) & (full > held[lv.start : lv.stop].T)).any(axis=0)
        for i in np.flatnonzero(reach).tolist():
            row = lv.start + i
            found[row] = min(found.get(row, int(last[i])), int(last[i]))
        here = {row: k for row, k in found.items() if lv.start <= row < lv.stop}
        if not here:
            continue
        h_up = c.h[depth - 1] if depth > 0 else c.root
        s_up = c.s[depth - 1] if depth > 0 else None
        up_first = levels[depth - 1].start if depth > 0 else 0
        runs = (h_up.owner >= 0).nonzero()[0]
        keys = h_up.owner[runs].astype(np.int64) * (s.x.size + 1) + h_up.end[runs]
        by_key = keys.argsort(kind="stable")  # (mostly in order: numpy's merge sort takes runs whole)
        keys, runs = keys[by_key], runs[by_key]
        for row, k in here.items():
            del found[row]
            p = int(arr.parent[row]) - up_first
            a, b = int(h_up.off[p]), int(h_up.off[p + 1])
            key = row * (s.x.size + 1) + k
            q = int(np.searchsorted(keys, key))
            if q < keys.size and keys[q] == key:
                j = int(runs[q]) - a
            else:  # where its slope stops: the first vertex of the parent's `h` at its argument
                x = float(s.x[k])
                j = int(np.searchsorted(h_up.x[a:b], x - TINY * max(1.0, abs(x))))
            if s_up is None:
                found[0] = min(found.get(0, j), j)
                continue
            pa, pb = int(s_up.off[p]), int(s_up.off[p + 1])
            kk = pa + int(np.searchsorted(s_up.t[pa:pb], j - 1e-9))
            if kk >= pb:  # the parent's function ended before: it reached a limit earlier
                continue
            if s_up.t[kk] > j + 1e-9:  # that point is not one of the parent's (its run at key 0 is
                return math.nan  # one vertex, its top): not known where, among its own
            prow = up_first + p
            found[prow] = min(found.get(prow, kk), kk)
    return float(found[0]) if 0 in found else None


def positions(arr: Rows, c: Curves, root_at: float) -> FloatArray:
    """Every row's real inner argument where the root is at position `root_at` of its `h`, top
    down (the module doc)."""
    t = np.zeros(arr.parent.size)
    root = c.root
    pos = np.array([root_at])
    h_up = root
    up_first = 0
    j, f, t_up, jn = _real(pos, root)  # (each depth's is its children's parents': found once)
    t[0] = float(t_up[0])
    for lv, s, h in zip(arr.levels, c.s, c.h, strict=True):
        sl = slice(lv.start, lv.stop)
        parent = arr.parent[sl] - up_first
        # a function starts at its row's key in the state: before that, its first vertex
        y = np.maximum(t_up.take(parent), s.x.take(s.off[:-1]))
        p_kid = argument_at(s, y)
        # children on a run of their parent's at its argument: done, part-way, or at the foot
        rv = (h_up.owner >= 0).nonzero()[0]
        if rv.size:
            # by (owner, vertex): the vertices are distinct, so one integer sort of both
            rv = sorted_minor(h_up.owner[rv], rv, h_up.x.size)
            key_o = h_up.owner.take(rv)
            big = h_up.x.size + 1
            keys = key_o.astype(np.int64) * big + rv
            kid_rows = np.arange(lv.start, lv.stop)
            jk, fk, jnk = j.take(parent), f.take(parent), jn.take(parent)
            owner_n = h_up.owner.take(jnk)
            x_jk = h_up.x.take(jk)
            on_run = (fk <= 0.0) | (owner_n >= 0) & (jnk > jk)
            q = keys.searchsorted(kid_rows.astype(np.int64) * big + jk, "right") - 1
            qc = np.minimum(np.maximum(q, 0), rv.size - 1)  # not np.clip: it builds an np.iinfo on ints
            same = (q >= 0) & (key_o.take(qc) == kid_rows) & (h_up.x.take(rv.take(qc)) == x_jk)
            q2 = np.minimum(np.maximum(q + 1, 0), rv.size - 1)
            later = (q + 1 < rv.size) & (key_o.take(q2) == kid_rows) & (h_up.x.take(rv.take(q2)) == x_jk)
            done = on_run & same
            foot = on_run & ~same & later
            p_kid[done] = s.t[h_up.end[rv[qc[done]]]]
            p_kid[foot] = s.t[h_up.end[rv[q2[foot]]] - 1]
            part = (fk > 0.0) & (jnk > jk) & (owner_n == kid_rows)
            if part.any():
                ke = h_up.end[jnk[part]]
                p_kid[part] = s.t[ke - 1] + fk[part] * (s.t[ke] - s.t[ke - 1])
        near = np.rint(p_kid)
        pos = np.where(np.abs(p_kid - near) <= 1e-9, near, p_kid)
        h_up, up_first = h, lv.start
        j, f, t_up, jn = _real(pos, h)
        t[sl] = t_up
    return t


def _real(pos: FloatArray, h: Inner) -> tuple[IntArray, FloatArray, FloatArray, IntArray]:
    """Positions along each row's `h` (ordinal + fraction) as `(global vertex, fraction, real
    inner argument, the vertex after (the last one at the end))`."""
    off = h.off
    last = off[1:] - 1
    j = np.minimum(off[:-1] + np.floor(pos).astype(np.intp), last)
    f = np.minimum(np.maximum(np.where(j >= last, 0.0, pos - (j - off[:-1])), 0.0), 1.0)
    jn = np.minimum(j + 1, h.x.size - 1)
    xj = h.x.take(j)
    return j, f, np.where(f > 0.0, xj + f * (h.x.take(jn) - xj), xj), jn
