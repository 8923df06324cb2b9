"""Policy `hdrf` as epochs of exact functions, one per kind used up (path 2 of `hdrf.py`).

Until a kind is used up, the filling is one walk up every row's function of its key
(`hdrf_curves.py`: `dominant`'s, with runs taken in `hdrf`'s order, part-way if need be). When the
tree's capacity of a kind is all given, `hdrf` stops the jobs short of their demand that need it;
from then on each holds what it has. So the filling goes on along functions built again from
the state reached, with those jobs as constants ("an epoch"), to the next kind used up: one
epoch per kind used up, so at most one more than the kinds, each cheaper than the one before.

None (the event-by-event filling decides) when a pool but the root reaches a limit: a pool's
limit stops only its jobs that need the kind, which the functions (cut at the pool's limit, as
`dominant`'s are) do not give; or when an epoch stops no job (a guard: each uses up a kind).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from services.admission.domain.entitlement.arrays import TreeArrays
from services.admission.domain.entitlement.dominant import DrfInputs
from services.admission.domain.entitlement.hdrf_curves import State, curves, positions
from services.admission.domain.entitlement.model import BoolArray, FloatArray, IntArray

FULL = 1e-12
"""A share within this (of the capacity) of a limit or of a demand has reached it."""
MET = -1
"""The cause of a job whose demand is met (or that wants nothing it could get): no kind."""


@dataclass(slots=True, eq=False)
class Runs:
    """What the epochs end with: each job's fraction of its demand, the kind (index into the
    active kinds) that stopped it (`MET`: none), and every pool's share."""

    given: FloatArray
    cause: IntArray
    share: FloatArray
    epochs: int


def by_runs(arr: TreeArrays, drf: DrfInputs, dshare: FloatArray, lim: FloatArray, idle: BoolArray) -> Runs | None:
    """`hdrf` as epochs (the module doc); None when a pool but the root reaches a limit, or when an
    epoch stops no job."""
    m, dims = dshare.shape
    dom = dshare.max(axis=1, initial=0.0)
    needs = dshare > 0.0
    given = np.zeros(m)
    cause = np.full(m, MET, dtype=np.intp)
    open_ = ~idle
    job_share = np.ascontiguousarray(dshare.T)
    state = State(np.zeros(len(arr.paths)), np.zeros((len(arr.paths), dims)))
    for epoch in range(dims + 2):
        t = positions(arr, curves(arr, drf, job_share, state, given, open_))
        reach = drf.job_weight * t[drf.job_row]
        with np.errstate(over="ignore"):  # a speck of demand: reach / dom overflows to inf, read as 1
            position = np.divide(reach, dom, out=np.ones_like(dom), where=dom > 0)
        given = np.where(open_, np.minimum(position, 1.0), given)  # the others keep what they hold
        share = sum_up(arr, drf.job_row, given[:, None] * dshare)
        if (share[1:] >= lim[1:] - FULL).any():
            return None
        short = open_ & (given < 1.0 - 1e-9)
        if not short.any():
            return Runs(np.where(idle, 0.0, given), cause, share, epoch + 1)
        now = share[0] >= 1.0 - FULL
        stopped = short & (needs & now).any(axis=1)
        if not stopped.any():
            return None
        cause[stopped] = np.argmax(needs & now, axis=1)[stopped]
        open_ &= short & ~stopped
        if not open_.any():
            return Runs(np.where(idle, 0.0, given), cause, share, epoch + 1)
        state = State(t, share)
    return None


def sum_up(arr: TreeArrays, job_row: IntArray, per_job: FloatArray) -> FloatArray:
    """`(pools, columns)`: the sum of `per_job` rows over each pool's jobs (its subtree's)."""
    n = len(arr.paths)
    out = np.zeros((n, per_job.shape[1]))
    for kd in range(per_job.shape[1]):
        out[:, kd] = np.bincount(job_row, weights=per_job[:, kd], minlength=n)
    for lv in reversed(arr.levels):
        out[lv.group_parent] = np.add.reduceat(out[lv.start : lv.stop], lv.group_starts, axis=0)
    return out
