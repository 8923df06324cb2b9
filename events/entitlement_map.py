"""A tree's entitlement map as its `EntitlementsComputed` events fold, lent pools included.

`fold_entitlements(map, event)` folds one event (v1 to v3, the model or its view) into a tree's
map; every reader of entitlements keeps one (admission's and preemption's folds, the
`pool_status` projection, explain, replay, metrics). Most pools hold their numbers as an event
wrote them. A pool in a v3 event's `lent` holds its own part of `per_resource`'s step 3
(`LentPool`: given, share, limit per kind) instead: its `entitlement`, `non_slack_entitlement`
and `fair_share` are computed when read, by `lent_pool`, from that part, its sibling group's
latest factor (`LendingFactor`, per parent path) and the map's latest capacity, the others are
as written. The admission cycle writes a pool so only where that computation gives the engine's
numbers to the bit (services/admission/domain/entitle.py), so one leaf's demand changing, which
moves every pool's entitlement through step 3, writes a factor per sibling group and the few
pools whose own part moved, not the whole tree; every reader rebuilds the same map.

A read costs what one pool costs (a lent pool's computed numbers are kept until its group's
factor or the capacity changes); a fold costs what the event holds.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from math import inf
from typing import Any, Protocol

from events.decisions import ENTITLEMENT_DIGITS, LendingFactor, LentPool, PoolEntitlement

CPU = "cpu"  # the kind whose non-slack entitlement is the entitlement (revocable cpu is counted apart)
_NO_FACTOR: Mapping[str, float] = {}


class _Folded(Protocol):
    """What `fold_entitlements` reads of an event: the model's fields (or its view's)."""

    @property
    def capacity(self) -> Mapping[str, float]: ...

    @property
    def pools(self) -> Sequence[PoolEntitlement]: ...

    @property
    def removed(self) -> Sequence[str]: ...

    @property
    def replace(self) -> bool: ...


def group_of(path: str) -> str:
    """The sibling group of a pool: its parent's path (`/` for a top-level pool)."""
    cut = path.rfind("/")
    return path[:cut] if cut > 0 else "/"


def lent_numbers(lent: LentPool, factor: Mapping[str, float], slack: Mapping[str, float],
                 capacity: Mapping[str, float]) -> tuple[dict[str, float], dict[str, float], float]:
    """A lent pool's entitlement, non-slack entitlement (per kind of `lent.given`) and fair
    share, unrounded, as `per_resource` computes them in float64: per kind `e = max(given,
    min(given + factor * share, limit))` (no limit: none; no factor: 0); non-slack `e` for cpu,
    else `max(e - slack, 0)`; fair share the largest `e / capacity` over the kinds of some
    capacity (0 if none)."""
    entitlement: dict[str, float] = {}
    non_slack: dict[str, float] = {}
    best = 0.0
    share, limit = lent.share, lent.limit
    for kind, given in lent.given.items():
        e = max(given, min(given + factor.get(kind, 0.0) * share.get(kind, 0.0), limit.get(kind, inf)))
        entitlement[kind] = e
        non_slack[kind] = e if kind == CPU else max(e - slack.get(kind, 0.0), 0.0)
        whole = capacity.get(kind, 0.0)
        if whole > 0:
            best = max(best, e / whole)
    return entitlement, non_slack, best


def lent_pool(row: PoolEntitlement, lent: LentPool, factor: Mapping[str, float],
              capacity: Mapping[str, float]) -> PoolEntitlement:
    """The pool a lent `row` is now (see `lent_numbers`), its numbers rounded as on the wire."""
    entitlement, non_slack, fair = lent_numbers(lent, factor, row.slack_entitlement, capacity)
    digits = ENTITLEMENT_DIGITS
    return PoolEntitlement.model_construct(
        path=row.path, entitlement={k: round(v, digits) for k, v in entitlement.items()},
        non_slack_entitlement={k: round(v, digits) for k, v in non_slack.items()},
        slack_entitlement=dict(row.slack_entitlement), fair_share=round(fair, digits), usage_share=row.usage_share,
        demand_share=row.demand_share, dominant_kind=row.dominant_kind)


class EntitlementMap(Mapping[str, PoolEntitlement]):
    """A tree's entitlement map as `fold_entitlements` keeps it (path -> `PoolEntitlement`, a lent
    pool's computed when read). `last` is the last event folded into it (a writer that knows that
    event knows the whole map without reading it); `rows`, `lent`, `factors` and `capacity` are
    what the events wrote (read them, never change them)."""

    __slots__ = ("_made", "capacity", "factors", "last", "lent", "rows")

    def __init__(self, rows: Mapping[str, PoolEntitlement] | None = None) -> None:
        self.rows: dict[str, PoolEntitlement] = dict(rows) if rows else {}
        self.lent: dict[str, LentPool] = {}
        self.factors: dict[str, Mapping[str, float]] = {}
        self.capacity: Mapping[str, float] = {}
        self.last: object = None
        self._made: dict[str, tuple[PoolEntitlement, LentPool, Mapping[str, float], Mapping[str, float],
                                    PoolEntitlement]] = {}

    def __getitem__(self, path: str) -> PoolEntitlement:
        row = self.rows[path]
        lent = self.lent.get(path)
        if lent is None:
            return row
        factor = self.factors.get(group_of(path), _NO_FACTOR)
        made = self._made.get(path)
        if made is not None and made[0] is row and made[1] is lent and made[2] is factor and made[3] is self.capacity:
            return made[4]
        pool = lent_pool(row, lent, factor, self.capacity)
        self._made[path] = (row, lent, factor, self.capacity, pool)
        return pool

    def get(self, path: str, default: Any = None) -> Any:
        return self[path] if path in self.rows else default

    def __contains__(self, path: object) -> bool:
        return path in self.rows

    def __iter__(self) -> Iterator[str]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def copy(self) -> EntitlementMap:
        """Another map with the same contents (folding into one leaves the other as it was)."""
        out = EntitlementMap()
        out.rows, out.lent, out.factors = dict(self.rows), dict(self.lent), dict(self.factors)
        out.capacity, out.last, out._made = self.capacity, self.last, dict(self._made)
        return out

    def __getstate__(self) -> tuple[Any, ...]:  # pickled (snapshots) without the computed pools
        return self.rows, self.lent, self.factors, self.capacity, self.last

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        self.rows, self.lent, self.factors, self.capacity, self.last = state
        self._made = {}


def fold_entitlements(current: Mapping[str, PoolEntitlement], event: _Folded) -> EntitlementMap:
    """The entitlement map after `event` (see `EntitlementsComputed`): `current` itself, changed
    in place, when it is an `EntitlementMap` and the event does not replace it; a new map
    otherwise. Costs what the event holds, not what the map holds."""
    if event.replace:
        found = EntitlementMap()
    elif type(current) is EntitlementMap:
        found = current
    else:
        found = EntitlementMap(current)
    rows, lent, factors, made = found.rows, found.lent, found.factors, found._made
    for path in event.removed:  # (a deleted pool leaves nothing behind: pools come and go for months)
        rows.pop(path, None)
        lent.pop(path, None)
        factors.pop(path, None)
        made.pop(path, None)
    capacity = event.capacity
    if capacity != found.capacity:
        found.capacity = dict(capacity)
    written: Sequence[LendingFactor] | None = getattr(event, "factors", None)  # v3
    if written:
        for factor in written:
            factors[factor.group] = factor.factor
    for pool in event.pools:
        rows[pool.path] = pool
    if lent:
        for pool in event.pools:
            lent.pop(pool.path, None)
    parts: Sequence[LentPool] | None = getattr(event, "lent", None)  # v3
    if parts:
        for part in parts:
            if part.path in rows:
                lent[part.path] = part
    found.last = event
    return found


class FoldedOver(Mapping[str, PoolEntitlement]):
    """`base` as it will be once `events` (not replacing it) are folded into it, read without
    changing or copying `base` (what an admission cycle decides on before its events are
    applied): the pools the events wrote, else `base`'s but the removed ones; lent pools
    computed with the events' factors where they give one, else `base`'s."""

    __slots__ = ("_base", "_gone", "_made", "_top")

    def __init__(self, base: EntitlementMap, events: Sequence[_Folded]) -> None:
        top = EntitlementMap()
        gone: set[str] = set()
        for event in events:
            gone.update(event.removed)
            top = fold_entitlements(top, event)
        self._base, self._top, self._gone = base, top, gone
        self._made: dict[str, PoolEntitlement] = {}  # lent pools computed (a cycle reads a pool once per gang)

    def __getitem__(self, path: str) -> PoolEntitlement:
        made = self._made.get(path)
        if made is not None:
            return made
        top, base = self._top, self._base
        if path in top.rows:
            row, lent = top.rows[path], top.lent.get(path)
        elif path in self._gone:
            raise KeyError(path)
        else:
            row, lent = base.rows[path], base.lent.get(path)
        if lent is None:
            return row
        group = group_of(path)
        factor = top.factors[group] if group in top.factors else base.factors.get(group, _NO_FACTOR)
        pool = self._made[path] = lent_pool(row, lent, factor, top.capacity)
        return pool

    def get(self, path: str, default: Any = None) -> Any:
        try:
            return self[path]
        except KeyError:
            return default

    def __contains__(self, path: object) -> bool:
        return path in self._top.rows or (path in self._base.rows and path not in self._gone)

    def __iter__(self) -> Iterator[str]:
        top = self._top.rows
        yield from (path for path in self._base.rows if path not in self._gone and path not in top)
        yield from top

    def __len__(self) -> int:
        return sum(1 for _ in self)
