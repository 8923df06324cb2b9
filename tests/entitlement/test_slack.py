"""Slack (revocable) entitlement, by hand."""

from __future__ import annotations

import pytest

from services.entitlement import TreeInput, compute_entitlements
from tests.entitlement.helpers import check, leaf

CM = ("cpu", "memory")


def test_slack_cpu_water_filled_over_revocable_need_then_by_share_without_limit_cap() -> None:
    # 60 revocable cpu: A wants 10 -> 10; the 50 left by share 1:1: A 35 (above its limit 20: no cap), B 25.
    r = compute_entitlements(
        TreeInput(
            kinds=("cpu",),
            capacity={"cpu": 100},
            revocable_capacity={"cpu": 60},
            pools=(leaf("/A", limit={"cpu": 20}, revocable_demand={"cpu": 10}), leaf("/B")),
        )
    )
    check(r, "slack_entitlement", {"/A": {"cpu": 35}, "/B": {"cpu": 25}, "/": {"cpu": 60}})
    # non-slack cpu is the entitlement itself: revocable cpu never comes out of it
    check(r, "non_slack_entitlement", {"/A": {"cpu": 20}, "/B": {"cpu": 50}})
    assert r.slack_capacity == {"cpu": 60}


def test_slack_cpu_is_short_water_filled_by_share() -> None:
    r = compute_entitlements(
        TreeInput(
            kinds=("cpu",),
            capacity={"cpu": 100},
            revocable_capacity={"cpu": 30},
            pools=(
                leaf("/A", revocable_demand={"cpu": 100}),
                leaf("/B", revocable_allocation={"cpu": 5}, share=1),
                leaf("/C", revocable_demand={"cpu": 100}, share=2),
            ),
        )
    )
    # level L: A min(100, L), B min(5, L), C min(100, 2L): B 5, then A 25/3, C 50/3
    check(r, "slack_entitlement", {"/A": {"cpu": 25 / 3}, "/B": {"cpu": 5}, "/C": {"cpu": 50 / 3}})


def test_allocation_slack_lends_unused_leaf_reservations() -> None:
    # A reserves 50 cpu, holds 10, waits for 5: lends 35. B wants 20 revocable: 20, then 15 by share: 27.5.
    tree = TreeInput(
        kinds=("cpu",),
        capacity={"cpu": 100},
        allocation_slack=True,
        pools=(
            leaf("/A", reservation={"cpu": 50}, allocation={"cpu": 10}, demand={"cpu": 5}),
            leaf("/B", revocable_demand={"cpu": 20}),
        ),
    )
    r = compute_entitlements(tree)
    assert r.slack_capacity["cpu"] == pytest.approx(35)
    check(r, "slack_entitlement", {"/A": {"cpu": 7.5}, "/B": {"cpu": 27.5}})
    # off by default
    r = compute_entitlements(TreeInput(kinds=tree.kinds, capacity=tree.capacity, pools=tree.pools))
    check(r, "slack_entitlement", {"/A": {"cpu": 0}, "/B": {"cpu": 0}})


@pytest.mark.parametrize(
    ("demand", "revocable", "entitled", "slack", "why"),
    [
        # requirement 40: reserved 40, then (1000 - 40) / 2 by share: 520
        (0, 40, 520, 40, "revocable need binds"),
        # requirement min(100, 500) = 100: 100 + 450
        (0, 500, 550, 100, "slack_limit (20% of 500) binds"),
        # requirement min(600, 580 + 100) = 600: 500 reserved + 100 by share; phase 3 capped at the limit
        (580, 500, 600, 20, "entitlement minus non-revocable requirement binds (600 - 580)"),
        (700, 500, 600, 0, "non-revocable work needs it all: clamped at 0"),
    ],
)
def test_slack_memory(demand: float, revocable: float, entitled: float, slack: float, why: str) -> None:
    r = compute_entitlements(
        TreeInput(
            kinds=CM,
            capacity={"cpu": 100, "memory": 1000},
            pools=(
                leaf(
                    "/A",
                    reservation={"memory": 500},
                    limit={"memory": 600},
                    demand={"memory": demand},
                    revocable_demand={"memory": revocable},
                ),
                leaf("/B", reservation={"memory": 100}),
            ),
        )
    )
    assert r["/A"].entitlement["memory"] == pytest.approx(entitled), why
    assert r["/A"].slack_entitlement["memory"] == pytest.approx(slack), why
    assert r["/A"].non_slack_entitlement["memory"] == pytest.approx(entitled - slack), why


def test_internal_pool_slack_is_the_sum_of_its_childrens() -> None:
    r = compute_entitlements(
        TreeInput(
            kinds=CM,
            capacity={"cpu": 100, "memory": 1000},
            revocable_capacity={"cpu": 10},
            pools=(
                leaf("/o", reservation={"memory": 1000}),
                leaf("/o/a", reservation={"memory": 500}, revocable_demand={"cpu": 4, "memory": 30}),
                leaf("/o/b", reservation={"memory": 500}, revocable_demand={"cpu": 4, "memory": 60}),
            ),
        )
    )
    check(
        r,
        "slack_entitlement",
        {"/o/a": {"memory": 30, "cpu": 5}, "/o/b": {"memory": 60, "cpu": 5}, "/o": {"memory": 90, "cpu": 10}},
    )


def test_without_cpu_there_is_no_slack_cpu() -> None:
    r = compute_entitlements(
        TreeInput(
            kinds=("memory",),
            capacity={"memory": 100},
            revocable_capacity={"cpu": 50},
            pools=(leaf("/A", revocable_demand={"memory": 5}, reservation={"memory": 50}),),
        )
    )
    assert r.slack_capacity == {"memory": 0.0}
    check(r, "slack_entitlement", {"/A": {"memory": 5}})
