"""Slack (revocable) entitlement, DOMAIN §3, for both policies.

cpu. The tree's slack cpu is the hosts' revocable cpu, plus, with `allocation_slack`, the cpu
reservations leaves lend out: `max(0, reservation - non-revocable allocation - demand)` per leaf
(MESOS-3896: reserved but unused, counted against no one's quota). It is divided top down: among
the children of each pool, water-filled by cpu `share` over their revocable cpu requirement
(revocable allocation + revocable demand, summed over a subtree), then whatever is left by
`share` with no cap (not even the limit). A pool's non-slack cpu entitlement is its entitlement:
revocable cpu never comes out of it.

Other kinds (memory, disk, gpu, ...). Revocable tasks use the pool's own entitlement, at most
`slack_limit`% of its reservation, and only what non-revocable work leaves::

    slack = max(0, min(entitlement - non-revocable requirement,
                       slack_limit% * reservation,
                       revocable allocation + revocable demand))
    non-slack entitlement = entitlement - slack

(non-revocable requirement = min(limit, non-revocable allocation + demand)). An internal pool's
slack is the sum of its children's. So when non-revocable demand grows, slack shrinks, and the
revocable tasks holding more than it are preempted.
"""

from __future__ import annotations

import numpy as np

from services.entitlement.arrays import TreeArrays
from services.entitlement.model import FloatArray
from services.entitlement.waterfill import level_waterfill


def total_slack_cpu(arr: TreeArrays) -> float:
    if arr.cpu < 0:
        return 0.0
    total = arr.revocable_cpu
    if arr.allocation_slack:
        c = arr.cpu
        lent = np.maximum(arr.reservation[:, c] - arr.allocation[:, c] - arr.demand[:, c], 0.0)
        total += float(lent[arr.is_leaf].sum())
    return total


def divide_slack_cpu(arr: TreeArrays, total: float) -> FloatArray:
    """Slack cpu of every row."""
    n = len(arr.paths)
    out = np.zeros(n)
    if arr.cpu < 0 or n == 0:
        return out
    c = arr.cpu
    wants = (arr.revocable_allocation[:, c] + arr.revocable_demand[:, c]) * arr.is_leaf
    if total == 0.0 and not wants.any():
        return out  # nothing to divide and nobody asking: every pool's gift and share of it is 0.0
    for lv in reversed(arr.levels):
        wants[lv.group_parent] = np.add.reduceat(wants[lv.start : lv.stop], lv.group_starts)
    out[0] = total
    for lv in arr.levels:
        rows = slice(lv.start, lv.stop)
        gid, gs = lv.group_of_row, lv.group_starts
        have = out[lv.group_parent]
        share = arr.share[rows, c]
        gift = level_waterfill(have[:, None], wants[rows, None], share[:, None], gid)[:, 0]
        left = np.maximum(have - np.add.reduceat(gift, gs), 0.0)
        share_sum = np.add.reduceat(share, gs)
        per_share = np.divide(left, share_sum, out=np.zeros_like(left), where=share_sum > 0)
        out[rows] = gift + per_share[gid] * share
    return out


def slack_entitlements(
    arr: TreeArrays, entitlement: FloatArray, non_revocable: FloatArray, slack_cpu: FloatArray
) -> FloatArray:
    """Slack entitlement of every row and kind (`non_revocable`: non-revocable requirement)."""
    slack = np.minimum(
        np.minimum(entitlement - non_revocable, arr.slack_fraction[:, None] * arr.reservation),
        arr.revocable_allocation + arr.revocable_demand,
    )
    slack = np.maximum(slack, 0.0) * arr.is_leaf[:, None]
    for lv in reversed(arr.levels):
        slack[lv.group_parent] = np.add.reduceat(slack[lv.start : lv.stop], lv.group_starts, axis=0)
    if arr.cpu >= 0:
        slack[:, arr.cpu] = slack_cpu
    return slack


def non_slack_entitlements(arr: TreeArrays, entitlement: FloatArray, slack: FloatArray) -> FloatArray:
    non_slack = np.maximum(entitlement - slack, 0.0)
    if arr.cpu >= 0:
        non_slack[:, arr.cpu] = entitlement[:, arr.cpu]
    return non_slack
