"""Resource vectors as plain dicts (kind -> amount), with the tolerance of DOMAIN §1.

`a <= b` holds when `a - b < TOLERANCE`; subtraction clamps at 0."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

TOLERANCE = 0.0009

Vector = dict[str, float]


def add_into(acc: Vector, other: Mapping[str, float], sign: float = 1.0) -> None:
    """acc += sign * other, in place; kinds that drop to ~0 stay (as 0.0) so reports list them."""
    get = acc.get
    for kind, amount in other.items():
        value = get(kind, 0.0) + sign * amount
        acc[kind] = 0.0 if -1e-9 < value < 1e-9 else value  # abs(value) < 1e-9, without the call


def add_all_into(accs: Sequence[Vector], vectors: Iterable[Mapping[str, float]], sign: float = 1.0) -> None:
    """`add_into(acc, vector, sign)` for every acc, of every vector in order: the same numbers, in
    one call (a ledger's buckets take a gang's tasks so)."""
    for vector in vectors:
        items = vector.items()
        for acc in accs:
            get = acc.get
            for kind, amount in items:
                value = get(kind, 0.0) + sign * amount
                acc[kind] = 0.0 if -1e-9 < value < 1e-9 else value


def total(vectors: Iterable[Mapping[str, float]]) -> Vector:
    """The sum, added up in order as `add_into` adds (the same numbers), in one loop."""
    acc: Vector = {}
    get = acc.get
    for vector in vectors:
        for kind, amount in vector.items():
            value = get(kind, 0.0) + amount
            acc[kind] = 0.0 if -1e-9 < value < 1e-9 else value
    return acc


def free(limit: Mapping[str, float], used: Mapping[str, float], kinds: Iterable[str]) -> Vector:
    """What is left of `limit` after `used`, per kind, clamped at 0."""
    return {k: max(0.0, limit.get(k, 0.0) - used.get(k, 0.0)) for k in kinds}


def fits(need: Mapping[str, float], room: Mapping[str, float]) -> bool:
    """Every kind the need asks for is within the room (a kind not needed always fits)."""
    return all(amount - room.get(kind, 0.0) < TOLERANCE for kind, amount in need.items() if amount > 0)


def fits_free(need: Mapping[str, float], limit: Mapping[str, float], used: Mapping[str, float]) -> bool:
    """`fits(need, free(limit, used, need))`, the same arithmetic, without building the room."""
    for kind, amount in need.items():
        if amount > 0:
            room = limit.get(kind, 0.0) - used.get(kind, 0.0)
            if not amount - (room if room > 0.0 else 0.0) < TOLERANCE:  # max(0.0, room), without the call
                return False
    return True


def short_of(need: Mapping[str, float], room: Mapping[str, float]) -> Vector:
    """The kinds where `need` exceeds `room`, with how far."""
    return {k: a - room.get(k, 0.0) for k, a in need.items() if a > 0 and a - room.get(k, 0.0) >= TOLERANCE}


def exceeds(a: Mapping[str, float], b: Mapping[str, float]) -> Vector:
    """Per kind, how far `a` is above `b` (only kinds beyond the tolerance)."""
    return {k: v - b.get(k, 0.0) for k, v in a.items() if v - b.get(k, 0.0) >= TOLERANCE}


def scaled(vector: Mapping[str, float], factor: float) -> Vector:
    return {k: v * factor for k, v in vector.items()}
