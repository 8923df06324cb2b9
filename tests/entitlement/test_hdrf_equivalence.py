"""Policy `hdrf`: the exact, event-driven engine (`entitlement/hdrf.py`) against the slow discrete
progressive filling of `hdrf_reference.py`, written separately from it.

The reference gives steps of 1e-3 of a job's key, so the two agree to about that: within
`AGREE` of the capacity, per kind. That is tight enough to tell the policies apart (on the GPU
example `dominant` gives /C 50 cpu of 100, `hdrf` 92), and `test_the_oracle_tells_dominant_apart`
checks that it does on random trees too. With one kind nothing can run out that a job does not
need, so there `hdrf` is `dominant` exactly, and the engine must match it to rounding."""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.entitlement import JobDemand, LeafUsage, PoolInput, TreeInput, compute_entitlements
from services.entitlement.arrays import build_arrays
from services.entitlement.hdrf import Stop, hdrf_entitlements
from tests.entitlement.hdrf_reference import hdrf_reference
from tests.entitlement.strategies import contended_trees, trees

# The oracle costs ~0.1 s a tree: fewer examples than the other entitlement tests.
EXAMPLES = int(os.environ.get("HDRF_EXAMPLES", "40"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
AGREE = 3e-3
"""Of the capacity of each kind (the worst seen over 600 random trees: 5.2e-4)."""

def assert_agree(tree: TreeInput) -> None:
    got = compute_entitlements(tree)
    want = hdrf_reference(tree)
    assert set(want) == set(got)
    for path, amounts in want.items():
        for kind, value in amounts.items():
            scale = tree.capacity.get(kind, 0.0) or 1.0
            assert abs(got[path].entitlement[kind] - value) <= AGREE * scale, (
                path, kind, got[path].entitlement[kind], value)


@SETTINGS
@given(contended_trees())
def test_the_engine_agrees_with_the_discrete_filling_on_contended_trees(tree: TreeInput) -> None:
    assert_agree(tree)


@SETTINGS
@given(trees(policy="hdrf", with_jobs=True))
def test_the_engine_agrees_with_the_discrete_filling_on_random_valid_trees(tree: TreeInput) -> None:
    assert_agree(tree)


def test_the_engine_agrees_on_the_gpu_example() -> None:
    tree = gpu_example()
    assert_agree(tree)
    assert compute_entitlements(tree)["/C"].entitlement["cpu"] == pytest.approx(92.0, abs=1e-9)


def test_the_oracle_tells_dominant_apart() -> None:
    """The comparison can fail: `dominant` on the same trees disagrees with the oracle (in most
    contended trees, by more than `AGREE`)."""
    differ = 0
    for seed in range(12):
        tree = _seeded(seed)
        want = hdrf_reference(tree)
        got = compute_entitlements(dataclasses.replace(tree, policy="dominant"))
        worst = max(abs(got[p].entitlement[k] - v) / (tree.capacity[k] or 1.0)
                    for p, amounts in want.items() for k, v in amounts.items())
        differ += worst > AGREE
    assert differ >= 6


@settings(max_examples=int(os.environ.get("ENTITLEMENT_EXAMPLES", "300")) // 3, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(trees(policy="hdrf", with_jobs=True))
def test_with_one_kind_hdrf_is_dominant(tree: TreeInput) -> None:
    """One kind: every job needs it, no pool ever jumps (the kind holding a key up is the one that
    grows), so stopping when it runs out is what `dominant` does too."""
    tree = dataclasses.replace(tree, kinds=tree.kinds[:1])
    got = compute_entitlements(tree).entitlement_matrix
    want = compute_entitlements(dataclasses.replace(tree, policy="dominant")).entitlement_matrix
    scale = max(1.0, *tree.capacity.values())
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-9 * scale)


def gpu_example() -> TreeInput:
    """DOMAIN §3's example (scenario `hdrf-work-conserving`)."""
    def jobs(n: int, demand: dict[str, float], prefix: str) -> LeafUsage:
        return LeafUsage(jobs=tuple(JobDemand(f"{prefix}{i}", demand) for i in range(n)))

    gpu_job = {"cpu": 1.0, "memory": 10.0, "gpu": 1.0}
    return TreeInput(kinds=("cpu", "memory", "gpu"), capacity={"cpu": 100, "memory": 1000, "gpu": 8}, policy="hdrf",
                     pools=(PoolInput("/G1", usage=jobs(8, gpu_job, "g1-")),
                            PoolInput("/G2", usage=jobs(8, gpu_job, "g2-")),
                            PoolInput("/C", usage=jobs(20, {"cpu": 5.0, "memory": 10.0}, "c-"))))


def _seeded(seed: int) -> TreeInput:
    """A contended tree drawn from a fixed seed (outside `@given`)."""
    rng = np.random.default_rng(seed)
    kinds = ("cpu", "memory", "gpu")
    cap = {"cpu": 100.0, "memory": 1000.0, "gpu": 8.0}
    pools = []
    for i in range(3):
        jobs = []
        for j in range(int(rng.integers(1, 4))):
            needs = [k for k in kinds if rng.random() < 0.6] or ["cpu"]
            jobs.append(JobDemand(f"j{j}", {k: cap[k] * float(rng.choice([0.1, 0.3, 0.7])) for k in needs}))
        pools.append(PoolInput(f"/t{i}", usage=LeafUsage(jobs=tuple(jobs))))
    return TreeInput(kinds=kinds, capacity=cap, pools=tuple(pools), policy="hdrf")


@settings(max_examples=int(os.environ.get("ENTITLEMENT_EXAMPLES", "300")) // 3, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.one_of(contended_trees(), trees(policy="hdrf", with_jobs=True), trees(policy="hdrf", with_jobs=True,
                                                                                  limits=False)))
def test_the_shortcuts_give_what_the_filling_gives(tree: TreeInput) -> None:
    """Nothing contended, and `dominant`'s answer where it is `hdrf`'s, are taken without the
    event-by-event filling: both give its entitlement, job by job, and its stops."""
    fast = hdrf_entitlements(build_arrays(tree))
    slow = hdrf_entitlements(build_arrays(tree), shortcuts=False)
    scale = max(1.0, *tree.capacity.values())
    np.testing.assert_allclose(fast.entitlement, slow.entitlement, rtol=0, atol=1e-9 * scale)
    np.testing.assert_allclose(fast.job_entitlement, slow.job_entitlement, rtol=0, atol=1e-9 * scale)
    assert dict(fast.stops) == dict(slow.stops)


def test_the_shortcut_through_dominant_is_taken_on_a_tree_every_job_of_which_needs_every_kind() -> None:
    """The bench's shape: jobs needing every kind, the cpu running out."""
    jobs = tuple(JobDemand(f"j{i}", {"cpu": 10.0 + i, "memory": 5.0}) for i in range(4))
    tree = TreeInput(kinds=("cpu", "memory"), capacity={"cpu": 30, "memory": 100}, policy="hdrf",
                     pools=(PoolInput("/a", usage=LeafUsage(jobs=jobs[:2])),
                            PoolInput("/b", usage=LeafUsage(jobs=jobs[2:]))))
    fast = hdrf_entitlements(build_arrays(tree))
    assert fast.phases == 0 and fast.entitlement[0, 0] == pytest.approx(30.0)
    assert dict(fast.stops) == {"/a": (Stop("cpu", "/"),), "/b": (Stop("cpu", "/"),)}
    assert dict(hdrf_entitlements(build_arrays(tree), shortcuts=False).stops) == dict(fast.stops)


@pytest.mark.parametrize(("pools", "seed", "factor"), [(40, 0, 0.05), (40, 3, 0.1), (60, 1, 0.1), (60, 3, 0.2)])
def test_epochs_give_the_fillings_numbers_on_bench_trees(pools: int, seed: int, factor: float) -> None:
    """The bench's trees, capacity cut so that kinds run out one after the other, jobs needing some
    kinds only (the GPU case): path 2's epochs (hdrf_runs.py), one per kind used up, are taken
    (no phase of the filling) and give what the filling gives."""
    from bench.entitlement import random_tree, with_some_kinds

    base = random_tree(pools, seed=seed, policy="dominant")
    tree = with_some_kinds(dataclasses.replace(base, policy="hdrf", capacity={k: v * factor for k, v in
                                                                         base.capacity.items()}), seed)
    fast = hdrf_entitlements(build_arrays(tree))
    slow = hdrf_entitlements(build_arrays(tree), shortcuts=False)
    assert fast.phases == 0 < slow.phases
    cap = np.array([tree.capacity[k] for k in tree.kinds])
    np.testing.assert_allclose(fast.entitlement / cap, slow.entitlement / cap, rtol=0, atol=1e-9)
    assert dict(fast.stops) == dict(slow.stops)
