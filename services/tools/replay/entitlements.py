"""Entitlement computations recorded before `EntitlementsComputed` v3, compared by the maps they
fold to (docs/operations.md, "Upgrade").

A v1 or v2 event carries every pool whose numbers changed since the tree's previous computation
(v1: all of them); v3 carries, for a tree of more than 1,000 pools that lends by share, one
factor per sibling group and the pools whose own part moved (events/entitlement_map.py). So the
replay, which re-derives a computation with the code it runs, writes other parts than a log from
before v3 recorded (other pools in them, another number of parts: its cycle's
`CycleCompleted.decisions` counts them), though every reader folds both to the same map. For
such a computation the verifier compares what counts: the tree's map folded from the recorded
events against the map folded from the re-derived ones, pool by pool, with the capacity, the
slack capacity and the alerts (`differences`); a number that really differs is still reported.

Each tree is followed from its first pre-v3 computation that replaces its map (a tree's first
computation always does), on both sides (`TreeMaps`); a pre-v3 computation of a tree not
followed (whose map before it is not known here) is compared part by part, as any decision.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from events import EntitlementsComputed, PoolEntitlement
from events.entitlement_map import EntitlementMap, fold_entitlements

CURRENT = 3  # the version whose parts the replay re-derives
_VERSION = re.compile(rb'"type":"EntitlementsComputed","version":(\d+)')
_FOLD_EVERY = 64  # events kept unfolded at most (a tree's computations that do not replace its map)
_NUMBERS = tuple(name for name in PoolEntitlement.model_fields if name != "path")  # a pool's numbers


def version_of(raw: bytes) -> int:
    """The version an `EntitlementsComputed` was written in (its bytes as recorded: decoding
    upcasts it to the current one)."""
    found = _VERSION.search(raw)
    if found is not None:
        return int(found.group(1))
    try:
        return int(json.loads(raw)["event"]["version"])
    except (ValueError, KeyError, TypeError):
        return CURRENT


class FoldedMap:
    """A tree's entitlement map as a run of `EntitlementsComputed` folds: the events since the
    last one that replaced the map are kept and folded when the map is read (or when many), so
    following a small tree, whose every computation replaces its map, costs no fold."""

    __slots__ = ("base", "events")

    def __init__(self) -> None:
        self.base: EntitlementMap | None = None
        self.events: list[EntitlementsComputed] = []

    def add(self, event: EntitlementsComputed) -> None:
        if event.replace:
            self.base, self.events = None, [event]
            return
        self.events.append(event)
        if len(self.events) >= _FOLD_EVERY:
            self.map()

    def map(self) -> EntitlementMap | None:
        """The map (None: it started with an event that did not replace a map, unknown here)."""
        if self.base is None and (not self.events or not self.events[0].replace):
            return None
        current: Mapping[str, PoolEntitlement] = self.base if self.base is not None else EntitlementMap()
        for event in self.events:
            current = fold_entitlements(current, event)
        self.events = []
        self.base = current if isinstance(current, EntitlementMap) else EntitlementMap(current)
        return self.base


class TreeMaps:
    """One tree's map as its recorded computations fold, and as its re-derived ones fold."""

    __slots__ = ("derived", "recorded")

    def __init__(self) -> None:
        self.recorded = FoldedMap()
        self.derived = FoldedMap()


def _numbers(pool: PoolEntitlement) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in _NUMBERS:
        value = getattr(pool, name)
        out[name] = dict(value) if isinstance(value, Mapping) else value
    return out


def differences(recorded: Sequence[EntitlementsComputed], derived: Sequence[EntitlementsComputed],
                recorded_map: EntitlementMap | None, derived_map: EntitlementMap | None,
                compare: Callable[[Any, Any, str, int], list[str]], limit: int = 5) -> list[str]:
    """Where one computation's recorded parts and re-derived parts disagree, once folded: the maps
    (pool by pool, the capacity), and the first parts' slack capacity and alerts (`compare`: the
    verifier's JSON differences, `path: recorded != re-derived`)."""
    if recorded_map is None or derived_map is None:
        return ["the tree's map before this computation is not known: its parts are not comparable"]
    out: list[str] = []
    first, mine = recorded[0], derived[0]
    out += compare(dict(recorded_map.capacity), dict(derived_map.capacity), "capacity", limit)
    out += compare(dict(first.slack_capacity), dict(mine.slack_capacity), "slack_capacity", limit - len(out))
    out += compare(list(first.alerts), list(mine.alerts), "alerts", limit - len(out))
    for path in sorted(set(recorded_map) | set(derived_map)):
        if len(out) >= limit:
            break
        a, b = recorded_map.get(path), derived_map.get(path)
        if a is None or b is None:
            out.append(f"pools.{path}: {'absent' if a is None else 'present'} recorded, "
                       f"{'absent' if b is None else 'present'} re-derived")
            continue
        numbers, theirs = _numbers(a), _numbers(b)
        if numbers != theirs:
            out += compare(numbers, theirs, f"pools.{path}", limit - len(out))
    return out[:limit]
