"""Starvation (DOMAIN §6, YTsaurus `fair_share_starvation_tolerance` / `_timeout`).

Per pool (leaf or parent; a parent's numbers are the sums of its leaves'), at each pass:

    below fair share  on some kind it demands, its non-slack allocation (usage) is below
                      min(non-slack entitlement * starvation_tolerance, demand);
    starving          below fair share continuously for `starvation_timeout` (counted from the
                      pass that first found it below);
    ok                otherwise.

Revocable work is best effort and does not count (usage, entitlement and demand are all the
non-revocable ones). An event is decided whenever a pool's status changes; a new pool starts
`ok` (so nothing is said until it is first below). Time is the log's.
"""

from __future__ import annotations

from events import PoolStarvationChanged, StarvationStatus
from services.admission.domain.chains import pool_chain
from services.admission.domain.model import Ledger
from services.admission.domain.runtime import TreeRuntime
from services.admission.domain.vectors import TOLERANCE, Vector
from services.preemption.domain.model import Starvation
from services.tree.domain import paths
from services.tree.domain.effective import EffectivePool

ROUND = 9


def totals(rt: TreeRuntime) -> dict[str, Ledger]:
    """Per pool (leaves and their ancestors, root excluded): allocation, slack and demand, summed
    (`add_into` of each leaf's, in ledger order: the same numbers, the loops inline)."""
    out: dict[str, Ledger] = {}
    get_acc = out.get
    for leaf, ledger in rt.ledgers.items():
        allocation, slack, demand = ledger.allocation.items(), ledger.slack.items(), ledger.demand.items()
        for path in pool_chain(leaf):  # the leaf and its ancestors, the root left out
            acc = get_acc(path)
            if acc is None:
                acc = out[path] = Ledger()
            for into, items in ((acc.allocation, allocation), (acc.slack, slack), (acc.demand, demand)):
                get = into.get
                for kind, amount in items:
                    value = get(kind, 0.0) + amount
                    into[kind] = 0.0 if -1e-9 < value < 1e-9 else value
    return out


def below_on(usage: Vector, entitlement: Vector, demand: Vector, tolerance: float) -> list[str]:
    """The kinds on which the pool is below its fair share."""
    return sorted(k for k, wanted in demand.items()
                  if wanted >= TOLERANCE
                  and min(entitlement.get(k, 0.0) * tolerance, wanted) - usage.get(k, 0.0) >= TOLERANCE)


def starvation(rt: TreeRuntime, pools: dict[str, EffectivePool], tolerance: float, timeout: float, now: float,
               memory: dict[str, Starvation]) -> list[PoolStarvationChanged]:
    out: list[PoolStarvationChanged] = []
    sums = totals(rt)
    for gone in [p for p in memory if p not in pools]:
        del memory[gone]  # deleted pools are forgotten
    for path in sorted(pools):
        entitlement = rt.entitlements.get(path)
        if path == paths.ROOT or entitlement is None:
            continue
        held = sums.get(path) or _NOTHING
        demand, target = held.demand, entitlement.non_slack_entitlement
        # the usage is worked out only where some kind is wanted (else no kind is below)
        wants = _wants(demand)
        usage = held.non_slack if wants else None
        kinds = below_on(usage, target, demand, tolerance) if usage is not None else []
        before = memory.get(path)
        if kinds:
            below_since = before.below_since if before is not None and before.below_since is not None else now
            status: StarvationStatus = "starving" if now - below_since >= timeout - TOLERANCE else "below_fair_share"
        else:
            below_since, status = None, "ok"
        if before is None:
            before = Starvation(since=now)
        elif status == before.status:
            before.below_since = below_since  # the same status: only when it went below may change
            continue
        if status == before.status:
            memory[path] = Starvation(status, before.since, below_since)
            continue
        if status == "starving":
            assert below_since is not None
            since = max(below_since + timeout, before.since) if before.status == "below_fair_share" else now
        else:
            since = below_since if status == "below_fair_share" and below_since is not None else now
        memory[path] = Starvation(status, since, below_since)
        if usage is None:
            usage = held.non_slack
        out.append(PoolStarvationChanged(
            tree=rt.name, pool=path, status=status, previous=before.status, since=round(since, ROUND),
            below_since=None if below_since is None else round(below_since, ROUND), kinds=kinds,
            usage=_r(usage), entitlement=_r(target), demand=_r(demand)))
    return out


def _wants(demand: Vector) -> bool:
    """Whether some kind of `demand` reaches the tolerance (else `below_on` finds no kind)."""
    return any(wanted >= TOLERANCE for wanted in demand.values())


_NOTHING = Ledger()  # read only: a pool that holds and wants nothing


def _r(values: Vector) -> dict[str, float]:
    return {k: round(v, ROUND) for k, v in sorted(values.items())}
