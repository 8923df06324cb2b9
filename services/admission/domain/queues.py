"""The four queues of a leaf pool and the named total orders of their gangs.

Order `fifo` (DOMAIN §2 `fifo_sort`): the keys in the order configured, from
`priority` (higher first), `arrival` (earlier first), `pending_tasks` (fewer tasks first), then
the gang id as the final tie-breaker. Gangs requeued at the head of pending come before all
others, the most recently requeued first.

Order `fair_share`: the job using least, by dominant share over its weight, first; ties by
priority (higher first), then arrival, then gang id. Usage changes as gangs are admitted, so the
head is chosen when asked (`head(usage)`), not when the gang is queued.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from itertools import islice

from services.admission.domain.model import Gang

SortKey = tuple[object, ...]


def fifo_key(gang: Gang, fifo_sort: Sequence[str]) -> SortKey:
    """The named total order `fifo`: (head tier, configured keys..., gang id)."""
    if gang.head_rank > 0:
        return (0, -gang.head_rank, gang.id)
    keys: list[object] = [1]
    for name in fifo_sort:
        if name == "priority":
            keys.append(-gang.priority)
        elif name == "arrival":
            keys.append(gang.arrival)
        elif name == "pending_tasks":
            keys.append(len(gang.tasks))
    keys.append(gang.arrival)
    keys.append(gang.id)
    return tuple(keys)


def fifo_key_of(fifo_sort: Sequence[str]) -> Callable[[Gang], SortKey]:
    """`fifo_key` with the order bound (what a queue keeps its gangs by); the default order
    `priority, arrival` gets a function of its own, the same keys without the loop."""
    if tuple(fifo_sort) == ("priority", "arrival"):
        return _priority_arrival_key
    return partial(_ordered_key, tuple(fifo_sort))  # (a partial, not a lambda: a snapshot pickles it)


def _ordered_key(order: tuple[str, ...], gang: Gang) -> SortKey:
    return fifo_key(gang, order)


def _priority_arrival_key(gang: Gang) -> SortKey:
    """`fifo_key(gang, ("priority", "arrival"))`."""
    if gang.head_rank > 0:
        return (0, -gang.head_rank, gang.id)
    return (1, -gang.priority, gang.arrival, gang.arrival, gang.id)


class GangQueue:
    """Gangs kept sorted by a precomputed key (bisect insert: O(log n) search, memmove insert).

    The head leaves by moving a start index (`_start`): the lists keep the departed gangs in front
    of it until they make up half of them (then they are cut off at once), so admitting the head
    of a queue of 100k gangs does not move the other 100k each time."""

    __slots__ = ("_gangs", "_index", "_key_of", "_keys", "_start")

    COMPACT_AFTER = 64  # departed heads kept before cutting them off (when also half the lists)

    def __init__(self, key_of: Callable[[Gang], SortKey]) -> None:
        self._keys: list[SortKey] = []
        self._gangs: list[Gang] = []
        self._index: dict[str, SortKey] = {}
        self._key_of = key_of
        self._start = 0  # the gangs before it have left

    def __len__(self) -> int:
        return len(self._gangs) - self._start

    def __iter__(self) -> Iterator[Gang]:
        return iter(self._gangs[self._start:])

    def members(self) -> Iterable[Gang]:
        """The gangs in no particular order (for reading only), without sorting them first."""
        return iter(self._gangs[self._start:])

    def ordered(self) -> list[Gang]:
        """The gangs in order, for reading only (not a copy: do not change the queue meanwhile)."""
        self._compact()
        return self._gangs

    def __contains__(self, gang_id: object) -> bool:
        return gang_id in self._index

    def push(self, gang: Gang) -> None:
        key = self._key_of(gang)
        keys = self._keys
        if len(keys) == self._start or keys[-1] < key:  # the usual case: a new gang goes last
            keys.append(key)
            self._gangs.append(gang)
        else:
            at = bisect.bisect_left(keys, key, self._start)
            keys.insert(at, key)
            self._gangs.insert(at, gang)
        self._index[gang.id] = key

    def remove(self, gang: Gang) -> None:
        key = self._index.pop(gang.id)
        start = self._start
        if self._gangs[start] is gang:  # the usual case: the head leaves (admitted)
            self._start = start + 1
            if self._start >= self.COMPACT_AFTER and 2 * self._start >= len(self._gangs):
                self._compact()
            return
        at = bisect.bisect_left(self._keys, key, start)  # else find its place by its key
        del self._keys[at]
        del self._gangs[at]

    def _compact(self) -> None:
        if self._start:
            del self._keys[:self._start]
            del self._gangs[:self._start]
            self._start = 0

    def head(self, usage: Callable[[Gang], float] | None = None) -> Gang | None:
        """The first gang; with `usage` (fair_share), the first gang of the least-using job."""
        if len(self._gangs) == self._start:
            return None
        if usage is None:
            return self._gangs[self._start]
        best: Gang | None = None
        best_key: SortKey = ()
        seen_jobs: set[str] = set()
        start = self._start
        for key, gang in zip(islice(self._keys, start, None), islice(self._gangs, start, None), strict=True):
            if gang.job in seen_jobs:
                continue  # a job's first gang in fifo order stands for the job
            seen_jobs.add(gang.job)
            candidate: SortKey = (0 if key[0] == 0 else 1, usage(gang), -gang.priority, gang.arrival, gang.id)
            if best is None or candidate < best_key:
                best, best_key = gang, candidate
        return best

    def position(self, gang_id: str) -> int | None:
        key = self._index.get(gang_id)
        return None if key is None else bisect.bisect_left(self._keys, key, self._start) - self._start

    def ahead_of(self, gang_id: str) -> Gang | None:
        """The gang just ahead of this one (for `explain`)."""
        at = self.position(gang_id)
        return None if not at else self._gangs[self._start + at - 1]


class UnorderedQueue(GangQueue):
    """A queue whose order is seldom read (preemption's copy of the fold keeps one for every pool
    whose queue order its passes never read): pushing and removing only keep the members, and
    the order is worked out (sorted by the same keys) when it is read. Every reading method of
    `GangQueue` answers the same here."""

    __slots__ = ("_members", "_sorted")

    def __init__(self, key_of: Callable[[Gang], SortKey]) -> None:
        super().__init__(key_of)
        self._members: dict[str, Gang] = {}
        self._sorted = True  # the lists of `GangQueue` hold the members in order

    def __len__(self) -> int:
        return len(self._members)

    def __contains__(self, gang_id: object) -> bool:
        return gang_id in self._members

    def push(self, gang: Gang) -> None:
        self._members[gang.id] = gang
        self._sorted = False

    def remove(self, gang: Gang) -> None:
        del self._members[gang.id]
        self._sorted = False

    def _sort(self) -> None:
        if self._sorted:
            return
        key_of = self._key_of
        pairs = sorted(((key_of(gang), gang) for gang in self._members.values()), key=lambda pair: pair[0])
        self._keys = [key for key, _ in pairs]
        self._gangs = [gang for _, gang in pairs]
        self._index = {gang.id: key for key, gang in pairs}
        self._start = 0
        self._sorted = True

    def __iter__(self) -> Iterator[Gang]:
        self._sort()
        return super().__iter__()

    def members(self) -> Iterable[Gang]:
        return self._members.values()

    def ordered(self) -> list[Gang]:
        self._sort()
        return super().ordered()

    def head(self, usage: Callable[[Gang], float] | None = None) -> Gang | None:
        self._sort()
        return super().head(usage)

    def position(self, gang_id: str) -> int | None:
        self._sort()
        return super().position(gang_id)
