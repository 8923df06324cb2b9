"""The queue book of a tree: each pool's four queues (`queues.py`'s orders), made when first
needed in the order the pool's options give, re-sorted when those change, and gangs put into
them (they are then demand) and taken out."""

from __future__ import annotations

from services.admission.domain.fold_data import FoldData
from services.admission.domain.job_counts import ledger_of
from services.admission.domain.model import PENDING, Gang
from services.admission.domain.queues import GangQueue, UnorderedQueue, fifo_key_of
from services.admission.domain.runtime import TreeRuntime
from services.tree.domain import paths
from services.tree.domain.effective import EffectivePool, effective_pool


def enqueue(state: FoldData, rt: TreeRuntime, gang: Gang) -> None:
    """Put a complete gang into the pending queue of its pool; it is now demand.

    A message that leaves a tree with `TreeOptions.cycle_gangs` gangs made pending since its last
    cycle starts a cycle at its end (`full`), as a tick does: a burst of enqueues is decided as it
    is folded, cycle after cycle, not after the whole burst (a tick lands behind what was
    published before it). Smaller values pay each cycle's fixed costs more often, larger ones
    decide later; the default was measured against others on bursts (docs/performance.md,
    `cycle_gangs`)."""
    gang.state, gang.queue = PENDING, "pending"
    rt.fresh += 1
    if rt.fresh >= rt.cycle_gangs and rt.name not in state.full:
        state.full.append(rt.name)
    pool = gang.pool
    (rt.queues.get(pool) or queues_of(state, rt, pool))["pending"].push(gang)
    (rt.ledgers.get(pool) or ledger_of(rt, pool)).want(gang, 1.0)


def dequeue(state: FoldData, rt: TreeRuntime, gang: Gang) -> None:
    """Take a gang out of its queue, if it is in one: it is no longer demand."""
    if gang.state == PENDING and gang.queue is not None:
        pool = gang.pool
        (rt.queues.get(pool) or queues_of(state, rt, pool))[gang.queue].remove(gang)
        (rt.ledgers.get(pool) or ledger_of(rt, pool)).want(gang, -1.0)
    gang.queue = None


def queues_of(state: FoldData, rt: TreeRuntime, pool: str) -> dict[str, GangQueue]:
    """The pool's queues by name, made (empty) the first time they are asked for."""
    found = rt.queues.get(pool)
    if found is None:
        found = rt.queues[pool] = _new_queues(state, rt, pool)
    return found


def rebuild_queues(state: FoldData, rt: TreeRuntime, pool: str) -> None:
    """A pool's order options may have changed: re-sort its queues if they did. The queues of a
    pool that is gone, with nothing in them, are forgotten (made again, in the order of the
    day, if the pool comes back: an ephemeral pool does)."""
    old = rt.queues.get(pool)
    if old is None:
        return
    view = effective_pool(state.config, rt.name, pool)
    if view is None and not any(len(q) for q in old.values()):
        del rt.queues[pool]
        rt.orders.pop(pool, None)
        return
    if _order(view) == rt.orders.get(pool) and _unordered(state, view) == isinstance(old["pending"], UnorderedQueue):
        return
    new = _new_queues(state, rt, pool)
    for name, queue in old.items():
        for gang in queue:
            new[name].push(gang)
    rt.queues[pool] = new


def rebuild_queues_under(state: FoldData, rt: TreeRuntime, path: str) -> None:
    """Options of `path` changed: its queues and those below it (ephemeral `pool$user` children
    take their parent's `ephemeral_subpool_config`) may have a new order."""
    below = path.rstrip(paths.SEPARATOR) + paths.SEPARATOR
    for pool in [p for p in rt.queues if p == path or p.startswith(below)]:
        rebuild_queues(state, rt, pool)


def _new_queues(state: FoldData, rt: TreeRuntime, pool: str) -> dict[str, GangQueue]:
    view = effective_pool(state.config, rt.name, pool)
    order = _order(view)
    rt.orders[pool] = order
    key = fifo_key_of(order)
    kind = UnorderedQueue if _unordered(state, view) else GangQueue
    return {name: kind(key) for name in ("non_preemptible", "controller", "revocable", "pending")}


def _unordered(state: FoldData, view: EffectivePool | None) -> bool:
    """Whether a pool's queues need not keep their order as they go (see `FoldData.reader`)."""
    return state.reader and (view is None or not view.preempt_lower_priority)


def _order(view: EffectivePool | None) -> tuple[str, ...]:
    """The `fifo_sort` a pool's queues keep their gangs by."""
    return view.fifo_sort if view is not None else ("priority", "arrival")
