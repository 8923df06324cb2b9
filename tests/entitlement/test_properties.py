"""Laws of the entitlement engine over random valid trees (hypothesis)."""

from __future__ import annotations

import dataclasses
import math
import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.admission.domain.entitlement import LeafUsage, TreeInput, compute_entitlements
from services.admission.domain.entitlement.model import CPU, TOLERANCE
from tests.entitlement.reference import reference
from tests.entitlement.strategies import trees

SETTINGS = settings(max_examples=int(os.environ.get("ENTITLEMENT_EXAMPLES", "300")), deadline=None, suppress_health_check=[HealthCheck.too_slow])


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
            assert got[path].entitlement[k] <= got[path].requirement[k] + TOLERANCE, (path, k)


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
    new_leaf = dataclasses.replace(leaf, usage=dataclasses.replace(usage, **{which: bumped}))
    tree2 = dataclasses.replace(tree, pools=tuple(new_leaf if p is leaf else p for p in tree.pools))
    before, after = compute_entitlements(tree), compute_entitlements(tree2)
    path = leaf.path
    while True:  # the leaf and every ancestor: their requirement grew too
        for k in tree.kinds:
            assert after[path].entitlement[k] >= before[path].entitlement[k] - TOLERANCE, (path, k)
        if path == "/":
            break
        path = path.rsplit("/", 1)[0] or "/"


@SETTINGS
@given(trees(policy="dominant", with_jobs=True), st.data())
def test_dominant_more_of_the_same_demand_never_lowers_a_leafs_dominant_share(tree: TreeInput, data: st.DataObject) -> None:
    kids = _children(tree)
    leaves = [p for p in tree.pools if not kids[p.path]]
    leaf = data.draw(st.sampled_from(leaves))
    factor = data.draw(st.sampled_from([1.5, 2.0, 10.0]))
    usage = leaf.usage
    if usage.jobs is None:
        new_usage = dataclasses.replace(usage, demand={k: v * factor for k, v in usage.demand.items()},
                                        allocation={k: v * factor for k, v in usage.allocation.items()})
    else:
        new_usage = dataclasses.replace(usage, jobs=tuple(
            dataclasses.replace(j, demand={k: v * factor for k, v in j.demand.items()}) for j in usage.jobs))
    new_leaf = dataclasses.replace(leaf, usage=new_usage)
    tree2 = dataclasses.replace(tree, pools=tuple(new_leaf if p is leaf else p for p in tree.pools))
    before, after = compute_entitlements(tree), compute_entitlements(tree2)
    assert after[leaf.path].fair_share >= before[leaf.path].fair_share - 1e-6


def test_empty_usage_is_fine() -> None:
    tree = TreeInput(kinds=("cpu",), capacity={"cpu": 10}, pools=())
    assert compute_entitlements(tree)["/"].entitlement == {"cpu": 10.0}
    assert LeafUsage().jobs is None
