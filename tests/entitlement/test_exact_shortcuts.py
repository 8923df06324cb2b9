"""The faster forms of numpy calls used by `dominant` and `hdrf` (polylines.py, hdrf_curves.py,
hdrf_runs.py) give exactly what the calls they replace give: the same permutation, the same bits."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from services.admission.domain.entitlement.hdrf_runs import _first_kind
from services.admission.domain.entitlement.polylines import Polylines, argument_at, evaluate, stable_argsort

# few distinct values, so that ties are common; signed zeros, infinities and NaN among them
_VALUES = st.sampled_from([0.0, -0.0, 1.0, 2.5, 2.5 + 2**-51, 1e-300, 7.0, np.inf, -np.inf, np.nan, -3.0])


@settings(max_examples=400, deadline=None)
@given(hnp.arrays(np.float64, st.integers(0, 60), elements=_VALUES), st.booleans())
def test_stable_argsort_is_numpys_stable_sort(x: np.ndarray, in_order: bool) -> None:
    if in_order:
        x = np.sort(x)  # the path for values in order already (NaN last)
    assert stable_argsort(x).tolist() == x.argsort(kind="stable").tolist()


@settings(max_examples=200, deadline=None)
@given(hnp.arrays(np.int64, st.integers(0, 300), elements=st.integers(-3, 3)))
def test_stable_argsort_of_integers_is_numpys_stable_sort(x: np.ndarray) -> None:
    assert stable_argsort(x).tolist() == x.argsort(kind="stable").tolist()


def test_stable_argsort_on_large_arrays_with_and_without_ties() -> None:
    rng = np.random.default_rng(7)
    for x in (rng.random(30_000), rng.integers(0, 500, 30_000).astype(np.float64) / 7.0,
              np.repeat(rng.random(3_000), 10)):
        assert stable_argsort(x).tolist() == x.argsort(kind="stable").tolist()


@st.composite
def _polylines(draw: st.DrawFn) -> tuple[Polylines, np.ndarray]:
    """Rows of 1-6 vertices at nondecreasing arguments (repeated ones: jumps), and a `y` per row
    before, on, between and after them."""
    rows = draw(st.integers(1, 8))
    counts = [draw(st.integers(1, 6)) for _ in range(rows)]
    steps = st.sampled_from([0.0, 0.0, 0.25, 1.0, 3.0])
    xs: list[float] = []
    ys: list[float] = []
    for c in counts:
        row = list(np.cumsum([draw(steps) for _ in range(c)]))
        xs += row
        ys.append(draw(st.sampled_from([-1.0, 0.0, 0.1, *row, row[-1] / 3.0, row[-1] + 1.0])))
    n = len(xs)
    off = np.concatenate(([0], np.cumsum(counts))).astype(np.intp)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    v = np.cumsum(rng.random((3, n)), axis=1)
    t = np.cumsum(rng.random(n))
    return Polylines(off, np.array(xs), v, t, rng.random(n) < 0.5), np.array(ys)


@settings(max_examples=300, deadline=None)
@given(_polylines())
def test_argument_at_is_evaluates_argument_bit_for_bit(case: tuple[Polylines, np.ndarray]) -> None:
    p, y = case
    _, t, _ = evaluate(p, y, np.zeros(p.rows, dtype=bool))
    assert argument_at(p, y).tobytes() == t.tobytes()


@settings(max_examples=200, deadline=None)
@given(hnp.arrays(np.bool_, st.tuples(st.integers(0, 40), st.integers(1, 5))))
def test_first_kind_is_the_first_true_column(hit: np.ndarray) -> None:
    expected = np.where(hit.any(axis=1), hit.argmax(axis=1), -1)
    assert _first_kind(hit).tolist() == expected.tolist()
