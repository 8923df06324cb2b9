"""What a prepared engine keeps between computations (`entitlement/memo.py`): the jobs' demands
and the guarantees are reused only while their inputs are the same, so a computation after
`set_usage` / `set_capacity` is, byte for byte, a fresh one."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import pytest

from bench.entitlement import random_tree
from services.entitlement import EntitlementEngine, JobDemand, LeafUsage, compute_entitlements
from services.entitlement.model import FloatArray, Policy, TreeEntitlements, TreeInput


def _identical(a: TreeEntitlements, b: TreeEntitlements) -> None:
    for name in ("entitlement_matrix", "requirement_matrix", "non_slack_matrix"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert a.alerts == b.alerts
    assert dict(a.stops) == dict(b.stops)


@pytest.mark.parametrize("policy", ["dominant", "hdrf"])
def test_new_jobs_on_some_leaves_and_a_new_capacity_give_a_fresh_computation(policy: Policy) -> None:
    tree = random_tree(60, seed=3, policy=policy)
    tree = dataclasses.replace(tree, capacity={k: v * 0.2 for k, v in tree.capacity.items()})
    engine = EntitlementEngine(tree)
    first = engine.compute()
    _identical(first, compute_entitlements(tree))
    assert engine.compute().entitlement_matrix.tobytes() == first.entitlement_matrix.tobytes()  # all kept
    pools = {p.path: p for p in tree.pools}
    leaves = engine.leaves
    # more jobs, fewer jobs, none given (one job of the leaf's numbers), jobs again
    new_jobs: list[tuple[JobDemand, ...] | None] = [
        tuple(JobDemand(f"n{i}", {"cpu": 900.0 * (i + 1), "gpu": 30.0}) for i in range(3)),
        (JobDemand("one", {"memory": 5e4}, weight=2.0),),
        None,
        (),
    ]
    for i, path in enumerate(leaves[1:40:5]):
        old = pools[path].usage
        usage = dataclasses.replace(old, jobs=new_jobs[i % len(new_jobs)])
        engine.set_usage(path, usage)
        pools[path] = dataclasses.replace(pools[path], usage=usage)
    changed = dataclasses.replace(tree, pools=tuple(pools.values()))
    again = engine.compute()
    _identical(again, compute_entitlements(changed))
    assert not np.array_equal(again.entitlement_matrix, first.entitlement_matrix)
    cut = {k: v * 0.5 for k, v in tree.capacity.items()}
    engine.set_capacity(cut)
    _identical(engine.compute(), compute_entitlements(dataclasses.replace(changed, capacity=cut)))


def test_the_kept_guarantees_cannot_be_written() -> None:
    from services.entitlement.arrays import build_arrays
    from services.entitlement.dominant import drf_inputs

    tree = random_tree(20, seed=1, policy="dominant")
    # without static pools: what drf_inputs gives is the kept arrays themselves (with them, the
    # guarantees less the holds, which depend on the demand, are new arrays every cycle)
    elastic = tuple(dataclasses.replace(p, static=False) for p in tree.pools)
    arr = build_arrays(dataclasses.replace(tree, pools=elastic))
    drf = drf_inputs(arr)
    with pytest.raises(ValueError, match="read-only"):
        drf.guarantee[1, 0] = 0.0
    assert drf_inputs(arr).guarantee is drf.guarantee


def _count_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many jobs each reading of demands (`memo.demands`) reads, from now on."""
    from services.entitlement import memo

    read: list[int] = []
    real = memo.demands

    def counted(jobs: Sequence[JobDemand], kinds: tuple[str, ...]) -> FloatArray:
        read.append(len(jobs))
        return real(jobs, kinds)

    monkeypatch.setattr(memo, "demands", counted)
    return read


def test_leaf_jobs_read_again_only_where_they_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    tree: TreeInput = random_tree(30, seed=2, policy="dominant")
    engine = EntitlementEngine(tree)
    engine.compute()
    read = _count_reads(monkeypatch)
    engine.compute()
    assert read == []
    path = engine.leaves[4]
    engine.set_usage(path, LeafUsage(jobs=(JobDemand("a", {"cpu": 1.0}), JobDemand("b", {"cpu": 2.0}))))
    engine.compute()
    assert read == [2]


def test_equal_jobs_given_again_are_not_read_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every leaf's jobs equal to what was read (here a copy of one leaf's tuple): nothing is read
    again and the numbers are the same; a changed demand is read."""
    tree: TreeInput = random_tree(30, seed=2, policy="hdrf")
    engine = EntitlementEngine(tree)
    before = engine.compute().entitlement_matrix.copy()
    read = _count_reads(monkeypatch)
    path = engine.leaves[3]
    usage = next(p.usage for p in tree.pools if p.path == path)
    assert usage.jobs
    copied = tuple(JobDemand(j.job, dict(j.demand), j.weight) for j in usage.jobs)
    engine.set_usage(path, dataclasses.replace(usage, jobs=copied))
    assert engine.compute().entitlement_matrix.tobytes() == before.tobytes()
    assert read == []
    more = tuple(JobDemand(j.job, {k: v * 2.0 for k, v in j.demand.items()}, j.weight) for j in usage.jobs)
    engine.set_usage(path, dataclasses.replace(usage, jobs=more))
    engine.compute()
    assert read == [len(more)]


@pytest.mark.parametrize("policy", ["dominant", "hdrf"])
def test_revocable_work_that_comes_and_goes_under_the_same_jobs_gives_a_fresh_computation(policy: Policy) -> None:
    """The jobs' layout (`memo.JobsLayout`) is kept while the given jobs and the leaves with
    revocable work are the same; a leaf's revocable work starting or ending, its jobs the same
    tuple, moves the jobs after it: a computation then is a fresh one, byte for byte."""
    tree = random_tree(40, seed=5, policy=policy)
    tree = dataclasses.replace(tree, capacity={k: v * 0.2 for k, v in tree.capacity.items()})
    pools = {p.path: p for p in tree.pools}
    leaves = [p.path for p in tree.pools if p.usage.jobs]
    for path in leaves[1:12:2]:  # without revocable work at first
        pools[path] = dataclasses.replace(pools[path], usage=dataclasses.replace(
            pools[path].usage, revocable_allocation={}, revocable_demand={}))
    tree = dataclasses.replace(tree, pools=tuple(pools.values()))
    engine = EntitlementEngine(tree)
    engine.compute()
    layout = engine._arr.jobs_memo.layout  # type: ignore[union-attr]
    engine.compute()
    assert engine._arr.jobs_memo.layout is layout  # type: ignore[union-attr]  # nothing changed: kept
    for i, path in enumerate(leaves[:12]):  # revocable work ends, starts, or is another amount
        old = pools[path].usage
        rev = {} if i % 4 == 0 else {"memory": 3e3 * (i + 1)}
        usage = dataclasses.replace(old, revocable_allocation=rev, revocable_demand=rev)
        engine.set_usage(path, usage)
        pools[path] = dataclasses.replace(pools[path], usage=usage)
    changed = dataclasses.replace(tree, pools=tuple(pools.values()))
    again = engine.compute()
    _identical(again, compute_entitlements(changed))
    assert again.entitlement_matrix.tobytes() == compute_entitlements(changed).entitlement_matrix.tobytes()
    assert engine._arr.jobs_memo.layout is not layout  # type: ignore[union-attr]
