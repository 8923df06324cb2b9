"""`rounding.round_matrix` is Python's `round(x, digits)`, bit for bit (signed zeros, NaN and
infinities included), on the numbers an entitlement cycle rounds and on the hard cases: ties at
the last digit, values a hair either side of them, huge and tiny magnitudes."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.admission.domain.rounding import round_matrix, round_vector


def _same(got: list[float], values: list[float], digits: int) -> None:
    for x, g in zip(values, got, strict=True):
        want = round(x, digits)
        if math.isnan(want):
            assert math.isnan(g), x
        else:
            assert g == want and math.copysign(1.0, g) == math.copysign(1.0, want), (x, g, want)


def _cases(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    n = 20_000
    ties = (rng.integers(-10**12, 10**12, n) + 0.5) / 1e9
    return [
        rng.random(n), rng.random(n) * 1000, rng.random(n) * 3e6, -rng.random(n) * 100, ties,
        np.nextafter(ties, np.inf), np.nextafter(ties, -np.inf),
        np.round(rng.random(n) * 1000, 9) + rng.choice([0.0, 5e-10, -5e-10, 4.9999999e-10], n),
        rng.integers(0, 2**20, n) / 1024.0, 10.0 ** rng.uniform(-15, 20, n), -(10.0 ** rng.uniform(-15, 20, n)),
        rng.random(n) / 3.0 * 7,
        np.array([0.0, -0.0, 1e-12, -1e-12, 5e-10, -5e-10, 1.5e-9, 2.5e-9, math.inf, -math.inf, math.nan,
                  0.0009765625, 1 / 3, 2 / 3, 33.333333333333336, 1e300, -1e300, 5e-324, 2.0**50 / 1e9, 2.0**53]),
    ]


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("digits", [9, 0, 3, 12])
def test_the_same_floats_as_round(seed: int, digits: int) -> None:
    for values in _cases(seed):
        _same(round_vector(values, digits), values.tolist(), digits)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=1, max_size=40))
def test_any_float(values: list[float]) -> None:
    _same(round_vector(np.array(values), 9), values, 9)


def test_a_matrix_row_by_row() -> None:
    m = np.random.default_rng(3).random((105, 15)) * 300
    assert round_matrix(m, 9) == [[round(x, 9) for x in row] for row in m.tolist()]
    assert round_matrix(np.zeros((4, 0)), 9) == [[], [], [], []]


def test_digits_beyond_exact_powers_are_refused() -> None:
    with pytest.raises(ValueError):
        round_vector(np.zeros(1), 23)
