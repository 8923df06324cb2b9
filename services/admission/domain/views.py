"""What every pool reports (DOMAIN §7), read from admission's state: plain dicts per pool."""

from __future__ import annotations

from itertools import islice
from typing import Any

from services.admission.domain.gang_rows import gang_row
from services.admission.domain.model import CYCLE_ORDER, Ledger
from services.admission.domain.state import AdmissionState
from services.admission.domain.vectors import Vector, add_into
from services.tree.domain import paths
from services.tree.domain.effective import EffectivePool, effective_pools

NUMBERS = ("entitlement", "non_slack_entitlement", "slack_entitlement", "allocation", "slack_allocation",
           "demand", "slack_demand", "reservation", "limit")


def pool_numbers(state: AdmissionState, tree: str, *, more: bool = False,
                 views: dict[str, EffectivePool] | None = None) -> dict[str, dict[str, Vector]]:
    """Per pool (root excluded), in path order: entitlements of the last cycle, allocation and
    demand (a parent's are the sums of its leaves'), reservation and limit. `more` (the metrics'
    reading, services/common/metrics.py) adds the other allocation buckets (non-preemptible,
    controller) and the share, summed and read the same way; `views`: the tree's `effective_pools`,
    when the caller has them already."""
    rt = state.runtime(tree)
    totals: dict[str, Ledger] = {}
    for leaf, ledger in rt.ledgers.items():
        for path in [leaf, *paths.ancestors(leaf)]:
            acc = totals.setdefault(path, Ledger())
            add_into(acc.allocation, ledger.allocation)
            add_into(acc.slack, ledger.slack)
            add_into(acc.demand, ledger.demand)
            add_into(acc.slack_demand, ledger.slack_demand)
            if more:
                add_into(acc.non_preemptible, ledger.non_preemptible)
                add_into(acc.controller, ledger.controller)
    result: dict[str, dict[str, Vector]] = {}
    for path, view in (effective_pools(state.config, tree) if views is None else views).items():
        if path == paths.ROOT:
            continue
        held = totals.get(path, Ledger())
        ent = rt.entitlements.get(path)
        result[path] = {
            "entitlement": dict(ent.entitlement) if ent else {},
            "non_slack_entitlement": dict(ent.non_slack_entitlement) if ent else {},
            "slack_entitlement": dict(ent.slack_entitlement) if ent else {},
            "allocation": dict(held.allocation),
            "slack_allocation": dict(held.slack),
            "demand": dict(held.demand),
            "slack_demand": dict(held.slack_demand),
            "reservation": dict(view.reservation),
            "limit": dict(view.limit),
        }
        if more:
            result[path].update(non_preemptible_allocation=dict(held.non_preemptible),
                                controller_allocation=dict(held.controller), share=dict(view.share))
    return result


def queue_heads(state: AdmissionState, tree: str, heads: int, rows: int) -> dict[str, dict[str, dict[str, Any]]]:
    """Each leaf's four queues (`CYCLE_ORDER`, leaves in path order): per queue its `length` and
    its first `heads` gangs in queue order (`gang_row`s), at most `rows` gangs in all (the later
    queues then show their lengths only). A leaf whose queues are all empty is left out."""
    rt = state.runtime(tree)
    out: dict[str, dict[str, dict[str, Any]]] = {}
    left = rows
    for leaf in sorted(rt.queues):
        queues = rt.queues[leaf]
        if not any(len(queues[name]) for name in CYCLE_ORDER if name in queues):
            continue
        shown: dict[str, dict[str, Any]] = {}
        for name in CYCLE_ORDER:
            queue = queues.get(name)
            length = 0 if queue is None else len(queue)
            # `ordered()`: the queue itself, not a copy of a long one
            first = [] if queue is None or not length else list(islice(queue.ordered(), min(heads, left)))
            left -= len(first)
            shown[name] = {"length": length, "gangs": [gang_row(rt, gang) for gang in first]}
        out[leaf] = shown
    return out
