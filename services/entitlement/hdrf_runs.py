"""Policy `hdrf` as epochs of exact functions, one per kind used up or limit reached (path 2).

Until a kind is used up, the filling is one walk up every row's function of its key
(`hdrf_curves.py`: `dominant`'s, with runs taken in `hdrf`'s order, part-way if need be). When the
tree's capacity of a kind is all given, `hdrf` stops the jobs short of their demand that need it;
from then on each holds what it has. So the filling goes on along functions built again from
the state reached, with those jobs as constants ("an epoch"), to the next kind used up: with no
limit reached, one epoch per kind used up, each cheaper than the one before: its functions are
built on the rows with a job still growing below them only (`Live`), the others' shares folded
into their parents' sums.

A pool's limit stops only its jobs that need the kind; the functions, cut where a pool leaves
its limit (as `dominant`'s are: the whole pool stops), are `hdrf`'s only up to the first such
point, so an epoch also ends there (`hdrf_curves.first_limit`), the jobs below that pool that
need the kind stop, and the next one goes on. None (the event-by-event filling decides) when an
epoch stops no job (a guard), past a budget of epochs (`MAX_ROW_EPOCHS`), or when the first
limit is reached inside a pool's run at key 0 (where the functions keep only its top).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from services.entitlement.arrays import Level, TreeArrays
from services.entitlement.dominant import DrfInputs
from services.entitlement.hdrf_curves import State, curves, first_limit, positions, root_fit
from services.entitlement.model import BoolArray, FloatArray, IntArray
from services.entitlement.polylines import trues

FULL = 1e-12
"""A share within this (of the capacity) of a limit or of a demand has reached it."""
MET = -1
"""The cause of a job whose demand is met (or that wants nothing it could get): no kind."""


@dataclass(slots=True, eq=False)
class Runs:
    """What the epochs end with: each job's fraction of its demand, the kind (index into the
    active kinds) that stopped it (`MET`: none) and where (the row whose limit it reached; 0: the
    tree's capacity), and every pool's share."""

    given: FloatArray
    cause: IntArray
    cause_row: IntArray
    share: FloatArray
    epochs: int


MAX_ROW_EPOCHS = 500_000
"""The epochs' budget, in epochs times (pools + 1,000): one epoch per kind used up at the tree
and per point where (pool, kind) limits are reached, each a pass over the tree (some 2-3 ms at
any size, and ~2 ms a thousand pools, here): ~1 s. Past it (a tree whose limits are reached one
at a time by the hundred), None, and the event-by-event filling with its own budget decides. A
count, not a clock: every replay decides the same."""


def by_runs(arr: TreeArrays, drf: DrfInputs, dshare: FloatArray, lim: FloatArray, idle: BoolArray,
            dom: FloatArray | None = None) -> Runs | None:
    """`hdrf` as epochs (the module doc); None when an epoch stops no job (a guard) or past the
    budget. `dom`: `row_max(dshare)`, when the caller has it."""
    m, dims = dshare.shape
    n = len(arr.paths)
    if dom is None:
        dom = row_max(dshare)
    given = np.zeros(m)
    cause = np.full(m, MET, dtype=np.intp)
    cause_row = np.zeros(m, dtype=np.intp)
    open_ = ~idle
    job_share = np.ascontiguousarray(dshare.T)  # (no copy when `dshare` is the transpose of one)
    # which kinds each job needs, kinds-major (`dshare` is a transposed view: a gather of its rows
    # by `take` copies all of it first, ~0.1 ms at 25k jobs)
    needs_t = job_share > 0.0
    state = State(np.zeros(n), np.zeros((n, dims)))
    depth = np.zeros(n, dtype=np.intp)
    for d, lv in enumerate(arr.levels):
        depth[lv.start : lv.stop] = d + 1
    box = lim.copy()  # the root's: the capacity left after the static holds (`drf_inputs`)
    full = box - FULL  # a share at or above this has reached its limit
    share = state.share
    newly = True
    # each epoch uses up a kind at the tree or reaches a (pool, kind) limit not reached before
    for epoch in range(min(dims + 2 + n * dims, max(dims + 2, MAX_ROW_EPOCHS // (n + 1000)))):
        # the jobs short of their demand that need a kind used up where they are stop, at the
        # first such place from the root down (at the start: a pool's limit of 0)
        used = share >= full
        js = open_.nonzero()[0]
        if used[1:].any():
            first = np.where(used, np.arange(n)[:, None], NOWHERE)
            for lv in arr.levels:
                above = first[arr.parent[lv.start : lv.stop]]
                first[lv.start : lv.stop] = np.where(above != NOWHERE, above, first[lv.start : lv.stop])
            place = first.take(drf.job_row.take(js), axis=0)  # (open jobs, kinds)
            rank = np.where(needs_t.take(js, axis=1).T & (place != NOWHERE),
                            depth[np.maximum(place, 0)] * dims + np.arange(dims), NOWHERE)
            caught = (rank != NOWHERE).any(axis=1)
            if not caught.any() and not newly:
                return None  # nobody stopped, and no limit newly reached: a guard
            kind = np.argmin(np.where(rank == NOWHERE, _LAST, rank), axis=1)
            stopped = js[caught]
            cause[stopped] = kind[caught]
            cause_row[stopped] = place[caught.nonzero()[0], kind[caught]]
        elif used[0].any():  # only the tree's capacity (the common case): every place is the root,
            # whose rank is its kind's: the first kind used up that a job needs stops it
            first_used = _first_kind(needs_t, js, used[0])
            caught = first_used >= 0
            if not caught.any() and not newly:
                return None
            stopped = js[caught]
            cause[stopped] = first_used[caught]
            cause_row[stopped] = 0
        elif not newly:
            return None  # nothing used up anywhere: nobody stopped
        else:
            stopped = js[:0]
        open_[stopped] = False
        if not open_.any():
            return Runs(np.where(idle, 0.0, given), cause, cause_row, share, epoch)
        live = _live(arr, drf.job_row, open_)
        if live is None:
            c = curves(arr, drf, job_share, state, given, open_)
            at = root_fit(c, box[0])
            hit = first_limit(arr, c, box, share)
            if hit is not None and math.isnan(hit):
                return None
            t = positions(arr, c, at if hit is None else min(at, hit))
        else:  # the rows still growing, as a tree of their own; the others hold what they hold
            rows, jobs = live.rows, live.jobs
            sub = replace(drf, guarantee=drf.guarantee.take(rows, axis=0), limit=drf.limit.take(rows, axis=0),
                          job_row=live.job_row, job_weight=drf.job_weight.take(jobs))
            share_rows = share.take(rows, axis=0)
            c = curves(live, sub, job_share.take(jobs, axis=1), State(state.t.take(rows), share_rows),
                       given.take(jobs), open_.take(jobs), live.base(arr, share))
            at = root_fit(c, box[0])
            hit = first_limit(live, c, box.take(rows, axis=0), share_rows)
            if hit is not None and math.isnan(hit):
                return None
            t = state.t.copy()
            t[rows] = positions(live, c, at if hit is None else min(at, hit))
        js = open_.nonzero()[0]  # the others keep what they hold
        reach = drf.job_weight.take(js) * t.take(drf.job_row.take(js))
        dom_js = dom.take(js)
        with np.errstate(over="ignore"):  # a speck of demand: reach / dom overflows to inf, read as 1
            position = np.divide(reach, dom_js, out=np.ones_like(dom_js), where=dom_js > 0)
        given_js = np.minimum(position, 1.0)
        given[js] = given_js
        if live is None:
            reached = sum_up(arr, drf.job_row, given[:, None] * dshare)
        else:  # only the live leaves' jobs moved: the others' rows are what they were
            reached = _sum_moved(arr, drf.job_row, given, dshare, live, share)
        open_[js] = given_js < 1.0 - 1e-9  # the jobs whose demand is met stop (`MET`)
        newly = bool(((reached >= full) & ~used).any())
        share, state = reached, State(t, reached)
        if not open_.any():
            return Runs(np.where(idle, 0.0, given), cause, cause_row, share, epoch + 1)
    return None


NOWHERE = -1
_LAST = int(np.iinfo(np.intp).max)
"""A rank after every real one (`np.iinfo` costs microseconds a call)."""


@dataclass(slots=True, eq=False)
class Live:
    """The rows with a job still growing below them (the root always), renumbered in row order as
    a tree of their own (`hdrf_curves.Rows`), and the jobs of those of them that are leaves. After
    the first epoch only a few percent of a large tree still grows (10k pools at capacity x 0.15:
    ~660, ~260, ~70 rows in epochs 2-4): its functions are built on those rows alone."""

    rows: IntArray
    """The tree's row of each."""
    parent: IntArray
    levels: list[Level]
    weight: FloatArray
    jobs: IntArray
    """The jobs (indices into the tree's) of the leaves among them, in order."""
    job_row: IntArray
    """Their leaf, renumbered."""
    renumber: IntArray
    """Each of the tree's rows' number here (that of the live row before it where not live)."""
    live: BoolArray

    def base(self, arr: TreeArrays, share: FloatArray) -> FloatArray:
        """`(kinds, rows)`: what each row's children that no longer grow hold (`share`, the
        tree's), the part of its inner sum left out."""
        up = np.maximum(arr.parent, 0)
        left = (~self.live & self.live[up]).nonzero()[0]
        out = np.zeros((share.shape[1], self.rows.size))
        at = self.renumber[up[left]]
        for k in range(share.shape[1]):
            out[k] = np.bincount(at, weights=share[left, k], minlength=self.rows.size)
        return out


def _live(arr: TreeArrays, job_row: IntArray, open_: BoolArray) -> Live | None:
    """The rows with an open job below them as a `Live`; None when every row has one."""
    n = len(arr.paths)
    live = np.zeros(n, dtype=bool)
    live[job_row[open_]] = True
    for lv in reversed(arr.levels):
        live[lv.group_parent] |= np.logical_or.reduceat(live[lv.start : lv.stop], lv.group_starts)
    live[0] = True
    if live.all():
        return None
    rows = live.nonzero()[0]
    renumber = live.cumsum() - 1
    parent = renumber[np.maximum(arr.parent[rows], 0)]
    levels: list[Level] = []
    for lv in arr.levels:
        a, b = (int(i) for i in rows.searchsorted([lv.start, lv.stop]))
        if a == b:
            break
        par = parent[a:b]
        new = trues(b - a)
        new[1:] = par[1:] != par[:-1]
        starts = new.nonzero()[0]
        levels.append(Level(a, b, starts, par[starts], new.cumsum() - 1))
    jobs = live[job_row].nonzero()[0]
    return Live(rows, parent, levels, arr.weight[rows], jobs, renumber[job_row[jobs]], renumber, live)


def _sum_moved(arr: TreeArrays, job_row: IntArray, given: FloatArray, dshare: FloatArray, live: Live,
               share: FloatArray) -> FloatArray:
    """`sum_up(arr, job_row, given[:, None] * dshare)` when only the jobs of `live`'s leaves have
    moved since `share` was that sum: the same numbers bit for bit (each live leaf sums all its
    jobs, in order; every level's groups are summed again, as `sum_up` does), without a pass over
    every job (a later epoch's open jobs are a few percent of them)."""
    out = share.copy()
    jobs = live.jobs
    held = given.take(jobs)
    rows = live.rows
    # by live row (`live.job_row`: the same jobs in the same order as by the tree's, so the same
    # sums), a kind at a time from `dshare`'s columns (contiguous: it is a transposed view); a live
    # row that is not a leaf gets its children's sum below
    for kd in range(dshare.shape[1]):
        out[:, kd][rows] = np.bincount(live.job_row, weights=held * dshare[:, kd].take(jobs), minlength=rows.size)
    for lv in reversed(arr.levels):
        out[lv.group_parent] = np.add.reduceat(out[lv.start : lv.stop], lv.group_starts, axis=0)
    return out


def _first_kind(needs: BoolArray, js: IntArray, used: BoolArray) -> IntArray:
    """Per job of `js`, the first of the kinds `used` that it `needs` (`(kinds, jobs)`), -1 where
    none: the first true column of `needs.T[js] & used`, a used kind at a time, last first, each a
    gather of one contiguous row and a `where` (a boolean-masked write per kind of the jobs' rows
    of a `(jobs, kinds)` mask cost ~2x: ~0.5 ms an epoch at 25k jobs)."""
    out: IntArray = np.empty(js.size, dtype=np.intp)
    out.fill(-1)
    for k in used.nonzero()[0][::-1].tolist():
        out = np.where(needs[k].take(js), k, out)
    return out


def row_max(a: FloatArray) -> FloatArray:
    """`a.max(axis=1, initial=0.0)`, the same numbers (a maximum does not round), a column at a
    time: numpy reduces a few kinds per row ~10x slower than it takes the maximum of whole
    columns (~1 ms for 25k jobs x 3 kinds, against ~0.1)."""
    out = np.zeros(a.shape[0])
    for k in range(a.shape[1]):
        np.maximum(out, a[:, k], out=out)
    return out


def sum_up(arr: TreeArrays, job_row: IntArray, per_job: FloatArray) -> FloatArray:
    """`(pools, columns)`: the sum of `per_job` rows over each pool's jobs (its subtree's)."""
    n = len(arr.paths)
    out = np.zeros((n, per_job.shape[1]))
    for kd in range(per_job.shape[1]):
        out[:, kd] = np.bincount(job_row, weights=per_job[:, kd], minlength=n)
    for lv in reversed(arr.levels):
        out[lv.group_parent] = np.add.reduceat(out[lv.start : lv.stop], lv.group_starts, axis=0)
    return out
