"""Policy `hdrf`, path 2 (`hdrf_runs.py`, `hdrf_curves.py`: epochs of `dominant`-like functions
with `hdrf`'s runs in them, part-way up a run if need be, each ending where a kind is used up at
the tree or a pool's limit is reached) against the event-by-event filling (`shortcuts=False`)
and against the slow discrete oracle, on random contended trees (nested pools, guarantees,
weights, 2-4 kinds, jobs needing some kinds only), with and without limits that bind.

The filling and path 2 are both exact: they must agree to rounding (`SAME`), job by job, with the
same stops. The oracle steps by 1e-3 of a key: it agrees to `AGREE` (test_hdrf_equivalence.py)."""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.entitlement import JobDemand, LeafUsage, PoolInput, TreeInput
from services.entitlement import hdrf as hdrf_module
from services.entitlement.arrays import build_arrays
from services.entitlement.dominant import drf_inputs
from services.entitlement.hdrf import Stop, hdrf_entitlements
from tests.entitlement.strategies import ALL_KINDS, contended_trees
from tests.entitlement.test_hdrf_equivalence import assert_agree

SAME = 1e-9
"""Of the capacity of each kind: path 2 against the filling (both exact; rounding only)."""
EXAMPLES = int(os.environ.get("HDRF_EXAMPLES", "40"))


def _without_limits(tree: TreeInput) -> TreeInput:
    return dataclasses.replace(tree, pools=tuple(dataclasses.replace(p, limit=None) for p in tree.pools))


capacity_bound_trees = st.builds(_without_limits, contended_trees())
"""`contended_trees` (nested pools with guarantees and weights whose jobs, each needing some
kinds only, want more than the capacity) without their limits: only the tree's capacity stops
jobs, kinds run out one after the other, and jumps (a pool whose key is held by a kind its jobs
no longer get) are taken part-way."""


def assert_same_as_the_filling(tree: TreeInput, *, taken: bool | None = None) -> None:
    arr = build_arrays(tree)
    fast = hdrf_entitlements(arr)
    slow = hdrf_entitlements(arr, shortcuts=False)
    if taken is not None:
        assert (fast.phases == 0) == taken
    assert not [a for a in slow.alerts if a.code == "hdrf_too_costly"]
    scale = np.array([tree.capacity[k] or 1.0 for k in tree.kinds])
    np.testing.assert_allclose(fast.entitlement / scale, slow.entitlement / scale, rtol=0, atol=SAME)
    np.testing.assert_allclose(fast.job_entitlement / scale, slow.job_entitlement / scale, rtol=0, atol=SAME)
    assert dict(fast.stops) == dict(slow.stops)


@settings(max_examples=int(os.environ.get("ENTITLEMENT_EXAMPLES", "300")) // 2, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(capacity_bound_trees)
def test_path_2_gives_what_the_filling_gives_on_capacity_bound_trees(tree: TreeInput) -> None:
    assert_same_as_the_filling(tree)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                       HealthCheck.data_too_large])
@given(capacity_bound_trees)
def test_path_2_agrees_with_the_discrete_filling(tree: TreeInput) -> None:
    assert_agree(tree)


def test_path_2_is_taken_on_capacity_bound_trees() -> None:
    """The trees above are path 2's (only the capacity stops jobs): it must not fall back to the
    filling on them (its guard: an epoch that stops no job)."""
    for seed in range(80):
        assert hdrf_entitlements(build_arrays(_seeded(seed))).phases == 0, seed


def _seeded(seed: int) -> TreeInput:
    """A capacity-bound tree from a fixed seed (outside `@given`): 20 pools nested at random, 4
    kinds, 1-4 jobs a leaf each needing about half the kinds, tiny guarantees. On about a third
    of them the runs of `dominant` (the path before this one) ended at the foot of a jump that
    does not fit whole, where a run must be taken part-way (80 seeds: 28)."""
    rng = np.random.default_rng(seed)
    cap = {k: float(rng.choice([8.0, 100.0, 1000.0])) for k in ALL_KINDS}
    paths = ["/"]
    for i in range(20):
        parent = paths[int(rng.integers(len(paths)))]
        paths.append(f"{parent.rstrip('/')}/r{i}")
    inner = {p.rsplit("/", 1)[0] or "/" for p in paths[1:]}
    pools: list[PoolInput] = []
    for path in paths[1:]:
        jobs: tuple[JobDemand, ...] = ()
        if path not in inner:
            jobs = tuple(JobDemand(f"j{j}", {k: cap[k] * float(rng.choice([0.02, 0.1, 0.3])) for k in ALL_KINDS
                                             if rng.random() < 0.5} or {"cpu": 0.3 * cap["cpu"]},
                                   float(rng.choice([1.0, 2.0, 0.5])))
                         for j in range(int(rng.integers(1, 5))))
        pools.append(PoolInput(path=path, reservation={k: cap[k] * float(rng.choice([0.0, 0.0, 0.02]))
                                                       for k in ALL_KINDS},
                               share=float(rng.choice([1.0, 2.0, 0.5])), usage=LeafUsage(jobs=jobs)))
    return TreeInput(kinds=ALL_KINDS, capacity=cap, pools=tuple(pools), policy="hdrf")


@pytest.mark.parametrize("seed", range(0, 80, 3))
def test_path_2_gives_what_the_filling_gives_on_seeded_trees(seed: int) -> None:
    assert_same_as_the_filling(_seeded(seed), taken=True)


@pytest.mark.parametrize(("pools", "seed", "factor"), [(100, 0, 0.1), (150, 2, 0.1), (100, 1, 0.15)])
def test_runs_taken_part_way_on_bench_trees(pools: int, seed: int, factor: float,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The bench's trees, capacity cut so that kinds run out, jobs needing some kinds: the runs of
    `dominant` (the path before this one) ended at the foot of a jump that does not fit whole,
    and the filling decided (0.5-1.5 s here); path 2 takes them (4 epochs) and gives the
    filling's numbers."""
    from bench.entitlement import random_tree, with_some_kinds

    monkeypatch.setattr(hdrf_module, "MAX_WORK", 10**9)  # the filling to its end, for the comparison
    base = random_tree(pools, seed=seed, policy="dominant")
    tree = with_some_kinds(dataclasses.replace(base, policy="hdrf", capacity={k: v * factor for k, v in
                                                                         base.capacity.items()}), seed)
    assert_same_as_the_filling(tree, taken=True)


def test_a_pools_limit_ends_an_epoch_and_stops_only_its_jobs_that_need_the_kind() -> None:
    """/team's gpu limit 2 is reached first: path 2's epoch ends there (not at the capacity),
    the GPU job stops (gpu, at /team), and the next epoch takes the CPU job to its demand."""
    tree = TreeInput(kinds=("cpu", "gpu"), capacity={"cpu": 10, "gpu": 8}, policy="hdrf", pools=(
        PoolInput("/team", limit={"cpu": 10, "gpu": 2}),
        PoolInput("/team/a", usage=LeafUsage(jobs=(JobDemand("g", {"cpu": 1, "gpu": 4}),
                                                   JobDemand("c", {"cpu": 6}))))))
    assert_same_as_the_filling(tree, taken=True)
    got = hdrf_entitlements(build_arrays(tree))
    assert got.entitlement[build_arrays(tree).index["/team/a"]].tolist() == pytest.approx([6.5, 2.0])
    assert dict(got.stops) == {"/team": (Stop("gpu", "/team"),), "/team/a": (Stop("gpu", "/team"),)}


@settings(max_examples=int(os.environ.get("ENTITLEMENT_EXAMPLES", "300")) // 2, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(contended_trees())
def test_path_2_gives_what_the_filling_gives_where_pools_limits_are_reached(tree: TreeInput) -> None:
    """`contended_trees` with their limits (most reached, one at a time or together): path 2
    (when it takes them: not when the first limit is reached inside a pool's run at key 0) gives
    the filling's numbers and stops, the places of the limits included."""
    assert_same_as_the_filling(tree)


@pytest.mark.parametrize(("pools", "seed", "factor", "limit"), [(100, 0, 0.15, 0.05), (100, 1, 0.15, 0.1)])
def test_limits_reached_on_bench_trees(pools: int, seed: int, factor: float, limit: float,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The bench's trees, capacity cut, jobs needing some kinds, each top-level pool limited to
    `limit` of the capacity in every kind: the limits are reached one after the other (5-10
    places), path 2 takes them and gives the filling's numbers and stops."""
    from bench.entitlement import random_tree, with_some_kinds

    monkeypatch.setattr(hdrf_module, "MAX_WORK", 10**9)
    base = random_tree(pools, seed=seed, policy="dominant")
    cap = {k: v * factor for k, v in base.capacity.items()}
    limited = tuple(dataclasses.replace(p, limit={k: cap[k] * limit for k in cap}) if p.path.count("/") == 1 else p
                    for p in base.pools)
    tree = with_some_kinds(dataclasses.replace(base, pools=limited, policy="hdrf", capacity=cap), seed)
    assert_same_as_the_filling(tree, taken=True)
    assert len({s.at for stops in hdrf_entitlements(build_arrays(tree)).stops.values() for s in stops} - {"/"}) >= 5


@pytest.mark.parametrize(("factor", "limit"), [(0.15, 0.0), (0.1, 0.0), (0.15, 0.1)])
def test_later_epochs_on_the_rows_still_growing_give_the_whole_trees_numbers(
        factor: float, limit: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """After the first epoch the functions are built on the rows with a job still growing below
    them (`hdrf_runs.Live`), the others' shares folded into their parents' sums: the same numbers
    (to the last bits) and stops as the epochs on the whole tree, with fewer rows each time."""
    from bench.entitlement import random_tree, with_some_kinds
    from services.entitlement import hdrf_runs

    base = random_tree(400, seed=4, policy="dominant")
    cap = {k: v * factor for k, v in base.capacity.items()}
    pools = tuple(dataclasses.replace(p, limit={k: cap[k] * limit for k in cap})
                  if limit and p.path.count("/") == 1 else p for p in base.pools)
    tree = with_some_kinds(dataclasses.replace(base, pools=pools, policy="hdrf", capacity=cap), 4)
    sizes: list[int] = []
    real = hdrf_runs._live

    def counted(arr: object, job_row: np.ndarray, open_: np.ndarray) -> hdrf_runs.Live | None:
        found = real(arr, job_row, open_)  # type: ignore[arg-type]
        sizes.append(len(job_row) if found is None else -found.rows.size)
        return found

    monkeypatch.setattr(hdrf_runs, "_live", counted)
    got = hdrf_entitlements(build_arrays(tree))
    assert len(sizes) >= 3 and all(s < 0 for s in sizes[1:])  # restricted after the first epoch
    assert max(-s for s in sizes[1:]) < 400 // 2
    monkeypatch.setattr(hdrf_runs, "_live", lambda *args: None)
    whole = hdrf_entitlements(build_arrays(tree))
    scale = np.array([tree.capacity[k] for k in tree.kinds])
    assert np.abs(got.entitlement - whole.entitlement).max(initial=0.0) <= 1e-12 * scale.max()
    assert np.abs(got.job_entitlement - whole.job_entitlement).max(initial=0.0) <= 1e-12 * scale.max()
    assert dict(got.stops) == dict(whole.stops) and got.stops
    assert not any(a.code == "hdrf_too_costly" for a in got.alerts)


def _below_the_guarantees() -> TreeInput:
    """From `contended_trees` (1 of 300 generated falls back): /q1/q5/q6 reaches its memory limit
    (0.216) while /q1/q5 and /q1 still hold less cpu than their guarantees (0.9375 and 2.5), so
    their keys are below 0, where `compose` keeps the top of the run only."""
    none = {"cpu": 0.0, "memory": 0.0, "disk": 0.0, "gpu": 0.0}

    def limit(cpu: float, memory: float, disk: float, gpu: float = 1000.0) -> dict[str, float]:
        return {"cpu": cpu, "memory": memory, "disk": disk, "gpu": gpu}

    def jobs(*given: tuple[str, dict[str, float], float]) -> LeafUsage:
        return LeafUsage(jobs=tuple(JobDemand(name, demand, weight) for name, demand, weight in given))

    pools = (
        PoolInput("/q0", reservation=none, limit=limit(3.0, 4.8, 1000.0), share=2.0),
        PoolInput("/q1", reservation={**none, "cpu": 2.5}, limit=limit(3.0, 2.4, 600.0)),
        PoolInput("/q0/q2", reservation=none, limit=limit(1.8, 4.8, 300.0), usage=jobs(
            ("j0", {"cpu": 3.0, "disk": 300.0, "gpu": 700.0}, 0.5),
            ("j1", {"cpu": 1.0, "disk": 100.0, "memory": 0.8}, 1.0),
            ("j2", {"cpu": 7.0}, 1.0), ("j3", {"memory": 0.16}, 2.0))),
        PoolInput("/q1/q3", reservation={**none, "cpu": 0.625}, limit=limit(3.0, 1.44, 600.0), share=2.0, usage=jobs(
            ("j0", {"cpu": 0.2, "memory": 0.16}, 2.0),
            ("j1", {"cpu": 1.0, "disk": 20.0, "gpu": 100.0, "memory": 0.16}, 1.0))),
        PoolInput("/q4", reservation={"cpu": 1.875, "memory": 2.0, "disk": 0.0, "gpu": 500.0},
                  limit=limit(6.0, 8.0, 1000.0, 600.0), share=0.5, usage=LeafUsage(jobs=())),
        PoolInput("/q1/q5", reservation={**none, "cpu": 0.9375}, limit=limit(0.9375, 0.72, 600.0)),
        PoolInput("/q1/q5/q6", reservation=none, limit=limit(0.9375, 0.216, 360.0), share=0.5, usage=jobs(
            ("j0", {"cpu": 1.0, "disk": 700.0, "gpu": 700.0, "memory": 0.8}, 0.5),
            ("j1", {"cpu": 0.2, "disk": 20.0, "gpu": 300.0, "memory": 2.4}, 2.0), ("j2", {"cpu": 0.2}, 1.0))),
    )
    return TreeInput(kinds=ALL_KINDS, capacity={"cpu": 10.0, "memory": 8.0, "disk": 1000.0, "gpu": 1000.0},
                     pools=pools, policy="hdrf")


def test_a_limit_reached_below_the_guarantees_is_left_to_the_filling() -> None:
    """The case the epochs still decline (`first_limit` is NaN: the limit is reached inside a
    run at key 0): the filling decides, exactly (the discrete oracle's numbers). When the epochs
    take it, the first assertion fails: make it `phases == 0`."""
    tree = _below_the_guarantees()
    arr = build_arrays(tree)
    got = hdrf_entitlements(arr)
    assert got.phases > 0
    assert not [a for a in got.alerts if a.code == "hdrf_too_costly"]
    assert_agree(tree)
    q6 = got.entitlement[arr.index["/q1/q5/q6"]]
    assert q6[1] == pytest.approx(0.216)  # memory at its limit
    assert dict(got.stops)["/q1/q5/q6"] == (Stop("memory", "/q1/q5/q6"),)


@pytest.mark.parametrize(("pools", "seed", "factor", "limit"), [(400, 4, 0.15, 0.0), (400, 5, 0.1, 0.1),
                                                                (300, 6, 0.25, 0.05)])
def test_later_epochs_sum_only_what_moved_and_give_the_same_bits(
        pools: int, seed: int, factor: float, limit: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """After the first epoch the pools' shares are summed again only where jobs moved
    (`hdrf_runs._sum_moved`: the live leaves' jobs, every level's groups): the very same bits as
    summing every job (`sum_up`), so the same entitlements, job by job, and the same stops."""
    from bench.entitlement import random_tree, with_some_kinds
    from services.entitlement import hdrf_runs

    base = random_tree(pools, seed=seed, policy="dominant")
    cap = {k: v * factor for k, v in base.capacity.items()}
    limited = tuple(dataclasses.replace(p, limit={k: cap[k] * limit for k in cap})
                    if limit and p.path.count("/") == 1 else p for p in base.pools)
    tree = with_some_kinds(dataclasses.replace(base, pools=limited, policy="hdrf", capacity=cap), seed)
    calls: list[bool] = []
    real = hdrf_runs._sum_moved

    def checked(arr: object, job_row: np.ndarray, given: np.ndarray, dshare: np.ndarray, live: hdrf_runs.Live,
                share: np.ndarray) -> np.ndarray:
        got = real(arr, job_row, given, dshare, live, share)  # type: ignore[arg-type]
        whole = hdrf_runs.sum_up(arr, job_row, given[:, None] * dshare)  # type: ignore[arg-type]
        calls.append(got.tobytes() == whole.tobytes())
        return got

    monkeypatch.setattr(hdrf_runs, "_sum_moved", checked)
    got = hdrf_entitlements(build_arrays(tree))
    assert calls and all(calls)
    assert got.phases == 0 and got.stops


def _without_gpu(tree: TreeInput) -> TreeInput:
    """`tree` with no gpu at all (every GPU host drained), its jobs unchanged."""
    return dataclasses.replace(tree, capacity={**tree.capacity, "gpu": 0.0})


@pytest.mark.parametrize("seed", range(0, 80, 5))
def test_a_kind_the_tree_has_none_of_is_taken_by_the_epochs(seed: int) -> None:
    """Jobs needing a kind of which the tree has nothing (capacity 0) hold nothing and are stopped
    by it from the start; the others are filled as usual. The epochs take such trees (before,
    every one went to the quadratic filling: its budget, then `dominant`'s numbers, from ~1k
    pools) and give the filling's numbers and stops, the lacking kind at `/` among them."""
    tree = _without_gpu(_seeded(seed))
    assert_same_as_the_filling(tree, taken=True)
    if any(job.demand.get("gpu", 0.0) > 0 for pool in tree.pools for job in (pool.usage.jobs or ())):
        assert any(Stop("gpu", "/") in stops for stops in hdrf_entitlements(build_arrays(tree)).stops.values())


def test_a_kind_the_tree_has_none_of_agrees_with_the_discrete_filling() -> None:
    assert_agree(_without_gpu(_seeded(3)))


@pytest.mark.parametrize(("pools", "seed"), [(100, 1), (150, 2)])
def test_a_kind_the_tree_has_none_of_on_bench_trees(pools: int, seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bench's trees, capacity x 0.15, no gpu, jobs needing some kinds: epochs, the filling's
    numbers; the jobs that need gpu hold nothing."""
    from bench.entitlement import random_tree, with_some_kinds

    monkeypatch.setattr(hdrf_module, "MAX_WORK", 10**9)  # the filling to its end, for the comparison
    base = random_tree(pools, seed=seed, policy="dominant")
    tree = with_some_kinds(dataclasses.replace(base, policy="hdrf", capacity={
        k: 0.0 if k == "gpu" else v * 0.15 for k, v in base.capacity.items()}), seed)
    assert_same_as_the_filling(tree, taken=True)
    arr = build_arrays(tree)
    got = hdrf_entitlements(arr)
    needs_gpu = drf_inputs(arr).job_demand[arr.kinds.index("gpu")] > 0
    assert needs_gpu.any() and not got.job_entitlement[needs_gpu].any()
    assert got.job_entitlement[~needs_gpu].any()


def test_the_bench_compares_the_policies_without_a_kind() -> None:
    """`python -m bench.entitlement compare ... without=gpu` (docs/performance.md, "Policy hdrf",
    fourth round): the tree has no gpu, its jobs still ask for it; no policy gives any, `hdrf`
    uses some kind up, and its numbers are its own, not `dominant`'s."""
    from bench.entitlement import compare_policies

    rows = {row["policy"]: row for row in compare_policies(60, repeat=1, capacity_factor=0.15, some_kinds=True,
                                                           without="gpu")}
    assert all(row["root_used"][3] == 0.0 for row in rows.values())
    assert 1.0 in rows["hdrf"]["root_used"] and rows["hdrf"]["root_used"] != rows["dominant"]["root_used"]
