"""What a prepared tree keeps from one computation to the next under `dominant` and `hdrf`.

An `EntitlementEngine` is computed again after every batch of events, with most of its inputs
unchanged: the guarantees and limits (as shares of the capacity, with their alerts) depend on the
configuration and the capacity only, and a leaf's jobs change only when `set_usage` gives it new
ones. Reading every job's demand out of its mapping, and the guarantees of a large tree when
many are scaled down (one alert each), are each a sizeable part of a computation
(docs/performance.md, "Entitlement engine and policy hdrf"): both are kept here, on the tree's
arrays, and reused while their inputs are the same.

Sameness is checked, not assumed: the guarantees' inputs are compared whole (a few array
comparisons), and a leaf's jobs are the same when they are the same tuple object (`JobDemand`
is frozen: a leaf's jobs change by `set_usage`, which gives a new tuple), or, when every leaf's
are, an equal one (`==` on the lists: the same demands and weights). Only the leaves whose jobs
changed are read again.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import chain, repeat
from operator import attrgetter, is_, itemgetter, length_hint

import numpy as np

from services.entitlement.model import Alert, BoolArray, FloatArray, IntArray, JobDemand

_demand_of = attrgetter("demand")
_weight_of = attrgetter("weight")

Given = list[tuple[JobDemand, ...] | None]
"""Each leaf's jobs as `set_usage` gave them (None: none given), leaves in row order."""


@dataclass(slots=True, eq=False)
class JobsMemo:
    """The given jobs of every leaf as last read: the tuples, how many each, and their demands
    `(jobs, kinds)` and weights, leaves in row order, each leaf's jobs in its order."""

    given: Given
    counts: IntArray
    demand: FloatArray
    weight: FloatArray
    layout: JobsLayout | None = None
    """Where `dominant._leaf_jobs` takes each job from, for these given jobs (set there)."""


@dataclass(slots=True, eq=False)
class JobsLayout:
    """`dominant._leaf_jobs`' jobs for one `JobsMemo`: each job's source row in [the given jobs |
    the leaves' own | their revocable work], its weight and its leaf, for the leaves with
    revocable work `has_rev` (the one input besides the given jobs that moves them): integer
    bookkeeping (~0.5 ms for 9k leaves) that changes only with them."""

    has_rev: BoolArray
    src: IntArray
    weight: FloatArray
    job_leaf: IntArray


@dataclass(slots=True, eq=False)
class GuaranteeMemo:
    """The inputs of `dominant._guarantees` (copies) and what it gave for them."""

    inputs: tuple[FloatArray, FloatArray, BoolArray, FloatArray, tuple[int, ...]]
    guarantee: FloatArray
    limit: FloatArray
    alerts: tuple[Alert, ...]

    def matches(self, inputs: tuple[FloatArray, FloatArray, BoolArray, FloatArray, tuple[int, ...]]) -> bool:
        mine = self.inputs
        return (mine[4] == inputs[4] and all(a.shape == b.shape and np.array_equal(a, b)
                                              for a, b in zip(mine[:4], inputs[:4], strict=True)))


def demands(jobs: Sequence[JobDemand], kinds: tuple[str, ...]) -> FloatArray:
    """`(jobs, kinds)`: each job's demand, a missing kind 0, NaN and negatives 0."""
    k = len(kinds)
    if not jobs or not k:
        return np.zeros((len(jobs), k))
    try:  # every kind named: one C call per job
        values = map(itemgetter(*kinds), map(_demand_of, jobs))
        flat: Iterable[float] = values if k == 1 else chain.from_iterable(values)
        m = np.fromiter(flat, dtype=np.float64, count=len(jobs) * k).reshape(-1, k)
    except KeyError:  # some kind missing: one C pass per kind where the demands are dicts (several
        # times faster than a Python row per job: docs/performance.md, "Entitlement engine ...")
        found = list(map(_demand_of, jobs))
        if set(map(type, found)) == {dict}:
            m = np.empty((len(jobs), k))
            for column, kd in enumerate(kinds):
                m[:, column] = np.fromiter(map(dict.get, found, repeat(kd), repeat(0.0)), dtype=np.float64,
                                           count=len(found))
        else:
            rows = [[d.get(kd, 0.0) for kd in kinds] for d in found]
            m = np.array(rows, dtype=np.float64).reshape(-1, k)
    out: FloatArray = np.where(m > 0.0, m, 0.0)
    return out


def _read(given: Given, kinds: tuple[str, ...]) -> tuple[FloatArray, FloatArray]:
    jobs: list[JobDemand] = list(chain.from_iterable(filter(None, given)))
    w = np.fromiter(map(_weight_of, jobs), dtype=np.float64, count=len(jobs))
    return demands(jobs, kinds), np.where(w > 0.0, w, 0.0)


def given_jobs(memo: JobsMemo | None, given: Given, kinds: tuple[str, ...]) -> JobsMemo:
    """The demands and weights of the jobs `given` (each leaf's, in order), reading again only
    the leaves whose jobs are not the tuple `memo` read."""
    if memo is not None and memo.given == given:
        # every leaf's jobs the same tuple (or an equal one: the same demands and weights): the
        # list comparison takes the identical ones in C, ~1 µs a thousand leaves, where the
        # leaf-by-leaf reading below costs ~0.1 ms a thousand
        return memo
    nl = len(given)
    counts = np.fromiter(map(length_hint, given), dtype=np.intp, count=nl)
    if memo is None or len(memo.given) != nl:
        demand, weight = _read(given, kinds)
        return JobsMemo(given, counts, demand, weight)
    same = np.fromiter(map(is_, given, memo.given), dtype=bool, count=nl)
    if same.all():
        return memo
    changed = np.flatnonzero(~same)
    fresh_demand, fresh_weight = _read([given[i] for i in changed.tolist()], kinds)
    # each job's row in [the memo's jobs | the fresh ones]: a kept leaf's from its old place
    old_start = np.cumsum(memo.counts) - memo.counts
    fresh_counts = counts[changed]
    fresh_start = np.zeros(nl, dtype=np.intp)
    fresh_start[changed] = memo.demand.shape[0] + np.cumsum(fresh_counts) - fresh_counts
    base = np.where(same, old_start, fresh_start)
    src = np.repeat(base - (np.cumsum(counts) - counts), counts) + np.arange(int(counts.sum()))
    demand = np.take(np.concatenate([memo.demand, fresh_demand]), src, axis=0)
    weight = np.take(np.concatenate([memo.weight, fresh_weight]), src)
    return JobsMemo(given, counts, demand, weight)
