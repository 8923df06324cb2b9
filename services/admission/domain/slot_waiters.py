"""Gangs of jobs waiting for a running-job slot (DOMAIN §4 check 4), marked after each admission
cycle's decisions are in: where each waits, so that the next cycle takes the waiting jobs first."""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from services.admission.domain.chains import pool_chain
from services.admission.domain.facts import running_limit
from services.admission.domain.model import Gang
from services.admission.domain.runtime import TreeRuntime
from services.tree.domain.state import TreeState


def mark_slot_waiters(config: TreeState, rt: TreeRuntime) -> None:
    """After a cycle's decisions are in (DOMAIN §4 check 4): every queued gang of a job that would
    break a running-job limit waits at the first pool on its way up whose limit is full
    (`Gang.slot_wait`); the next cycle takes the waiting jobs first, by arrival. A gang whose job
    runs in its pool needs no slot; one whose pools all have room again keeps its place in line
    until it is admitted (its slot has freed: it is first to take it)."""
    def limit(pool: str) -> int | None:
        return running_limit(config, rt.name, pool)  # memoised per configuration

    # Whether any pool with queues has a running-job limit on its way up: memoised with the number
    # of pools with queues (they are only added between configuration changes, which empty the
    # cache), since the fold asks after every cycle.
    key = ("admission_queues_limited", rt.name)
    memo = cast(tuple[int, bool] | None, config.cache.get(key))
    if memo is not None and memo[0] == len(rt.queues):
        limited = memo[1]
    else:
        limited = any(limit(p) is not None for leaf in rt.queues for p in pool_chain(leaf))
        config.cache[key] = (len(rt.queues), limited)
    if not limited:
        for gang_id in rt.slot_waiters:  # no running-job limit anywhere gangs wait (any more)
            rt.gangs[gang_id].slot_wait = None
        rt.slot_waiters = set()
        return
    marked: set[str] = set()
    # where a job waits for a slot depends on its leaf and the running jobs only: found once per
    # (job, leaf) (a leaf's queues hold many gangs of the same few jobs)
    found: dict[tuple[str, str], str | None] = {}
    for queues in rt.queues.values():
        for queue in queues.values():
            for gang in queue.members():  # (in any order: each gang's mark is its own)
                key = (gang.job, gang.pool)
                wait = found[key] if key in found else found.setdefault(key, _slot_wait(rt, gang, limit))
                if wait != _ROOM:
                    gang.slot_wait = wait
                if gang.slot_wait is not None:
                    marked.add(gang.id)
    rt.slot_waiters = marked


_ROOM = ""  # `_slot_wait`: a slot everywhere (no pool path is empty)


def _slot_wait(rt: TreeRuntime, gang: Gang, limit: Callable[[str], int | None]) -> str | None:
    """Where the gang's job waits for a slot: None if it runs in the gang's leaf (it needs none),
    else the first pool up from the leaf whose running-job limit it finds full, else `_ROOM` (the
    gang keeps its mark: first in line for the slot that freed)."""
    if gang.job in rt.running.get(gang.pool, {}):
        return None
    for pool in pool_chain(gang.pool):
        running = rt.running.get(pool, {})
        cap = limit(pool)
        if cap is not None and gang.job not in running and len(running) >= cap:
            return pool
    return _ROOM
