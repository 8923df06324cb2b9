"""Policy `per_resource`, phase by phase, with numbers computed by hand."""

from __future__ import annotations

import math

import pytest

from services.entitlement import PoolInput, TreeEntitlements, TreeInput, compute_entitlements
from tests.entitlement.helpers import check, leaf

CPU1 = ("cpu",)


def run(*pools: PoolInput, capacity: float = 100.0, kinds: tuple[str, ...] = CPU1) -> TreeEntitlements:
    return compute_entitlements(TreeInput(kinds=kinds, capacity={k: capacity for k in kinds}, pools=pools))


def test_peloton_user_guide_example() -> None:
    # 100 cpu; RP1..3 reservation 20, limit 100, share 1; demands 10/80/80:
    # reservations 10, 20, 20; the 50 left water-filled over RP2 and RP3 (need 60 each): 25 each.
    pools = [
        leaf(f"/RP{i}", reservation={"cpu": 20}, limit={"cpu": 100}, demand={"cpu": d})
        for i, d in ((1, 10), (2, 80), (3, 80))
    ]
    r = compute_entitlements(TreeInput(kinds=CPU1, capacity={"cpu": 100}, pools=tuple(pools)))
    check(r, "entitlement", {"/RP1": {"cpu": 10}, "/RP2": {"cpu": 45}, "/RP3": {"cpu": 45}})
    # RP1's demand rises to 50: reservations 20 each, the 40 left over needs 30/60/60: 13.33 each.
    pools[0] = leaf("/RP1", reservation={"cpu": 20}, limit={"cpu": 100}, demand={"cpu": 50})
    r = compute_entitlements(TreeInput(kinds=CPU1, capacity={"cpu": 100}, pools=tuple(pools)))
    check(r, "entitlement", {"/RP1": {"cpu": 33.333}, "/RP2": {"cpu": 33.333}, "/RP3": {"cpu": 33.333}})
    # and RP2, RP3 each give back 45 - 33.33 = 11.67
    assert 45 - r["/RP2"].entitlement["cpu"] == pytest.approx(11.667, abs=0.001)


def test_phase1_reservation_up_to_requirement_then_phase3_by_share() -> None:
    # A needs 10 of its 40, B 40 of its 40: 10 + 40 reserved; nobody needs more; the 50 left by share 1:1.
    r = compute_entitlements(
        TreeInput(
            kinds=CPU1,
            capacity={"cpu": 100},
            pools=(
                leaf("/A", reservation={"cpu": 40}, demand={"cpu": 10}),
                leaf("/B", reservation={"cpu": 40}, demand={"cpu": 40}),
            ),
        )
    )
    check(r, "entitlement", {"/A": {"cpu": 35}, "/B": {"cpu": 65}})
    assert r.alerts == ()


def test_static_pool_gets_its_whole_reservation_whatever_its_demand() -> None:
    r = compute_entitlements(
        TreeInput(
            kinds=CPU1,
            capacity={"cpu": 100},
            pools=(leaf("/A", reservation={"cpu": 40}, static=True), leaf("/B", demand={"cpu": 100})),
        )
    )
    check(r, "entitlement", {"/A": {"cpu": 40}, "/B": {"cpu": 60}})


def test_static_reservation_is_claimed_by_the_parent_too() -> None:
    # /org's own requirement is only 5, but its static child /org/s must get its 30: /org claims 30 + 5.
    r = compute_entitlements(
        TreeInput(
            kinds=CPU1,
            capacity={"cpu": 100},
            pools=(
                leaf("/org", reservation={"cpu": 50}),
                leaf("/org/s", reservation={"cpu": 30}, static=True),
                leaf("/org/e", reservation={"cpu": 10}, demand={"cpu": 5}),
                leaf("/other", demand={"cpu": 100}, share=100),
            ),
        )
    )
    assert r["/org"].requirement["cpu"] == 35
    # /org: min(35, 50) = 35; /other: 65 (needs 100, only 65 left); nothing left for phase 3.
    check(r, "entitlement", {"/org": {"cpu": 35}, "/org/s": {"cpu": 30}, "/org/e": {"cpu": 5}, "/other": {"cpu": 65}})


def test_phase2_is_weighted_water_filling_capped_at_requirement() -> None:
    r = run(leaf("/A", demand={"cpu": 100}, share=1), leaf("/B", demand={"cpu": 100}, share=3))
    check(r, "entitlement", {"/A": {"cpu": 25}, "/B": {"cpu": 75}})
    # B needs only 50: it gets that, and A the rest (B's weight no longer counts once B is full)
    r = run(leaf("/A", demand={"cpu": 100}, share=1), leaf("/B", demand={"cpu": 50}, share=3))
    check(r, "entitlement", {"/A": {"cpu": 50}, "/B": {"cpu": 50}})


def test_phase2_only_for_children_needing_more_than_their_reservation() -> None:
    # A: reservation 30, needs 30 (nothing more); B: reservation 10, needs 100; capacity 100.
    # Phase 1: 30 + 10; phase 2: B +60 (all that is left). Phase 3: nothing.
    r = run(
        leaf("/A", reservation={"cpu": 30}, demand={"cpu": 30}),
        leaf("/B", reservation={"cpu": 10}, demand={"cpu": 100}),
    )
    check(r, "entitlement", {"/A": {"cpu": 30}, "/B": {"cpu": 70}})


def test_phase3_cap_at_limit_is_not_redistributed() -> None:
    # Nobody needs anything: 50 each by share, A capped at its limit 30; the 20 cut off stay unassigned.
    r = run(leaf("/A", limit={"cpu": 30}), leaf("/B", limit={"cpu": 100}))
    check(r, "entitlement", {"/A": {"cpu": 30}, "/B": {"cpu": 50}})


def test_zero_share_child_is_served_after_the_others_and_gets_no_leftover() -> None:
    r = run(leaf("/A", demand={"cpu": 50}, share=0), leaf("/B", demand={"cpu": 30}, share=1))
    # phase 2: B 30 first, then A takes up to its 50 of the remaining 70; phase 3: the 20 left all to B.
    check(r, "entitlement", {"/A": {"cpu": 50}, "/B": {"cpu": 50}})
    r = run(leaf("/A", demand={"cpu": 50}, share=0), leaf("/B", demand={"cpu": 30}, share=1), capacity=60)
    check(r, "entitlement", {"/A": {"cpu": 30}, "/B": {"cpu": 30}})


def test_reservations_above_capacity_are_scaled_down_with_alerts() -> None:
    r = compute_entitlements(
        TreeInput(
            kinds=CPU1,
            capacity={"cpu": 100},
            pools=(
                leaf("/A", reservation={"cpu": 80}, demand={"cpu": 100}),
                leaf("/B", reservation={"cpu": 60}, demand={"cpu": 100}),
            ),
        )
    )
    check(r, "entitlement", {"/A": {"cpu": 80 * 100 / 140}, "/B": {"cpu": 60 * 100 / 140}})
    codes = sorted(a.code for a in r.alerts)
    assert codes == ["guarantees_scaled_down", "reservations_exceed_capacity"]
    scaled = next(a for a in r.alerts if a.code == "guarantees_scaled_down")
    assert (scaled.path, scaled.kind) == ("/", "cpu")
    assert "140 > 100" in str(scaled)


def test_reservations_above_capacity_alert_even_without_demand() -> None:
    r = run(leaf("/A", reservation={"cpu": 80}), leaf("/B", reservation={"cpu": 60}))
    assert [a.code for a in r.alerts] == ["reservations_exceed_capacity"]
    check(r, "entitlement", {"/A": {"cpu": 50}, "/B": {"cpu": 50}})


def test_requirement_adds_the_slack_term_except_for_cpu_and_is_capped_at_the_limit() -> None:
    kinds = ("cpu", "memory", "gpu")
    a = leaf(
        "/t/a",
        reservation={"cpu": 10, "memory": 500, "gpu": 10},
        limit={"cpu": 100, "memory": 600, "gpu": 100},
        slack_limit=20,
        allocation={"cpu": 5, "memory": 100, "gpu": 1},
        demand={"cpu": 5, "memory": 450, "gpu": 1},
        revocable_allocation={"cpu": 50, "memory": 30, "gpu": 1},
        revocable_demand={"cpu": 50, "memory": 200},
    )
    b = leaf("/t/b", demand={"cpu": 1, "memory": 1, "gpu": 1})
    t = leaf("/t", limit={"cpu": 100, "memory": 600, "gpu": 3})
    r = compute_entitlements(TreeInput(kinds=kinds, capacity={"cpu": 100, "memory": 1000, "gpu": 10}, pools=(t, a, b)))
    # cpu: 5 + 5 (revocable cpu is slack, not requirement); memory: 100 + 450 + min(100, 230) = 650 -> limit 600;
    # gpu: 1 + 1 + min(2, 1) = 3
    assert r["/t/a"].requirement == {"cpu": 10, "memory": 600, "gpu": 3}
    # parent: sum of children, capped at its own limit
    assert r["/t"].requirement == {"cpu": 11, "memory": 600, "gpu": 3}


def test_deeper_tree_divides_level_by_level() -> None:
    # / (100) -> /a (res 60) -> /a/x (res 40, needs 70), /a/y (res 20, needs 5); /b (res 0, needs 100)
    r = compute_entitlements(
        TreeInput(
            kinds=CPU1,
            capacity={"cpu": 100},
            pools=(
                leaf("/a", reservation={"cpu": 60}),
                leaf("/a/x", reservation={"cpu": 40}, demand={"cpu": 70}),
                leaf("/a/y", reservation={"cpu": 20}, demand={"cpu": 5}),
                leaf("/b", demand={"cpu": 100}),
            ),
        )
    )
    # top: /a requires 75, reserved min(75, 60) = 60; /b 0. Phase 2: 40 left, needs 15 and 100: 15 / 25.
    check(r, "entitlement", {"/a": {"cpu": 75}, "/b": {"cpu": 25}})
    # in /a (75): x min(70, 40) = 40, y 5; 30 left; x needs 30 more: x 70, y 5.
    check(r, "entitlement", {"/a/x": {"cpu": 70}, "/a/y": {"cpu": 5}})


def test_unbounded_limits_and_per_kind_shares() -> None:
    r = compute_entitlements(
        TreeInput(
            kinds=("cpu", "memory"),
            capacity={"cpu": 100, "memory": 100},
            pools=(leaf("/A", share={"cpu": 3, "memory": 1}), leaf("/B", limit={"cpu": math.inf})),
        )
    )
    check(r, "entitlement", {"/A": {"cpu": 75, "memory": 50}, "/B": {"cpu": 25, "memory": 50}})
    assert r["/"].entitlement == {"cpu": 100, "memory": 100}
