"""Requirement and policy `per_resource` (Peloton; the default), DOMAIN §3.

Requirement, per kind, bottom up::

    leaf:     min(limit, non-revocable allocation + demand
                         + min(slack_limit% * reservation, revocable allocation + revocable demand))
              (the last term for every kind but cpu)
    internal: min(limit, sum of the children's claims)

A child's *claim* is its requirement, or for a `static` child `max(requirement, reservation)`:
a static child is given its whole reservation whatever its demand, so its parent must claim it
too, else the parent could be entitled to less than the static reservations below it.

Division, per kind, top down, among the children of each pool, from the parent's entitlement E
(the root's E is the capacity):

1. reservation: each child `min(requirement, reservation)` (static: `reservation`). When these
   add up to more than E they are scaled down proportionally (never over-committed) and an alert
   says so.
2. share: the rest of E is water-filled by `share` over what each child requires beyond step 1
   (children whose requirement exceeds their reservation), each capped at its requirement.
3. unclaimed: what is still left goes to every child in proportion to `share`, capped at its
   limit, in a single pass: what a cap cuts off is not handed to the others (Peloton).

Every step is a few array operations over a whole depth of the tree (`arrays.Level`).
"""

from __future__ import annotations

import numpy as np

from services.entitlement.arrays import TreeArrays
from services.entitlement.model import TOLERANCE, Alert, FloatArray
from services.entitlement.waterfill import level_waterfill

_SCALE_EPS = 1e-12


def leaf_requirements(arr: TreeArrays) -> tuple[FloatArray, FloatArray]:
    """`(requirement, non-revocable requirement)` of every row from its own usage (0 for
    internal pools, whose requirement `aggregate` fills in)."""
    non_revocable = arr.allocation + arr.demand
    slack_term = np.minimum(
        arr.slack_fraction[:, None] * arr.reservation,
        arr.revocable_allocation + arr.revocable_demand,
    )
    if arr.cpu >= 0:
        slack_term[:, arr.cpu] = 0.0
    requirement = np.minimum(non_revocable + slack_term, arr.limit)
    return requirement, np.minimum(non_revocable, arr.limit)


def claims(arr: TreeArrays, requirement: FloatArray, rows: slice) -> FloatArray:
    req = requirement[rows]
    return np.where(arr.static[rows, None], np.maximum(req, np.minimum(arr.reservation[rows], arr.limit[rows])), req)


def aggregate(arr: TreeArrays, requirement: FloatArray) -> None:
    """Fill in internal pools' requirements, bottom up, in place."""
    for lv in reversed(arr.levels):
        rows = slice(lv.start, lv.stop)
        sums = np.add.reduceat(claims(arr, requirement, rows), lv.group_starts, axis=0)
        requirement[lv.group_parent] = np.minimum(sums, arr.limit[lv.group_parent])


def scale_alerts(
    arr: TreeArrays, parents: list[int], kinds: list[int], claimed: FloatArray, had: FloatArray
) -> list[Alert]:
    out: list[Alert] = []
    for p, k, c, e in zip(parents, kinds, claimed.tolist(), had.tolist(), strict=True):
        if c - e < TOLERANCE:
            continue
        path, kind = arr.paths[p], arr.kinds[k]
        what = "capacity" if p == 0 else f"the entitlement of {path}"
        out.append(
            Alert(
                code="guarantees_scaled_down",
                path=path,
                kind=kind,
                message=(
                    f"guarantees of the children of {path} exceed {what} for {kind}: "
                    f"{c:.4g} > {e:.4g}; each scaled down to {100 * e / c:.2f}%"
                ),
            )
        )
    return out


def divide(arr: TreeArrays, requirement: FloatArray) -> tuple[FloatArray, list[Alert], FloatArray, FloatArray]:
    """Entitlement of every row under `per_resource`, the alerts of step 1, and step 3's terms:
    each row's `given` (steps 1 and 2) and its sibling group's `per_share` (what is left of the
    parent, per unit of share; the root's row 0 of both is its capacity and 0). A row's
    entitlement is exactly `max(given, min(given + per_share * share, limit))`, element by
    element in float64: what `EntitlementsComputed` v3's readers compute (`events.lending`)."""
    n, k = requirement.shape
    ent = np.zeros((n, k))
    ent[0] = arr.capacity
    given_all = np.zeros((n, k))
    given_all[0] = arr.capacity
    factor_all = np.zeros((n, k))
    alerts: list[Alert] = []
    for lv in arr.levels:
        rows = slice(lv.start, lv.stop)
        gid, gs = lv.group_of_row, lv.group_starts
        e_parent = ent[lv.group_parent]
        limit = arr.limit[rows]
        share = arr.share[rows]
        req = requirement[rows]
        reserved = np.minimum(arr.reservation[rows], limit)
        # 1. reservation
        base = np.where(arr.static[rows, None], reserved, np.minimum(req, reserved))
        base_sum = np.add.reduceat(base, gs, axis=0)
        over = base_sum > e_parent * (1.0 + _SCALE_EPS)
        if over.any():
            factor = np.divide(e_parent, base_sum, out=np.ones_like(base_sum), where=over)
            base = base * factor[gid]
            g_idx, k_idx = np.nonzero(over)
            alerts += scale_alerts(
                arr,
                lv.group_parent[g_idx].tolist(),
                k_idx.tolist(),
                base_sum[g_idx, k_idx],
                e_parent[g_idx, k_idx],
            )
            base_sum = np.where(over, e_parent, base_sum)
        rest = np.maximum(e_parent - base_sum, 0.0)
        # 2. share, up to the requirement
        extra = level_waterfill(rest, np.maximum(req - base, 0.0), share, gid)
        given = base + extra
        # 3. unclaimed, by share, capped at the limit, single pass
        left = np.maximum(rest - np.add.reduceat(extra, gs, axis=0), 0.0)
        share_sum = np.add.reduceat(share, gs, axis=0)
        per_share = np.divide(left, share_sum, out=np.zeros_like(left), where=share_sum > 0)
        factor = per_share[gid]
        ent[rows] = np.maximum(given, np.minimum(given + factor * share, limit))
        given_all[rows] = given
        factor_all[rows] = factor
    return ent, alerts, given_all, factor_all
