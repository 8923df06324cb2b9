"""`reservation_type: static` under `dominant` and `hdrf` (DOMAIN §2: "the reservation is given
whatever the demand"; §3: a static child claims `max(requirement, reservation)`), by hand: the
same rule as `per_resource` (`test_per_resource.py`), in DRF's terms. A static pool holds what its
reservation exceeds its requirement by, kind by kind, given before anything else; the rest of the
computation is unchanged. The oracles (`dominant_oracle.py`, `hdrf_reference.py`) check it on
random trees."""

from __future__ import annotations

import dataclasses
import math
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.entitlement import PoolInput, TreeInput, compute_entitlements
from services.entitlement.model import TOLERANCE, Policy
from tests.entitlement.dominant_oracle import dominant_entitlements as dominant_oracle
from tests.entitlement.hdrf_reference import hdrf_reference
from tests.entitlement.helpers import check, leaf
from tests.entitlement.strategies import trees

CM = ("cpu", "memory")
CAP = {"cpu": 100.0, "memory": 1000.0}
ALL = {"cpu": 1000.0, "memory": 10000.0}  # more than the whole cluster, in its proportions
DRF: list[Policy] = ["dominant", "hdrf"]


def tree(*pools: PoolInput, policy: Policy) -> TreeInput:
    return TreeInput(kinds=CM, capacity=CAP, pools=pools, policy=policy)


@pytest.mark.parametrize("policy", DRF)
def test_an_idle_static_pool_is_held_its_reservation(policy: Policy) -> None:
    # docs/policies.md's example: 30 cpu of 100 to an idle static pool, as under per_resource
    t = tree(leaf("/A", reservation={"cpu": 30}, static=True), leaf("/B", demand=ALL), policy=policy)
    r = compute_entitlements(t)
    check(r, "entitlement", {"/A": {"cpu": 30, "memory": 0}, "/B": {"cpu": 70, "memory": 700}})
    per_resource = compute_entitlements(dataclasses.replace(t, policy="per_resource"))
    assert per_resource["/A"].entitlement["cpu"] == pytest.approx(30)
    # elastic, the same pool is entitled to nothing: it requires nothing
    elastic = compute_entitlements(tree(leaf("/A", reservation={"cpu": 30}), leaf("/B", demand=ALL), policy=policy))
    check(elastic, "entitlement", {"/A": {"cpu": 0, "memory": 0}, "/B": {"cpu": 100, "memory": 1000}})


@pytest.mark.parametrize("policy", DRF)
def test_a_static_pool_holds_only_what_its_reservation_exceeds_its_requirement_by(policy: Policy) -> None:
    # /A requires (20, 500): it holds cpu 10 more, and ends at max(requirement, reservation) =
    # (30, 500); /B, on the same level y, gets the rest of the memory and 50 cpu
    t = tree(leaf("/A", reservation={"cpu": 30}, static=True, demand={"cpu": 20, "memory": 500}),
             leaf("/B", demand=ALL), policy=policy)
    r = compute_entitlements(t)
    check(r, "entitlement", {"/A": {"cpu": 30, "memory": 500}, "/B": {"cpu": 50, "memory": 500}})
    # past its reservation in every kind it holds nothing more: as elastic
    busy = tree(leaf("/A", reservation={"cpu": 30}, static=True, demand={"cpu": 40, "memory": 500}),
                leaf("/B", demand=ALL), policy=policy)
    same = tree(leaf("/A", reservation={"cpu": 30}, demand={"cpu": 40, "memory": 500}),
                leaf("/B", demand=ALL), policy=policy)
    a, b = compute_entitlements(busy), compute_entitlements(same)
    for path in ("/", "/A", "/B"):
        assert a[path].entitlement == pytest.approx(b[path].entitlement, abs=1e-9)


@pytest.mark.parametrize("policy", DRF)
def test_an_internal_static_pool_holds_its_reservation_for_its_subtree(policy: Policy) -> None:
    # /org requires 10 cpu (its child's) of its 40 reserved: it holds 30 more, which none of its
    # children is entitled to (no pass for unclaimed resources under DRF) until its demand grows
    t = tree(PoolInput(path="/org", reservation={"cpu": 40}, static=True),
             leaf("/org/a", demand={"cpu": 10, "memory": 100}), leaf("/b", demand=ALL), policy=policy)
    r = compute_entitlements(t)
    check(r, "entitlement", {"/org": {"cpu": 40, "memory": 100}, "/org/a": {"cpu": 10, "memory": 100},
                             "/b": {"cpu": 60, "memory": 600}})
    assert r["/"].entitlement["cpu"] == pytest.approx(100)


@pytest.mark.parametrize("policy", DRF)
def test_a_static_pool_below_a_static_pool_is_held_once(policy: Policy) -> None:
    # /org reserves 40, its static child /org/s 25 of it: /org's requirement counts /org/s's claim
    # (25), so /org holds 15 more, and the two together 40, not 65
    t = tree(PoolInput(path="/org", reservation={"cpu": 40}, static=True),
             leaf("/org/s", reservation={"cpu": 25}, static=True), leaf("/b", demand=ALL), policy=policy)
    r = compute_entitlements(t)
    check(r, "entitlement", {"/org": {"cpu": 40, "memory": 0}, "/org/s": {"cpu": 25, "memory": 0},
                             "/b": {"cpu": 60, "memory": 600}})


@pytest.mark.parametrize("policy", DRF)
def test_holds_scaled_down_with_the_guarantees_never_exceed_the_capacity(policy: Policy) -> None:
    # top-level reservations of 120 cpu of 100: the guarantees, and the holds with them, are
    # scaled down to 5/6 (an alert says so): 25 and 50 held, /C gets the 25 left
    t = tree(leaf("/A", reservation={"cpu": 30}, static=True), leaf("/B", reservation={"cpu": 90}, static=True,
                                                                    demand={"cpu": 30}),
             leaf("/C", demand=ALL), policy=policy)
    r = compute_entitlements(t)
    check(r, "entitlement", {"/A": {"cpu": 25}, "/B": {"cpu": 75}, "/C": {"cpu": 0}, "/": {"cpu": 100}})
    assert "guarantees_scaled_down" in {a.code for a in r.alerts}


@pytest.mark.parametrize("policy", DRF)
def test_the_oracles_hold_static_reservations_too(policy: Policy) -> None:
    """The hand cases above, read by the slow references written from the spec."""
    t = tree(PoolInput(path="/org", reservation={"cpu": 40}, static=True),
             leaf("/org/a", demand={"cpu": 10, "memory": 100}),
             leaf("/x", reservation={"cpu": 30}, static=True, demand={"cpu": 20, "memory": 500}),
             leaf("/b", demand=ALL), policy=policy)
    got = compute_entitlements(t)
    if policy == "dominant":
        from services.entitlement.arrays import build_arrays

        arr = build_arrays(t)
        ent, _, _ = dominant_oracle(arr)
        want = {path: dict(zip(CM, ent[row], strict=True)) for row, path in enumerate(arr.paths)}
    else:
        want = hdrf_reference(t)
    for path, amounts in want.items():
        for kind, value in amounts.items():
            assert got[path].entitlement[kind] == pytest.approx(value, abs=3e-3 * CAP[kind]), (path, kind)
    assert want["/org"]["cpu"] == pytest.approx(40, abs=0.3)
    assert want["/x"]["cpu"] == pytest.approx(30, abs=0.3)


@settings(max_examples=int(os.environ.get("ENTITLEMENT_EXAMPLES", "300")) // 3, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.sampled_from(DRF).flatmap(lambda policy: trees(policy=policy, with_jobs=True)))
def test_a_static_pool_whose_demand_its_reservation_covers_gets_all_of_it(tree: TreeInput) -> None:
    """When the guarantees fit (no alert scaled them down), a static leaf whose jobs want no more
    than its reservation (up to its limit) in any kind gets all of that reservation: its jobs and
    what it holds fit its guarantee at `y = 0`. (A pool whose jobs want more in some kind, or are
    cut short by a limit or a kind the tree lacks, competes beyond its guarantee like any pool, and
    under DRF may end below its reservation in another kind, as an elastic one may.)"""
    got = compute_entitlements(tree)
    if any(a.code == "guarantees_scaled_down" for a in got.alerts):
        return
    parents = {p.path.rsplit("/", 1)[0] or "/" for p in tree.pools}
    for p in tree.pools:
        if not p.static or p.path in parents:
            continue
        floor = {k: min(p.reservation.get(k, 0.0), math.inf if p.limit is None else p.limit.get(k, math.inf))
                 for k in tree.kinds}
        if any(_wanted(p, k) > (floor[k] if tree.capacity.get(k, 0.0) > 0 else 0.0) for k in tree.kinds):
            continue
        for k in tree.kinds:
            if tree.capacity.get(k, 0.0) > 0:
                assert got[p.path].entitlement[k] >= floor[k] - TOLERANCE, (p.path, k)


def _wanted(pool: PoolInput, kind: str) -> float:
    """What a leaf's jobs want of `kind`, before its limit: its jobs (else its allocation plus
    demand), plus its revocable term (every kind but cpu)."""
    u = pool.usage
    if u.jobs is not None:
        own = sum(max(0.0, j.demand.get(kind, 0.0)) for j in u.jobs)
    else:
        own = max(0.0, u.allocation.get(kind, 0.0)) + max(0.0, u.demand.get(kind, 0.0))
    if kind == "cpu":
        return own
    revocable = max(0.0, u.revocable_allocation.get(kind, 0.0)) + max(0.0, u.revocable_demand.get(kind, 0.0))
    return own + min(pool.slack_limit / 100.0 * pool.reservation.get(kind, 0.0), revocable)
