"""Policy `dominant` (vector fair share, DRF), by hand."""

from __future__ import annotations

import pytest

from services.entitlement import JobDemand, LeafUsage, PoolInput, TreeInput, compute_entitlements
from tests.entitlement.helpers import check, leaf

CM = ("cpu", "memory")
CAP = {"cpu": 100.0, "memory": 1000.0}
ALL = {"cpu": 1000.0, "memory": 10000.0}  # more than the whole cluster, in the cluster's proportions


def run(*pools: PoolInput, capacity: dict[str, float] | None = None, kinds: tuple[str, ...] = CM):  # type: ignore[no-untyped-def]
    return compute_entitlements(TreeInput(kinds=kinds, capacity=capacity or CAP, pools=pools, policy="dominant"))


def test_guarantees_are_added_not_a_floor() -> None:
    r = run(leaf("/A", reservation={"cpu": 30}, demand=ALL), leaf("/B", reservation={"cpu": 30}, demand=ALL))
    check(r, "entitlement", {"/A": {"cpu": 50, "memory": 500}, "/B": {"cpu": 50, "memory": 500}})
    r = run(leaf("/A", reservation={"cpu": 60}, demand=ALL), leaf("/B", reservation={"cpu": 20}, demand=ALL))
    # 0.6 + y + 0.2 + y = 1: y = 0.1 (a floor would give 60 / 40)
    check(r, "entitlement", {"/A": {"cpu": 70, "memory": 700}, "/B": {"cpu": 30, "memory": 300}})


def test_drf_equalizes_dominant_shares_of_different_directions() -> None:
    r = run(leaf("/X", demand={"cpu": 100, "memory": 2000}), leaf("/Y", demand={"cpu": 200, "memory": 1000}))
    # X grows along (0.5, 1), Y along (1, 0.5): 1.5 y = 1 in both kinds
    check(r, "entitlement", {"/X": {"cpu": 33.333, "memory": 666.667}, "/Y": {"cpu": 66.667, "memory": 333.333}})
    assert r["/X"].fair_share == pytest.approx(2 / 3)
    assert r["/X"].dominant_kind == "memory"
    assert r["/Y"].dominant_kind == "cpu"


def test_two_jobs_in_one_pool_are_the_leaves() -> None:
    jobs = (JobDemand("j1", {"cpu": 100, "memory": 2000}), JobDemand("j2", {"cpu": 200, "memory": 1000}))
    r = run(PoolInput(path="/P", usage=LeafUsage(jobs=jobs)))
    # the jobs get (33.3, 666.7) and (66.7, 333.3): the pool holds their sum
    check(r, "entitlement", {"/P": {"cpu": 100, "memory": 1000}})
    assert r["/P"].requirement == {"cpu": 300, "memory": 3000}


def test_guarantees_above_capacity_are_scaled_down() -> None:
    r = run(leaf("/A", reservation={"cpu": 30}, demand=ALL), leaf("/B", reservation={"cpu": 90}, demand=ALL))
    check(r, "entitlement", {"/A": {"cpu": 25, "memory": 250}, "/B": {"cpu": 75, "memory": 750}})
    assert {a.code for a in r.alerts} == {"reservations_exceed_capacity", "guarantees_scaled_down"}


def test_weights_and_demand_bound() -> None:
    r = run(leaf("/A", demand=ALL, share=1), leaf("/B", demand=ALL, share=3))
    check(r, "entitlement", {"/A": {"cpu": 25, "memory": 250}, "/B": {"cpu": 75, "memory": 750}})
    # A wants only 10% of everything: it gets it, B the rest
    r = run(leaf("/A", demand={"cpu": 10, "memory": 100}), leaf("/B", demand=ALL))
    check(r, "entitlement", {"/A": {"cpu": 10, "memory": 100}, "/B": {"cpu": 90, "memory": 900}})


def test_limit_bounds_the_share_without_bending_its_direction() -> None:
    # A's cpu limit 20: A stops at (20, 200); B takes the rest.
    r = run(leaf("/A", demand=ALL, limit={"cpu": 20}), leaf("/B", demand=ALL))
    check(r, "entitlement", {"/A": {"cpu": 20, "memory": 200}, "/B": {"cpu": 80, "memory": 800}})


def test_cpu_only_reservation_implies_other_kinds_in_proportion_to_the_parents_guarantee() -> None:
    # /o guaranteed (50% cpu, 10% memory); /o/a reserves 25 cpu alone: implied memory 25/50 of /o's 10%: 5%.
    # /o/a wants (0 cpu, 100% memory), /o/b wants everything; y inside /o: a = (0, 0.05 + y), b = (y, y) * ...
    r = run(
        leaf("/o", reservation={"cpu": 50, "memory": 100}, limit={"cpu": 50, "memory": 100}),
        leaf("/o/a", reservation={"cpu": 25}, demand={"memory": 1000}),
        leaf("/o/b", demand=ALL),
    )
    # /o's box is its limit (50, 100): memory binds: (0.05 + y) + y = 0.1 -> y = 0.025;
    # a = (0, 0.075) -> memory 75; b = (0.025, 0.025) -> (2.5, 25)
    check(
        r,
        "entitlement",
        {"/o/a": {"cpu": 0, "memory": 75}, "/o/b": {"cpu": 2.5, "memory": 25}, "/o": {"cpu": 2.5, "memory": 100}},
    )


def test_hierarchy_pool_dominant_share_is_its_weighted_part() -> None:
    # capacity (200 cpu, 100 memory). P holds three jobs: two of 30 cpu, one of memory only (unbounded);
    # Q one job along (0.5, 1) in shares. Inside P, at t: (2 min(t, 0.15), t); P's box is y in every
    # kind, so P = (y, y/2) up to y = 0.3, then P's memory catches up at once (a jump to (0.3, 0.3))
    # and P = (0.3, y). Q = (y/2, y). The root: memory binds at 2y = 1: y = 0.5.
    p = PoolInput(
        path="/P",
        usage=LeafUsage(
            jobs=(JobDemand("j1", {"cpu": 30}), JobDemand("j2", {"cpu": 30}), JobDemand("j3", {"memory": 1000}))
        ),
    )
    q = leaf("/Q", demand={"cpu": 1000, "memory": 1000})
    r = run(p, q, capacity={"cpu": 200, "memory": 100})
    check(r, "entitlement", {"/P": {"cpu": 60, "memory": 50}, "/Q": {"cpu": 50, "memory": 50}})


def test_a_jump_is_taken_only_when_all_of_it_fits() -> None:
    # As above, plus R (memory only, weight 1.5). At y = 0.3: P at the foot of its jump (0.3, 0.15),
    # Q (0.15, 0.3), R (0, 0.45): memory 0.9. P's jump to (0.3, 0.3) would make 1.05: it is not taken,
    # and y stops there (the 10% memory it would need only in part stays undivided: see dominant.py).
    p = PoolInput(
        path="/P",
        usage=LeafUsage(
            jobs=(JobDemand("j1", {"cpu": 30}), JobDemand("j2", {"cpu": 30}), JobDemand("j3", {"memory": 1000}))
        ),
    )
    q = leaf("/Q", demand={"cpu": 1000, "memory": 1000})
    rr = leaf("/R", demand={"memory": 1000}, share=1.5)
    r = run(p, q, rr, capacity={"cpu": 200, "memory": 100})
    check(
        r,
        "entitlement",
        {"/P": {"cpu": 60, "memory": 15}, "/Q": {"cpu": 30, "memory": 30}, "/R": {"cpu": 0, "memory": 45}},
    )


def test_zero_weight_pool_gets_its_guarantee_only() -> None:
    r = run(leaf("/A", reservation={"cpu": 20}, demand=ALL, share=0), leaf("/B", demand=ALL))
    check(r, "entitlement", {"/A": {"cpu": 20, "memory": 200}, "/B": {"cpu": 80, "memory": 800}})


def test_kinds_without_capacity_are_left_out() -> None:
    r = run(
        leaf("/A", demand={"cpu": 100, "gpu": 5}),
        leaf("/B", demand={"cpu": 100}),
        kinds=("cpu", "gpu"),
        capacity={"cpu": 100, "gpu": 0},
    )
    check(r, "entitlement", {"/A": {"cpu": 50, "gpu": 0}, "/B": {"cpu": 50, "gpu": 0}})


def test_revocable_work_is_a_pseudo_job_of_the_leaf() -> None:
    # A: non-revocable (50 cpu, 0 memory), revocable memory 300 of which slack_limit 20% of 500 = 100 counts.
    r = run(
        leaf("/A", reservation={"memory": 500}, demand={"cpu": 50}, revocable_demand={"memory": 300}, slack_limit=20)
    )
    assert r["/A"].requirement == {"cpu": 50, "memory": 100}
    check(r, "entitlement", {"/A": {"cpu": 50, "memory": 100}})
    check(r, "slack_entitlement", {"/A": {"memory": 100}})
    check(r, "non_slack_entitlement", {"/A": {"memory": 0}})


def test_children_add_up_to_their_parent_exactly() -> None:
    r = run(
        leaf("/o", reservation={"cpu": 40}),
        PoolInput(
            path="/o/a",
            usage=LeafUsage(jobs=(JobDemand("x", {"cpu": 30, "memory": 10}), JobDemand("y", {"memory": 800}))),
        ),
        leaf("/o/b", demand={"cpu": 80, "memory": 80}),
        leaf("/p", demand={"cpu": 100, "memory": 100}, share=2),
    )
    for kind in CM:
        assert r["/o/a"].entitlement[kind] + r["/o/b"].entitlement[kind] == pytest.approx(r["/o"].entitlement[kind])
        assert r["/o"].entitlement[kind] + r["/p"].entitlement[kind] <= CAP[kind] + 1e-9


def _jump_top_tree(r_reservation: float) -> tuple[PoolInput, ...]:
    """/p/q holds job a (100 cpu, weight 0.5) and job b (20 cpu, 60 memory, weight 2); /r reserves
    cpu alone and wants 150 cpu, weight 0.5. Capacity (100 cpu, 100 memory)."""
    q = PoolInput(
        path="/p/q",
        usage=LeafUsage(jobs=(JobDemand("a", {"cpu": 100}, 0.5), JobDemand("b", {"cpu": 20, "memory": 60}, 2.0))),
    )
    return (
        PoolInput(path="/p"),
        q,
        leaf("/r", reservation={"cpu": r_reservation}, demand={"cpu": 150}, share=0.5),
    )


def test_a_root_cut_exactly_on_a_jump_top_gives_the_children_the_whole_top() -> None:
    """Regression: the root is cut exactly on the top of a jump; the children used to be read at
    its foot (/p 35 cpu + /r 40 cpu = 75 of the root's 100, while they want 270).

    Shares of (100 cpu, 100 memory). Inside /p/q at t: a = (t/2, 0), b = (1/3, 1) * min(0.6, 2t);
    /p and /p/q have weight 1 and no guarantee, so their y is their dominant share: (7/12 y, y) up
    to y = 0.6, i.e. (0.35, 0.6), where b is saturated; then the cpu catches up at once (a jump to
    (0.6, 0.6): min(demand (1.2, 0.6), guarantee + weight * y = 0.6) kind by kind) and /p = (y, 0.6).
    /r: reserving 10 cpu alone guarantees 10% of everything, so /r = (0.1 + 0.5 y, 0).
    Root cpu at y = 0.6: foot 0.35 + 0.4 = 0.75, top 0.6 + 0.4 = 1.0: all of the jump fits, exactly,
    and no larger y does. So /p = /p/q = (60, 60), /r = (40, 0): 100 cpu, all of it."""
    r = run(*_jump_top_tree(10), capacity={"cpu": 100, "memory": 100})
    check(
        r,
        "entitlement",
        {
            "/p": {"cpu": 60, "memory": 60},
            "/p/q": {"cpu": 60, "memory": 60},
            "/r": {"cpu": 40, "memory": 0},
        },
    )
    for kind in CM:  # the children share all of the parent's entitlement: their demand exceeds it
        assert r["/p"].entitlement[kind] + r["/r"].entitlement[kind] == pytest.approx(r["/"].entitlement[kind])
        assert r["/p/q"].entitlement[kind] == pytest.approx(r["/p"].entitlement[kind])
    assert r["/"].entitlement["cpu"] == pytest.approx(100)


@pytest.mark.parametrize("r_reservation", [9.999999999999, 10.0, 10.000000000001])
def test_a_cut_next_to_a_jump_top_reads_the_children_where_the_parent_is(r_reservation: float) -> None:
    """The same tree with /r's reservation a hair off 10: the jump top then adds up to a hair under
    the capacity (the root is cut just past it) or over it, within the fit tolerance (cut at
    s = 0, which the old code also read at the foot), as sums do after rounding. The numbers move
    by no more than the hair: /p still gets the top of its jump, and the children add up to it."""
    r = run(*_jump_top_tree(r_reservation), capacity={"cpu": 100, "memory": 100})
    for kind in CM:
        assert r["/p"].entitlement[kind] + r["/r"].entitlement[kind] == pytest.approx(r["/"].entitlement[kind])
        assert r["/p/q"].entitlement[kind] == pytest.approx(r["/p"].entitlement[kind])
    assert r["/p"].entitlement["cpu"] == pytest.approx(60, abs=1e-6)
    assert r["/r"].entitlement["cpu"] == pytest.approx(40, abs=1e-6)
    assert r["/"].entitlement["cpu"] == pytest.approx(100, abs=1e-6)
