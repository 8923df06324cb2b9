"""Upcasters: turn an older version of an event (as a JSON dict) into the current one.

An entry `(type, version)` maps a dict of that version to a dict of `version + 1`. The codec
runs the chain until the current version. Events change only through this table: a stored
event is never rewritten.

Example of an entry, for when `GangEnqueued` v2 renames `user` to `owner`:

    ("GangEnqueued", 1): lambda d: {**{k: v for k, v in d.items() if k != "user"},
                                    "owner": d.get("user", "anonymous"), "version": 2},
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]

UPCASTERS: dict[tuple[str, int], Upcaster] = {
    # v2 names the refused input's place in a pack of inputs (`input_part`); a v1 refusal always
    # named a message of one event.
    ("InputRejected", 1): lambda d: {**d, "version": 2},
    # v2 may hold a part of a computation, or only the pools that changed (`removed`, `replace`,
    # `part`, `parts`); a v1 event was always the whole map of its tree: it replaces the map.
    ("EntitlementsComputed", 1): lambda d: {**d, "version": 2, "replace": True, "part": 1, "parts": 1},
    # v3 may lend pools their share of what their parent left (`factors`, `lent`); a v2 event
    # lent none: every pool it wrote holds its numbers as written.
    ("EntitlementsComputed", 2): lambda d: {**d, "version": 3},
}


def upcast(event: dict[str, Any], current: int, table: dict[tuple[str, int], Upcaster] | None = None) -> dict[str, Any]:
    """Run the upcaster chain on `event` until it has version `current`.

    Raises KeyError naming the missing step when there is no way from its version to `current`."""
    steps = UPCASTERS if table is None else table
    while int(event.get("version", 0)) < current:
        key = (str(event.get("type")), int(event.get("version", 0)))
        if key not in steps:
            raise KeyError(f"no upcaster from {key[0]} v{key[1]} to v{key[1] + 1}")
        event = steps[key](event)
    return event
