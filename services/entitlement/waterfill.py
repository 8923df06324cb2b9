"""Weighted water-filling (weighted max-min fairness), scalar and segmented.

Water-filling `amount` over claimants with needs `n_i` and weights `w_i` gives each
`min(n_i, w_i * level)` with the one `level` at which the gifts add up to `amount` (everyone gets
their need when the needs add up to no more than `amount`). It is what Peloton's iterative
"split the rest by share, cap at demand, repeat" converges to.

Claimants of weight 0 get nothing while a claimant of positive weight still needs something;
what is left after those are satisfied is water-filled among the weight-0 ones with equal weights.

`segmented_waterfill` does many independent water-fillings at once (one per sibling group and
kind): one lexicographic sort by (segment, need/weight) and a few cumulative sums, no Python loop.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from services.entitlement.model import FloatArray, IntArray


def waterfill(amount: float, needs: Sequence[float], weights: Sequence[float]) -> list[float]:
    """Scalar reference implementation (readable, O(n log n))."""
    needs = [max(0.0, x) for x in needs]
    if amount >= sum(needs):
        return list(needs)
    out = [0.0] * len(needs)
    positive = [i for i in range(len(needs)) if weights[i] > 0 and needs[i] > 0]
    left = max(0.0, amount)
    active = sorted(positive, key=lambda i: needs[i] / weights[i])
    total_w = sum(weights[i] for i in active)
    for pos, i in enumerate(active):
        level = left / total_w
        if needs[i] <= weights[i] * level:
            out[i] = needs[i]
            left -= needs[i]
            total_w -= weights[i]
        else:
            for j in active[pos:]:
                out[j] = weights[j] * level
            return out
    zero = [i for i in range(len(needs)) if weights[i] <= 0 and needs[i] > 0]
    if zero and left > 0:
        rest = waterfill(left, [needs[i] for i in zero], [1.0] * len(zero))
        for i, x in zip(zero, rest, strict=True):
            out[i] = x
    return out


def segmented_waterfill(amount: FloatArray, need: FloatArray, weight: FloatArray, segment: IntArray) -> FloatArray:
    """Water-fill `amount[s]` over the rows whose `segment` is `s`, for every segment at once.

    `need`, `weight`, `segment` are 1-D, one entry per claimant; `amount` has one entry per
    segment. Returns the gift of each claimant; the gifts of a segment add up to
    `min(amount[s], sum of its needs)`."""
    need = np.maximum(need, 0.0)
    n_seg = amount.shape[0]
    out = need.copy()
    total_need = np.bincount(segment, weights=need, minlength=n_seg)
    short = total_need > amount
    if not short.any():
        return out
    rows = np.flatnonzero(short[segment])
    n = need[rows]
    w = weight[rows]
    seg = segment[rows]
    positive = w > 0
    n1 = np.where(positive, n, 0.0)
    w1 = np.where(positive, w, 0.0)
    theta = np.divide(n1, w1, out=np.zeros_like(n1), where=positive)
    order = np.lexsort((theta, seg))
    ns, ws, th, ss = n1[order], w1[order], theta[order], seg[order]
    m = ns.shape[0]
    first = np.flatnonzero(np.concatenate(([True], ss[1:] != ss[:-1])))
    ends = np.append(first[1:], m)
    ordinal = np.repeat(np.arange(first.shape[0]), ends - first)
    cn = np.cumsum(ns)
    cw = np.cumsum(ws)
    need_before = cn - ns
    need_before -= need_before[first][ordinal]
    w_before = cw - ws
    w_seg0 = w_before[first]
    w_total = cw[ends - 1] - w_seg0
    w_from = w_total[ordinal] - (w_before - w_seg0[ordinal])
    # Given level theta_j, the segment hands out need_before_j + theta_j * w_from_j: nondecreasing in j.
    avail = np.maximum(amount[ss], 0.0)
    handed = need_before + th * w_from
    below = (handed < avail).astype(np.int64)
    j = first + np.add.reduceat(below, first)
    level = np.full(first.shape[0], math.inf)
    inside = j < ends
    jj = j[inside]
    level[inside] = np.divide(
        avail[jj] - need_before[jj],
        w_from[jj],
        out=np.zeros(jj.shape[0]),
        where=w_from[jj] > 0,
    )
    level = np.maximum(level, 0.0)
    lv = level[ordinal]
    gift_sorted = np.where(ws > 0, np.minimum(ns, ws * np.where(np.isinf(lv), 0.0, lv)), 0.0)
    gift_sorted = np.where(np.isinf(lv), ns, gift_sorted)
    gift = np.empty_like(gift_sorted)
    gift[order] = gift_sorted
    out[rows] = gift
    # Weight-0 claimants share, with equal weights, what the others left.
    zero = (~positive) & (n > 0)
    if zero.any():
        given = np.bincount(seg, weights=gift, minlength=n_seg)
        rest = np.maximum(np.maximum(amount, 0.0) - given, 0.0)
        zrows = rows[zero]
        if (rest[segment[zrows]] > 0).any():
            out[zrows] = segmented_waterfill(rest, need[zrows], np.ones(zrows.shape[0]), segment[zrows])
        else:
            out[zrows] = 0.0
    return out


def level_waterfill(amount: FloatArray, need: FloatArray, weight: FloatArray, group_of_row: IntArray) -> FloatArray:
    """Water-filling per (sibling group, kind): `amount` is `(groups, kinds)`, `need` and `weight`
    `(rows, kinds)`. Returns `(rows, kinds)` gifts."""
    rows, kinds = need.shape
    groups = amount.shape[0]
    if rows == 0 or kinds == 0:
        return np.zeros((rows, kinds))
    # Kind-major flattening: segment = kind * groups + group.
    segment = (np.arange(kinds, dtype=np.intp)[:, None] * groups + group_of_row[None, :]).ravel()
    gifts = segmented_waterfill(amount.T.ravel(), need.T.ravel(), weight.T.ravel(), segment)
    return gifts.reshape(kinds, rows).T.copy()
