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

    arr = build_arrays(random_tree(20, seed=1, policy="dominant"))
    drf = drf_inputs(arr)
    with pytest.raises(ValueError, match="read-only"):
        drf.guarantee[1, 0] = 0.0
    assert drf_inputs(arr).guarantee is drf.guarantee


def test_leaf_jobs_read_again_only_where_they_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    from services.entitlement import memo

    tree: TreeInput = random_tree(30, seed=2, policy="dominant")
    engine = EntitlementEngine(tree)
    engine.compute()
    read: list[int] = []
    real = memo.demands

    def counted(jobs: Sequence[JobDemand], kinds: tuple[str, ...]) -> FloatArray:
        read.append(len(jobs))
        return real(jobs, kinds)

    monkeypatch.setattr(memo, "demands", counted)
    engine.compute()
    assert read == []
    path = engine.leaves[4]
    engine.set_usage(path, LeafUsage(jobs=(JobDemand("a", {"cpu": 1.0}), JobDemand("b", {"cpu": 2.0}))))
    engine.compute()
    assert read == [2]
