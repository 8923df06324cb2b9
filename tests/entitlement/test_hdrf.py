"""Policy `hdrf` (DOMAIN §3): its laws on random trees, DOMAIN's example, the two counterexamples
pinned for `dominant` (test_properties.py) holding as properties, and the option accepted where a
policy is."""

from __future__ import annotations

import dataclasses
import math
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events import TreeOptions
from services.entitlement import (
    JobDemand,
    LeafUsage,
    PoolInput,
    TreeInput,
    compute_entitlements,
)
from services.entitlement import hdrf as hdrf_module
from services.entitlement.arrays import build_arrays
from services.entitlement.dominant import drf_inputs
from services.entitlement.hdrf import Stop, hdrf_entitlements
from services.entitlement.model import TOLERANCE
from services.tools.cli.args import InputError
from services.tools.cli.tree_cmd import options_from
from services.tools.scenario.errors import ScenarioError
from services.tools.scenario.format import parse_scenario
from tests.entitlement.helpers import claim
from tests.entitlement.strategies import contended_trees, trees
from tests.entitlement.test_hdrf_equivalence import gpu_example

SETTINGS = settings(
    max_examples=int(os.environ.get("ENTITLEMENT_EXAMPLES", "300")) // 3,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
any_tree = st.one_of(contended_trees(), trees(policy="hdrf", with_jobs=True))


# -- DOMAIN's example -----------------------------------------------------------------------------


def test_the_gpu_example_leaves_no_cpu_idle() -> None:
    got = compute_entitlements(gpu_example())
    for path, want in {"/G1": (4, 40, 4), "/G2": (4, 40, 4), "/C": (92, 184, 0)}.items():
        assert [got[path].entitlement[k] for k in ("cpu", "memory", "gpu")] == pytest.approx(want, abs=1e-9)
    assert got.stops == {"/G1": (Stop("gpu", "/"),), "/G2": (Stop("gpu", "/"),), "/C": (Stop("cpu", "/"),)}
    dominant = compute_entitlements(dataclasses.replace(gpu_example(), policy="dominant"))
    assert dominant["/C"].entitlement["cpu"] == pytest.approx(50.0)
    assert dominant.stops == {}


def test_a_pools_limit_is_named_where_it_stops_a_job() -> None:
    """/team's gpu limit 2 stops its GPU job; its CPU job goes on to its demand (a kind it does
    not need never stops it), and nothing is used up at the tree."""
    tree = TreeInput(kinds=("cpu", "gpu"), capacity={"cpu": 10, "gpu": 8}, policy="hdrf", pools=(
        PoolInput("/team", limit={"cpu": 10, "gpu": 2}),
        PoolInput("/team/a", usage=LeafUsage(jobs=(JobDemand("g", {"cpu": 1, "gpu": 4}),
                                                   JobDemand("c", {"cpu": 6}))))))
    got = compute_entitlements(tree)
    assert got["/team/a"].entitlement["gpu"] == pytest.approx(2.0)
    assert got["/team/a"].entitlement["cpu"] == pytest.approx(0.5 + 6.0)
    assert got.stops["/team/a"] == (Stop("gpu", "/team"),)


def test_a_tree_too_costly_to_fill_exactly_gets_dominants_numbers_and_an_alert(monkeypatch: pytest.MonkeyPatch) -> None:
    """The event-by-event filling is quadratic (docs/policies.md): past its budget (a count of
    phase-rows, so every replay decides the same) a tree gets `dominant`'s numbers and an alert,
    where it would have stalled admission's cycle for seconds. The same tree within the budget
    is filled exactly, with no alert. (A tree this small is path 2's, whose epochs take pools'
    limits too: it is made to decline, as it does past its own budget.)"""
    tree = TreeInput(kinds=("cpu", "gpu"), capacity={"cpu": 10, "gpu": 8}, policy="hdrf", pools=(
        PoolInput("/team", limit={"cpu": 10, "gpu": 2}),
        PoolInput("/team/a", usage=LeafUsage(jobs=(JobDemand("g", {"cpu": 1, "gpu": 4}),
                                                   JobDemand("c", {"cpu": 6}))))))
    exact = compute_entitlements(tree)
    assert not [a for a in exact.alerts if a.code == "hdrf_too_costly"]
    assert exact["/team/a"].entitlement["cpu"] == pytest.approx(6.5)
    monkeypatch.setattr(hdrf_module, "MAX_WORK", 1)
    monkeypatch.setattr(hdrf_module, "by_runs", lambda *args: None)
    cut = compute_entitlements(tree)
    dominant = compute_entitlements(dataclasses.replace(tree, policy="dominant"))
    for path in ("/team", "/team/a"):
        assert cut[path].entitlement == pytest.approx(dominant[path].entitlement)
    assert cut["/team/a"].entitlement["cpu"] < 6.5 - 1  # dominant stops the CPU job with the GPU one
    (alert,) = [a for a in cut.alerts if a.code == "hdrf_too_costly"]
    assert "2 jobs" in alert.message and "dominant" in alert.message
    assert cut.stops == {}


# -- laws -----------------------------------------------------------------------------------------


def _limit(tree: TreeInput, path: str, kind: str) -> float:
    for p in tree.pools:
        if p.path == path:
            return math.inf if p.limit is None else p.limit.get(kind, math.inf)
    return tree.capacity.get(kind, 0.0)


@SETTINGS
@given(any_tree)
def test_no_entitlement_above_demand_or_limit_and_children_fit_their_parent(tree: TreeInput) -> None:
    got = compute_entitlements(tree)
    kids: dict[str, list[str]] = {"/": []}
    for p in tree.pools:
        kids.setdefault(p.path, [])
        kids.setdefault(p.path.rsplit("/", 1)[0] or "/", []).append(p.path)
    for path, children in kids.items():
        for k in tree.kinds:
            e = got[path].entitlement[k]
            assert -TOLERANCE <= e <= claim(tree, got, path, k) + TOLERANCE, (path, k)
            assert e <= _limit(tree, path, k) + TOLERANCE, (path, k)
            assert sum(got[c].entitlement[k] for c in children) <= e + TOLERANCE, (path, k)


@SETTINGS
@given(any_tree)
def test_no_idle_capacity_a_waiting_job_could_use(tree: TreeInput) -> None:
    """Every job whose demand is not met needs a kind that is used up at the tree or at a pool on
    its path (a pool of weight 0 is full at its guarantee, as under `dominant`)."""
    arr = build_arrays(tree)
    drf = drf_inputs(arr)
    result = hdrf_entitlements(arr)
    held, cap = result.entitlement, arr.capacity
    full = arr.limit.copy()
    if drf.active:
        g = np.zeros_like(full)
        g[:, drf.active] = drf.guarantee * drf.cap
        full = np.where(arr.weight[:, None] > 1e-12, arr.limit, np.minimum(arr.limit, g))
    full[0] = cap
    demand = drf.job_demand.T
    for j, row in enumerate(result.job_row.tolist()):
        short = demand[j] - result.job_entitlement[j]
        if short.max(initial=0.0) <= TOLERANCE:
            continue
        path = [row]
        while path[-1] != 0:
            path.append(int(arr.parent[path[-1]]))
        needs = np.flatnonzero(demand[j] > 0)
        used_up = [(arr.kinds[k], arr.paths[p]) for k in needs for p in path if held[p, k] >= full[p, k] - TOLERANCE]
        assert used_up, (arr.paths[row], j, demand[j], result.job_entitlement[j])


@SETTINGS
@given(any_tree)
def test_a_pool_whose_jobs_need_none_of_a_kind_is_never_stopped_by_it(tree: TreeInput) -> None:
    """The kinds named as stopping a pool's jobs are kinds those jobs need, used up where named:
    at the tree (its whole capacity given) or at a pool on their path (its limit reached). (Not
    checked by changing the capacity of a kind: that changes every share of it, and so the keys
    of the pools using it, and so what the others get.)"""
    arr = build_arrays(tree)
    drf = drf_inputs(arr)
    result = hdrf_entitlements(arr)
    demand = drf.job_demand.T
    for path, stops in result.stops.items():
        rows = [r for r in range(len(arr.paths)) if arr.paths[r] == path or arr.paths[r].startswith(path + "/")]
        needed = {arr.kinds[k] for j, r in enumerate(result.job_row.tolist()) if r in rows
                  for k in np.flatnonzero(demand[j] > 0)}
        assert stops, path
        for stop in stops:
            assert stop.kind in needed, (path, stop, needed)
            k, at = arr.kinds.index(stop.kind), arr.index[stop.at]
            # where it was used up is on the path of the stopped job: above the pool or below it
            assert stop.at in ("/", path) or path.startswith(stop.at + "/") or stop.at.startswith(path + "/"), (
                path, stop)
            if at == 0 or arr.capacity[k] <= 0:
                assert result.entitlement[0, k] >= arr.capacity[k] - TOLERANCE, (path, stop)
            else:  # at its limit (a pool of weight 0: at its guarantee, which is below it)
                assert result.entitlement[at, k] >= min(arr.limit[at, k], arr.reservation[at, k] if
                                                        arr.weight[at] <= 1e-12 else math.inf) - TOLERANCE \
                    or arr.weight[at] <= 1e-12, (path, stop)


# -- the counterexamples of `dominant`, as properties ----------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.floats(1.0, 20.0), st.floats(1.0, 20.0))
def test_more_demand_of_a_job_using_none_of_the_scarce_kind_does_not_lower_its_pool(small: float, big: float) -> None:
    """test_properties.py's first counterexample: memory runs out; /p0's cpu job uses none and
    goes on to the whole cpu whatever the scale of /p0's demand (`dominant`: 9.5 at scale 1,
    9.25 at 1.5)."""
    def run(factor: float) -> float:
        jobs = (JobDemand("m", {"memory": 0.5 * factor}), JobDemand("c", {"cpu": 15.0 * factor}))
        tree = TreeInput(kinds=("cpu", "memory"), capacity={"cpu": 10, "memory": 10}, policy="hdrf", pools=(
            PoolInput(path="/p0", usage=LeafUsage(jobs=jobs)),
            PoolInput(path="/p1", usage=LeafUsage(demand={"memory": 15})),
        ))
        return compute_entitlements(tree)["/p0"].entitlement["cpu"]

    lo, hi = sorted((small, big))
    assert run(lo) == pytest.approx(10.0)
    assert run(hi) >= run(lo) - TOLERANCE


@settings(max_examples=60, deadline=None)
@given(st.floats(0.1, 20.0), st.floats(0.1, 20.0))
def test_a_pool_limit_on_one_kind_stops_only_the_jobs_that_need_it(small: float, big: float) -> None:
    """test_properties.py's second counterexample: the disk job reaches /p's 1-disk limit; the gpu
    job needs no disk and gets its demand up to the capacity, `min(3 * factor, 10)` (`dominant`:
    1 at factor 10, a third of 3 at factor 1)."""
    def run(factor: float) -> float:
        jobs = (JobDemand("g", {"gpu": 3.0 * factor}), JobDemand("d", {"disk": 0.5 * factor}))
        tree = TreeInput(kinds=("disk", "gpu"), capacity={"disk": 10, "gpu": 10}, policy="hdrf", pools=(
            PoolInput(path="/p", reservation={"disk": 1}, limit={"disk": 1}, usage=LeafUsage(jobs=jobs)),))
        return compute_entitlements(tree)["/p"].entitlement["gpu"]

    lo, hi = sorted((small, big))
    assert run(lo) == pytest.approx(min(3.0 * lo, 10.0))
    assert run(hi) >= run(lo) - TOLERANCE


# -- the option -----------------------------------------------------------------------------------


def test_hdrf_is_a_policy_of_tree_options_scenarios_and_tree_configure() -> None:
    assert TreeOptions(policy="hdrf").policy == "hdrf"
    scenario = parse_scenario("name: x\nresources: [cpu, gpu]\ncapacity: {cpu: 10, gpu: 8}\n"
                              "trees: [{name: default, policy: hdrf}]\n")
    assert scenario.tree_options()["default"].policy == "hdrf"
    assert options_from(None, "hdrf", None).policy == "hdrf"
    with pytest.raises(InputError, match="hdrf"):
        options_from(None, "drf", None)
    with pytest.raises(ScenarioError, match="'hdrf'"):
        parse_scenario("name: x\ntrees: [{name: t, policy: drf}]\n")
