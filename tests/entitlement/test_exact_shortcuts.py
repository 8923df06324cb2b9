"""The faster forms of numpy calls used by `dominant` and `hdrf` (polylines.py, hdrf_curves.py,
hdrf_runs.py) give exactly what the calls they replace give: the same permutation, the same bits."""

from __future__ import annotations

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from services.entitlement.hdrf_curves import _concat, _Events, _job_events, nones, sum_runs
from services.entitlement.hdrf_runs import _first_kind
from services.entitlement.polylines import (
    _PAIRED,
    Polylines,
    _first_true,
    _kinks,
    _kinks_few,
    _kinks_many,
    _top_line,
    argument_at,
    by_group_and_x,
    compose,
    cumsum_rows,
    evaluate,
    segmented_cumsum,
    segmented_cumsum_at,
    sorted_minor,
    stable_argsort,
)

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


def _by_group_then_x(group: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The order of `(group, x)`, ties by index: a stable sort by `x`, then a stable one by group."""
    by_x = x.argsort(kind="stable")
    out: np.ndarray = by_x[group[by_x].argsort(kind="stable")]
    return out


@settings(max_examples=400, deadline=None)
@given(st.integers(0, 80).flatmap(lambda n: st.tuples(
    hnp.arrays(np.float64, n, elements=_VALUES), hnp.arrays(np.intp, n, elements=st.integers(0, 6)))))
def test_by_group_and_x_is_the_stable_sort_by_group_then_x(case: tuple[np.ndarray, np.ndarray]) -> None:
    x, group = case
    assert by_group_and_x(group, x).tolist() == _by_group_then_x(group, x).tolist()


def test_by_group_and_x_on_levels_of_sorted_runs() -> None:
    """As a level's events come: each group's children's vertices in order, run after run, with
    ties across children; and shuffled."""
    rng = np.random.default_rng(11)
    for groups, n in ((1, 20_000), (40, 20_000), (3_000, 9_000)):
        group = np.sort(rng.integers(0, groups, n))
        x = np.concatenate([np.sort(part) for part in np.array_split(rng.integers(0, 50, n) / 8.0, 7)])
        for g, v in ((group, x), (np.concatenate((group[n // 2 :], group[: n // 2])), x),
                     (rng.permutation(group), rng.permutation(x))):
            assert by_group_and_x(g, v).tolist() == _by_group_then_x(g, v).tolist()


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 5), st.sampled_from([0, 1, 7, _PAIRED - 1, _PAIRED, _PAIRED + 5]), st.integers(0, 2**32 - 1),
       st.booleans())
def test_cumsum_rows_is_numpys_cumsum_bit_for_bit(dims: int, n: int, seed: int, specials: bool) -> None:
    rng = np.random.default_rng(seed)
    values = rng.standard_normal((dims, n)) * 10.0 ** rng.integers(-300, 300, (dims, n)).astype(np.float64)
    if specials and n:  # signed zeros, infinities and NaN among them
        values.flat[rng.integers(0, values.size, 8)] = rng.choice([0.0, -0.0, np.inf, -np.inf, np.nan], 8)
    with np.errstate(invalid="ignore", over="ignore"):  # (inf - inf, and sums past the largest float)
        want = values.cumsum(axis=1)
        assert cumsum_rows(values).tobytes() == want.tobytes()
        out = np.empty_like(values)
        cumsum_rows(values, out=out)
    assert out.tobytes() == want.tobytes()


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
@given(hnp.arrays(np.bool_, st.tuples(st.integers(0, 40), st.integers(1, 5))), st.data())
def test_first_kind_is_the_first_true_column(needs: np.ndarray, data: st.DataObject) -> None:
    """The first kind used up that each of some jobs needs: the first true column of their rows
    of `needs & used`."""
    used = data.draw(hnp.arrays(np.bool_, needs.shape[1]))
    js = np.array(sorted(data.draw(st.sets(st.integers(0, max(0, needs.shape[0] - 1)), max_size=needs.shape[0]))),
                  dtype=np.intp)
    hit = needs[js] & used
    expected = np.where(hit.any(axis=1), hit.argmax(axis=1), -1)
    assert _first_kind(np.ascontiguousarray(needs.T), js, used).tolist() == expected.tolist()


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 300), st.integers(0, 2**32 - 1), st.integers(1, 5000))
def test_sorted_minor_is_the_sort_of_major_times_n_plus_minor(n: int, seed: int, groups: int) -> None:
    rng = np.random.default_rng(seed)
    major = rng.integers(0, groups, n)
    minor = rng.permutation(n)
    key = major.astype(np.int64) * n + minor
    key.sort()
    assert sorted_minor(major, minor, n).tolist() == (key % n).tolist()


def _kinks_one_column_at_a_time(c: np.ndarray, m: np.ndarray, smax: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`polylines._kinks` column by column, line by line, in numpy scalars (IEEE arithmetic, as
    the arrays): from the top line at 0 (the steepest among equals, then the first), the
    earliest crossing before `smax` by a steeper line (the steepest, then the first, among
    equals) is the next line, and a kink where it is past the last one; until the top line is
    the steepest of all."""
    lines, n = c.shape
    out = np.full((lines, n), np.nan)
    cnt = np.zeros(n, dtype=np.intp)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for j in range(n):
            cj, mj, sa = c[:, j], m[:, j], smax[j]
            top = [i for i in range(lines) if cj[i] == cj.max()]
            cur = next(i for i in top if mj[i] == max(mj[t] for t in top))
            s = np.float64(0.0)
            for _ in range(lines):
                cross = [(sj, i) for i in range(lines) if mj[i] - mj[cur] > 0.0
                         for sj in [(cj[cur] - cj[i]) / (mj[i] - mj[cur])] if sj < sa]
                if not cross:
                    break
                first = min(sj for sj, _ in cross)
                tied = [i for sj, i in cross if sj == first]
                cur = next(i for i in tied if mj[i] == max(mj[t] for t in tied))
                if first > s:
                    out[cnt[j], j] = first
                    cnt[j] += 1
                    s = first
                if not mj.max() > mj[cur]:
                    break
    return out, cnt


# few distinct values, so that lines tie and cross at the same `s`; infinities among them
_LINE_VALUES = st.sampled_from([0.0, -0.0, 0.25, 0.5, 1.0, 2.0, -1.0, 1e-300, 3.0, 1e308, np.inf, -np.inf])


@settings(max_examples=500, deadline=None)
@given(st.integers(2, 5).flatmap(lambda lines: st.tuples(
    hnp.arrays(np.float64, (lines, 7), elements=_LINE_VALUES),
    hnp.arrays(np.float64, (lines, 7), elements=_LINE_VALUES | st.floats(-3.0, 3.0)),
    hnp.arrays(np.float64, 7, elements=st.sampled_from([0.0, 1e-9, 0.3, 0.5, 1.0])))))
def test_kinks_are_the_column_by_column_search_bit_for_bit(case: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
    c, m, smax = case
    c[0] = 0.0  # line 0 is the floor, as `compose` gives it
    m[0] = 0.0
    want = _kinks_one_column_at_a_time(c, m, smax)
    for kinks in (_kinks, _kinks_few, _kinks_many):  # (7 columns: `_kinks` takes `_kinks_few`)
        got = kinks(c, m, smax)
        assert got[0].tobytes() == want[0].tobytes()
        assert got[1].tolist() == want[1].tolist()


@st.composite
def _job_levels(draw: st.DrawFn) -> tuple[int, np.ndarray, _Events, np.ndarray]:
    """A level of jobs as `hdrf_curves.curves` gives it to `sum_runs`: rows of 0-5 jobs (in row
    order), shares and weights from few values (ramps ending together), each row's start 0 or
    part-way up some ramps, and what the rows hold there."""
    rows = draw(st.integers(2, 8))
    counts = [draw(st.integers(0, 5)) for _ in range(rows)]
    group = np.repeat(np.arange(rows), counts)
    m = group.size
    share = st.sampled_from([0.0, 0.0, 0.001, 0.01, 0.01, 0.125, 0.2])
    job_share = np.array([[draw(share) for _ in range(m)] for _ in range(3)]).reshape(3, m)
    weight = np.array([draw(st.sampled_from([0.0, 0.5, 1.0, 1.0, 2.0])) for _ in range(m)])
    start = np.array([draw(st.sampled_from([0.0, 0.0, 0.005, 0.01, 0.05])) for _ in range(rows)])
    init = np.array([[draw(st.sampled_from([0.0, -0.0, 0.003, 0.25])) for _ in range(rows)] for _ in range(3)])
    growing = np.array([draw(st.sampled_from([True, True, False])) for _ in range(m)], dtype=bool)
    return rows, init, _job_events(job_share, weight, group, start[group], growing), start


@settings(max_examples=300, deadline=None)
@given(_job_levels())
def test_sum_runs_without_a_run_is_the_general_path_bit_for_bit(case: tuple[int, np.ndarray, _Events,
                                                                          np.ndarray]) -> None:
    """`sum_runs`' path for events without a run (a level of jobs) against its general path, made
    to run by one run segment of nothing in one more row, last (the rows before it are summed as
    before it: every sum runs in order of row). With events in one row only, the extra row would
    change how the sums are taken (`segmented_cumsum` rebases each row's sums when there are
    several), so at least two rows have some."""
    rows, init, ev, start = case
    assume(np.unique(ev.group).size >= 2)
    one = nones(1)
    extra = _Events(np.array([1.0]), np.zeros((3, 1)), np.ones(1, dtype=bool), np.array([rows]), one + 1, one + 1,
                    np.zeros((3, 0)), np.zeros(0, dtype=np.intp))
    got = sum_runs(rows, init, ev, start)
    want = sum_runs(rows + 1, np.concatenate([init, np.zeros((3, 1))], axis=1), _concat([ev, extra]),
                    np.append(start, 0.0))
    assert got.off.tolist() == want.off[: rows + 1].tolist()
    n = int(got.off[-1])
    assert got.x.tobytes() == want.x[:n].tobytes()
    assert got.v.tobytes() == np.ascontiguousarray(want.v[:, :n]).tobytes()
    assert got.owner.tolist() == want.owner[:n].tolist()
    assert got.end.tolist() == want.end[:n].tolist()


@settings(max_examples=100, deadline=None)
@given(st.integers(2, 5).flatmap(lambda lines: st.tuples(
    hnp.arrays(np.float64, (lines, 7), elements=_LINE_VALUES),
    hnp.arrays(np.float64, (lines, 7), elements=_LINE_VALUES | st.floats(-3.0, 3.0)),
    hnp.arrays(np.float64, 7, elements=st.sampled_from([0.0, 1e-9, 0.3, 0.5, 1.0])))), st.integers(0, 6))
def test_kinks_on_many_columns_are_the_column_by_column_search_bit_for_bit(
        case: tuple[np.ndarray, np.ndarray, np.ndarray], shift: int) -> None:
    """As above with 280 columns (the drawn 7, 40 times over, shifted), where `_first_true` takes
    its other path (a maximum down the columns, not `argmax`)."""
    c, m, smax = (np.roll(np.tile(a, 40), shift, axis=-1) for a in case)
    c[0] = 0.0
    m[0] = 0.0
    got, want = _kinks(c, m, smax), _kinks_one_column_at_a_time(c, m, smax)
    assert got[0].tobytes() == want[0].tobytes()
    assert got[1].tolist() == want[1].tolist()


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 9), st.sampled_from([0, 1, 7, 255, 256, 257, 1000]), st.sampled_from([0.0, 0.02, 0.3, 0.9]),
       st.integers(0, 2**32 - 1))
def test_first_true_is_argmax_of_booleans(lines: int, n: int, p: float, seed: int) -> None:
    mask = np.random.default_rng(seed).random((lines, n)) < p
    want = mask.argmax(axis=0)
    assert _first_true(mask, none=0).tolist() == want.tolist()
    want[~mask.any(axis=0)] = lines
    assert _first_true(mask).tolist() == want.tolist()


@settings(max_examples=200, deadline=None)
@given(hnp.arrays(np.float64, st.tuples(st.integers(1, 4), st.integers(1, 40)),
                  elements=st.sampled_from([0.0, -0.0, 1.0, 2.5, 2.5 + 2**-51, 1e-300, -3.0]) | st.floats(-5, 5)),
       st.data())
def test_segmented_sums_in_place_are_the_copying_ones_bit_for_bit(values: np.ndarray, data: st.DataObject) -> None:
    """`segmented_cumsum(..., scratch=True)` (the caller's array changed, not copied) and
    `segmented_cumsum_at` given each point's segment give what the forms before them gave."""
    n = values.shape[1]
    cuts = data.draw(st.sets(st.integers(1, n - 1), max_size=n - 1)) if n > 1 else set()
    starts = np.array([0, *sorted(cuts)], dtype=np.intp)
    for rebase in (False, True):
        want = _segmented_cumsum_before(values, starts, rebase)
        assert segmented_cumsum(values, starts, rebase).tobytes() == want.tobytes()
        assert segmented_cumsum(values.copy(), starts, rebase, scratch=True).tobytes() == want.tobytes()
    at = np.array(sorted(data.draw(st.sets(st.integers(0, n - 1), min_size=1))), dtype=np.intp)
    seg = starts.searchsorted(at, side="right") - 1
    want_at = _segmented_cumsum_before(values, starts, False)[:, at]
    assert segmented_cumsum_at(values, starts, at).tobytes() == want_at.tobytes()
    assert segmented_cumsum_at(values, starts, at, seg).tobytes() == want_at.tobytes()


def _segmented_cumsum_before(values: np.ndarray, starts: np.ndarray, rebase: bool) -> np.ndarray:
    """`polylines.segmented_cumsum` as it was before it summed in place (at 94c56f2)."""
    lengths = np.diff(np.concatenate((starts, [values.shape[1]])))
    c = values.cumsum(axis=1)
    ends = None
    totals = np.zeros(0)
    if rebase and starts.size > 1:
        ends = np.concatenate((starts[1:], [values.shape[1]])) - 1
        totals = c.take(ends, axis=1)
        totals[:, 1:] -= totals[:, :-1].copy()
        values = values.copy()
        for k in range(values.shape[0]):
            values[k][ends] -= totals[k]
        c = values.cumsum(axis=1)
    before = np.zeros((values.shape[0], starts.size))
    before[:, 1:] = c.take(starts[1:] - 1, axis=1)
    out: np.ndarray = c - before.repeat(lengths, axis=1)
    if ends is not None:
        for k in range(values.shape[0]):
            out[k][ends] += totals[k]
    return out


@settings(max_examples=200, deadline=None)
@given(hnp.arrays(np.float64, st.tuples(st.integers(1, 5), st.integers(0, 40)), elements=_VALUES))
def test_top_line_in_place_is_the_one_by_where(above: np.ndarray) -> None:
    best = np.zeros(above.shape[1], dtype=np.intp)
    m = np.zeros(above.shape[1])
    for k in range(above.shape[0]):
        up = above[k] > m
        best = np.where(up, k + 1, best)
        m = np.where(up, above[k], m)
    assert _top_line(above).tolist() == best.tolist()


@st.composite
def _ordinal_sums(draw: st.DrawFn) -> tuple[Polylines, np.ndarray, np.ndarray, np.ndarray]:
    """Inner sums over their ordinals, as `hdrf_curves.Inner` has them (rows of 1-7
    vertices over their ordinals, values nondecreasing by steps from few values: flat stretches,
    runs of one kind), with guarantees, limits (some reached inside a row) and weights (some 0)."""
    rows = draw(st.integers(1, 6))
    counts = [draw(st.integers(1, 7)) for _ in range(rows)]
    n = sum(counts)
    off = np.concatenate(([0], np.cumsum(counts))).astype(np.intp)
    step = st.sampled_from([0.0, 0.0, 0.01, 0.05, 0.1, 0.3])
    v = np.array([[draw(step) for _ in range(n)] for _ in range(3)]).reshape(3, n)
    starts = off[:-1]
    for k in range(3):
        v[k] = np.cumsum(v[k])
        v[k] -= np.repeat(v[k][starts], counts) - np.repeat(np.array([draw(step) for _ in range(rows)]), counts)
    u = (np.arange(n) - np.repeat(starts, counts)).astype(np.float64)
    g = np.array([[draw(st.sampled_from([0.0, 0.0, 0.02, 0.1])) for _ in range(rows)] for _ in range(3)])
    cap = np.array([[draw(st.sampled_from([0.15, 0.4, 1.0, 1.0])) for _ in range(rows)] for _ in range(3)])
    weight = np.array([draw(st.sampled_from([0.0, 0.5, 1.0, 1.0, 3.0])) for _ in range(rows)])
    return Polylines(off, u, v, u.copy(), np.zeros(n, dtype=bool)), g, cap, weight


@settings(max_examples=400, deadline=None)
@given(_ordinal_sums())
def test_compose_of_ordinal_sums_skips_no_vertex_bit_for_bit(case: tuple[Polylines, np.ndarray, np.ndarray,
                                                                       np.ndarray]) -> None:
    """`compose(..., ordinal=True)` (`hdrf`'s inner sums, which have no jump) leaves out the passes
    over jumps and takes the arguments as the ordinals (given none, as `Inner.as_ordinal` gives
    none); it gives what the general path gives on the ordinals."""
    h, g, cap, weight = case
    want = compose(h, g, cap, weight)
    none = np.zeros(0)
    got = compose(Polylines(h.off, none, h.v, none, np.zeros(0, dtype=bool)), g, cap, weight, ordinal=True)
    assert got.off.tolist() == want.off.tolist()
    for field in ("x", "v", "t", "r"):
        assert getattr(got, field).tobytes() == getattr(want, field).tobytes(), field
