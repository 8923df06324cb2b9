"""Laws of the entitlement engine over random valid trees (hypothesis)."""

from __future__ import annotations

import dataclasses
import math
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.entitlement import LeafUsage, TreeInput, compute_entitlements
from services.entitlement.model import CPU, TOLERANCE
from tests.entitlement.helpers import claim
from tests.entitlement.reference import reference
from tests.entitlement.strategies import trees

SETTINGS = settings(
    max_examples=int(os.environ.get("ENTITLEMENT_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def _children(tree: TreeInput) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {"/": []}
    for p in tree.pools:
        out.setdefault(p.path, [])
        parent = p.path.rsplit("/", 1)[0] or "/"
        out.setdefault(parent, []).append(p.path)
    return out


def _limit(tree: TreeInput, path: str, kind: str) -> float:
    for p in tree.pools:
        if p.path == path:
            return math.inf if p.limit is None else p.limit.get(kind, math.inf)
    return tree.capacity.get(kind, 0.0)


def _close(a: float, b: float, scale: float = 1.0) -> bool:
    return abs(a - b) <= 1e-6 * max(1.0, scale, abs(a), abs(b))


@SETTINGS
@given(trees())
def test_engine_matches_the_literal_reading(tree: TreeInput) -> None:
    got = compute_entitlements(tree)
    want = reference(tree)
    assert set(got) == set(want)
    for path, w in want.items():
        g = got[path]
        for k in tree.kinds:
            assert _close(g.requirement[k], w["requirement"][k]), (path, k, "requirement")
            assert _close(g.entitlement[k], w["entitlement"][k]), (path, k, "entitlement")
            assert _close(g.slack_entitlement[k], w["slack"][k]), (path, k, "slack")
            assert _close(g.non_slack_entitlement[k], w["non_slack"][k]), (path, k, "non_slack")


def _tree_laws(tree: TreeInput) -> None:
    got = compute_entitlements(tree)
    kids = _children(tree)
    for k in tree.kinds:
        assert _close(got["/"].entitlement[k], tree.capacity.get(k, 0.0)) or tree.policy == "dominant"
        assert got["/"].entitlement[k] <= tree.capacity.get(k, 0.0) + TOLERANCE
    for path, children in kids.items():
        for k in tree.kinds:
            total = sum(got[c].entitlement[k] for c in children)
            assert total <= got[path].entitlement[k] + TOLERANCE, (path, k)
            e = got[path].entitlement[k]
            assert e >= -TOLERANCE
            assert e <= _limit(tree, path, k) + TOLERANCE, (path, k)
            s = got[path].slack_entitlement[k]
            assert s >= -TOLERANCE
            if k != CPU:
                assert _close(got[path].non_slack_entitlement[k] + s, e), (path, k)
                assert s <= e + TOLERANCE


@SETTINGS
@given(trees())
def test_per_resource_children_fit_in_their_parent_and_their_limit(tree: TreeInput) -> None:
    _tree_laws(tree)


@SETTINGS
@given(trees(policy="dominant", with_jobs=True))
def test_dominant_children_fit_in_their_parent_and_their_limit(tree: TreeInput) -> None:
    _tree_laws(tree)
    got = compute_entitlements(tree)
    for path in got:
        for k in tree.kinds:
            assert got[path].entitlement[k] <= claim(tree, got, path, k) + TOLERANCE, (path, k)


@SETTINGS
@given(trees())
def test_each_pool_gets_its_reservation_up_to_its_requirement_when_reservations_fit(tree: TreeInput) -> None:
    got = compute_entitlements(tree)
    if any(a.code == "guarantees_scaled_down" for a in got.alerts):
        return
    for p in tree.pools:
        for k in tree.kinds:
            r = p.reservation.get(k, 0.0)
            floor = r if p.static else min(got[p.path].requirement[k], r)
            assert got[p.path].entitlement[k] >= floor - TOLERANCE, (p.path, k)


@SETTINGS
@given(trees(), st.data())
def test_more_demand_never_lowers_a_pools_own_entitlement(tree: TreeInput, data: st.DataObject) -> None:
    kids = _children(tree)
    leaves = [p for p in tree.pools if not kids[p.path]]
    leaf = data.draw(st.sampled_from(leaves))
    kind = data.draw(st.sampled_from(tree.kinds))
    more = data.draw(st.sampled_from([0.5, 5.0, 50.0, 500.0]))
    which = data.draw(st.sampled_from(["demand", "allocation", "revocable_demand"]))
    usage = leaf.usage
    bumped = dict(getattr(usage, which))
    bumped[kind] = bumped.get(kind, 0.0) + more
    new_usage = dataclasses.replace(usage)
    object.__setattr__(new_usage, which, bumped)
    new_leaf = dataclasses.replace(leaf, usage=new_usage)
    tree2 = dataclasses.replace(tree, pools=tuple(new_leaf if p is leaf else p for p in tree.pools))
    before, after = compute_entitlements(tree), compute_entitlements(tree2)
    path = leaf.path
    while True:  # the leaf and every ancestor: their requirement grew too
        for k in tree.kinds:
            assert after[path].entitlement[k] >= before[path].entitlement[k] - TOLERANCE, (path, k)
        if path == "/":
            break
        path = path.rsplit("/", 1)[0] or "/"


def test_dominant_more_demand_can_lower_a_pools_share_one_common_argument() -> None:
    """Counterexample: the monotonicity law does NOT hold under `dominant` (DOMAIN §3: one `y`
    common to the siblings, the largest that fits, kind by kind). When a kind saturates, `y`
    stops for every sibling, even for jobs that use none of it (true DRF progressive filling would
    freeze only the users of the saturated kind). Capacity (10 cpu, 10 memory); /p0 holds a cpu
    job (15 cpu) and a small memory job (0.5 memory), /p1 a memory job (15). Memory binds:
    0.05 + y = 1 -> y = 0.95: /p0 gets 9.5 cpu. Scale /p0's demand by 1.5: 0.075 + y = 1 ->
    y = 0.925: /p0 gets 9.25 cpu. More demand, less entitlement (and a dominant share 0.925 < 0.95)."""
    from services.entitlement import JobDemand, PoolInput

    def run(factor: float) -> float:
        jobs = (JobDemand("m", {"memory": 0.5 * factor}), JobDemand("c", {"cpu": 15.0 * factor}))
        tree = TreeInput(
            kinds=("cpu", "memory"),
            capacity={"cpu": 10, "memory": 10},
            policy="dominant",
            pools=(
                PoolInput(path="/p0", usage=LeafUsage(jobs=jobs)),
                PoolInput(path="/p1", usage=LeafUsage(demand={"memory": 15})),
            ),
        )
        return compute_entitlements(tree)["/p0"].entitlement["cpu"]

    assert run(1.0) == pytest.approx(9.5)
    assert run(1.5) == pytest.approx(9.25)


def test_dominant_a_pool_limit_stops_all_its_jobs() -> None:
    """Counterexample to monotonicity under `dominant` (one common argument per sibling group, as
    DOMAIN §3 says): a pool's jobs share one argument, so when one job's kind reaches the pool's
    limit, every job of the pool stops, even one that uses none of that kind. Here the disk job
    (0.5 disk -> 5 disk) outgrows the pool's 1-disk limit and the gpu job stays at 1 gpu instead
    of 3: ten times the demand, a third of the entitlement."""
    from services.entitlement import JobDemand, PoolInput

    def run(factor: float) -> float:
        jobs = (JobDemand("g", {"gpu": 3.0 * factor}), JobDemand("d", {"disk": 0.5 * factor}))
        tree = TreeInput(
            kinds=("disk", "gpu"),
            capacity={"disk": 10, "gpu": 10},
            policy="dominant",
            pools=(PoolInput(path="/p", reservation={"disk": 1}, limit={"disk": 1}, usage=LeafUsage(jobs=jobs)),),
        )
        return compute_entitlements(tree)["/p"].entitlement["gpu"]

    assert run(1) == pytest.approx(3.0)
    assert run(10) == pytest.approx(1.0)
