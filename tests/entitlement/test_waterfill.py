"""Weighted water-filling: the scalar reference by hand, the segmented one against it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.entitlement.waterfill import level_waterfill, segmented_waterfill, waterfill


@pytest.mark.parametrize(
    ("amount", "needs", "weights", "gifts"),
    [
        (50, [60, 60], [1, 1], [25, 25]),  # equal shares
        (30, [100, 100], [1, 2], [10, 20]),  # by weight
        (50, [10, 100], [1, 1], [10, 40]),  # a satisfied claimant leaves its part to the others
        (500, [10, 100], [1, 1], [10, 100]),  # enough for everyone: each gets its need
        (100, [100, 50], [1, 3], [50, 50]),  # capped at the need, the rest to the other
        (50, [10, 100], [0, 1], [0, 50]),  # weight 0 waits for the others
        (105, [10, 100], [0, 1], [5, 100]),  # ... and takes what they leave
        (0, [10, 10], [1, 1], [0, 0]),
    ],
)
def test_waterfill_by_hand(amount: float, needs: list[float], weights: list[float], gifts: list[float]) -> None:
    assert waterfill(amount, needs, weights) == pytest.approx(gifts)
    got = segmented_waterfill(
        np.array([float(amount)]),
        np.array(needs, dtype=float),
        np.array(weights, dtype=float),
        np.zeros(len(needs), dtype=np.intp),
    )
    assert got.tolist() == pytest.approx(gifts)


segments = st.lists(
    st.tuples(
        st.floats(0, 200),
        st.lists(
            st.tuples(
                st.sampled_from([0.0, 1.0, 5.0, 50.0, 150.0]) | st.floats(0, 100),
                st.sampled_from([0.0, 0.5, 1.0, 2.0, 10.0]),
            ),
            min_size=1,
            max_size=6,
        ),
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=300, deadline=None)
@given(segments)
def test_segmented_waterfill_is_many_scalar_ones(segs: list[tuple[float, list[tuple[float, float]]]]) -> None:
    amount = np.array([a for a, _ in segs])
    need = np.array([n for _, cl in segs for n, _ in cl])
    weight = np.array([w for _, cl in segs for _, w in cl])
    segment = np.array([s for s, (_, cl) in enumerate(segs) for _ in cl], dtype=np.intp)
    got = segmented_waterfill(amount, need, weight, segment).tolist()
    want = [x for a, cl in segs for x in waterfill(a, [n for n, _ in cl], [w for _, w in cl])]
    assert got == pytest.approx(want, abs=1e-7)
    for s, (a, cl) in enumerate(segs):
        total = sum(g for g, sg in zip(got, segment.tolist(), strict=True) if sg == s)
        assert total <= a + 1e-7
        assert total == pytest.approx(min(a, sum(n for n, _ in cl)), abs=1e-7)


def test_level_waterfill_is_per_group_and_kind() -> None:
    # two groups (rows 0-1 and 2), two kinds
    amount = np.array([[50.0, 10.0], [5.0, 100.0]])
    need = np.array([[60.0, 10.0], [60.0, 10.0], [10.0, 1.0]])
    weight = np.ones((3, 2))
    got = level_waterfill(amount, need, weight, np.array([0, 0, 1], dtype=np.intp))
    assert got.tolist() == [[25.0, 5.0], [25.0, 5.0], [5.0, 1.0]]
