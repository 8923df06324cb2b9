"""Resource amounts: the comparison tolerance of DOMAIN §1 and how messages spell numbers."""

from __future__ import annotations

import math

TOLERANCE = 0.0009
"""`a <= b` holds when `a - b < TOLERANCE` (DOMAIN §1)."""

UNBOUNDED = math.inf
"""A limit nobody set: the pool may use what its tree has."""


def exceeds(a: float, b: float) -> bool:
    """`a > b` beyond the tolerance: the negation of DOMAIN's `a <= b`."""
    return a - b >= TOLERANCE


def spell(amount: float) -> str:
    """A number as an operator reads it: `50`, `33.33`, `0.5`, `unbounded` (at most 4 decimals)."""
    if math.isinf(amount):
        return "unbounded" if amount > 0 else "-unbounded"
    if float(amount).is_integer():
        return str(int(amount))
    text = f"{amount:.4f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text
