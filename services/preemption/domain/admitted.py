"""The admitted gangs of one tree, by pool, as the preemption service keeps them between passes.

A pass looks at the gangs of the few pools it works on (those over their entitlement, those with
`preempt_lower_priority`), so it must not pay for every admitted gang of the tree at every pass.
The index is a superset: gangs are added when their `GangAdmitted` is applied, and those that
are no longer admitted (finished, requeued, cancelled) are dropped when their pool is read, and
all at once whenever the index has doubled since the last sweep (amortised O(1) per gang).
"""

from __future__ import annotations

from collections.abc import Iterable

from services.admission.domain.model import ADMITTED, Gang

SWEEP_FLOOR = 1024  # entries below which the index is never swept whole


class AdmittedIndex:
    __slots__ = ("_pools", "_size", "_swept")

    def __init__(self, gangs: Iterable[Gang] = ()) -> None:
        self._pools: dict[str, dict[str, Gang]] = {}
        self._size = 0  # entries, stale ones included
        self._swept = 0  # entries left by the last sweep
        for gang in gangs:
            if gang.state == ADMITTED:
                self.add(gang)

    def __len__(self) -> int:
        return self._size

    def add(self, gang: Gang) -> None:
        """An admitted gang (again: a gang admitted anew after a requeue is the same entry)."""
        pool = self._pools.get(gang.pool)
        if pool is None:
            pool = self._pools[gang.pool] = {}
        if gang.id not in pool:
            self._size += 1
        pool[gang.id] = gang

    def of_pool(self, pool: str) -> list[Gang]:
        """The gangs of `pool` that are admitted now, in the order they were first admitted."""
        found = self._pools.get(pool)
        if not found:
            return []
        self._drop_stale(found)
        return list(found.values())

    def sweep_if_grown(self) -> None:
        """Drop every stale entry if the index has doubled since the last sweep."""
        if self._size <= 2 * max(self._swept, SWEEP_FLOOR):
            return
        for gangs in self._pools.values():
            self._drop_stale(gangs)
        self._pools = {path: gangs for path, gangs in self._pools.items() if gangs}
        self._swept = self._size

    def _drop_stale(self, gangs: dict[str, Gang]) -> None:
        gone = [gang_id for gang_id, gang in gangs.items() if gang.state != ADMITTED]
        for gang_id in gone:
            del gangs[gang_id]
        self._size -= len(gone)
