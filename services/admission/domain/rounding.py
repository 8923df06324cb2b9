"""Python's `round(x, digits)` over a whole matrix at once, to the same bits.

An admission cycle rounds every number of every pool it publishes (`EntitlementsComputed`:
about 1,300 numbers for 100 leaves), and `round` to digits costs about 0.3 µs a number: more
than the entitlement engine itself. `numpy.round` is no substitute: it multiplies, rounds and
divides in floating point, and differs from `round` in the last bit now and then.

`round(x, d)` is the double nearest to `k / 10**d`, where `k` is the integer nearest to the exact
value of `x * 10**d` (ties to even: `round` reads the exact binary value, correctly rounded).
Vectorised, with `s = 10.0**d` (exact for d <= 22):

1. `p = x * s` is within half an ulp of the exact product. If `p` is farther than a few ulps
   from every half-integer, `rint(p)` is that same integer `k` (the exact product lies on the
   same side of every rounding boundary as `p`). Otherwise (a near-tie), or when `|p|` is too
   large for the ulps to be small (or `x` is not finite), the element is left to `round` itself.
2. `k / s`: `k` (below 2**53) and `s` are exact doubles, and IEEE division is correctly rounded,
   so this is the double nearest to `k / 10**d`: what `round` returns (signed zeros included).

`tests/admission/test_rounding.py` holds this to `round` on random, decimal, tie and extreme
values.
"""

from __future__ import annotations

import numpy as np

from services.entitlement.model import FloatArray

_LARGE = float(2**50)  # |x * 10**digits| at or above this: left to `round` (ulps no longer tiny)


def round_matrix(values: FloatArray, digits: int) -> list[list[float]]:
    """`[[round(x, digits) for x in row] for row in values.tolist()]` for a 2-d float array,
    the same floats, for 0 <= digits <= 22."""
    return _rounded(np.asarray(values, dtype=np.float64), digits).tolist()  # type: ignore[no-any-return]


def round_vector(values: FloatArray, digits: int) -> list[float]:
    """`[round(x, digits) for x in values.tolist()]` for a 1-d float array, the same floats."""
    return _rounded(np.asarray(values, dtype=np.float64), digits).tolist()  # type: ignore[no-any-return]


def _rounded(x: FloatArray, digits: int) -> FloatArray:
    if not 0 <= digits <= 22:
        raise ValueError(f"digits must be within 0..22 (10**digits exact), got {digits}")
    scale = 10.0 ** digits
    with np.errstate(invalid="ignore", over="ignore"):
        p = x * scale
        k = np.rint(p)
        magnitude = np.abs(p)
        # distance of p from the half-integer between floor(p) and floor(p) + 1 (exact: |p| >= 0.5
        # wherever it can be small); the other half-integers are at least 0.5 away
        tie = np.abs(p - np.floor(p) - 0.5)
        safe = (magnitude < _LARGE) & (tie > 4.0 * np.spacing(magnitude))
        out = k / scale
    if not safe.all():
        flat_out = out.reshape(-1)
        flat_x = x.reshape(-1)
        for i in np.flatnonzero(~safe.reshape(-1)).tolist():
            flat_out[i] = round(float(flat_x[i]), digits)
    return out
