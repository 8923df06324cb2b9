"""The worked example of the package docstring, number for number."""

from __future__ import annotations

from services.entitlement import TreeInput, compute_entitlements
from tests.entitlement.helpers import check, leaf


def _tree(adhoc_waits: float) -> TreeInput:
    return TreeInput(
        kinds=("cpu", "memory"),
        capacity={"cpu": 100, "memory": 1000},
        revocable_capacity={"cpu": 40},
        pools=(
            leaf("/project-root", reservation={"cpu": 100, "memory": 1000}, limit={"cpu": 100, "memory": 1000}),
            leaf(
                "/project-root/adhoc",
                reservation={"cpu": 80, "memory": 500},
                limit={"cpu": 100, "memory": 1000},
                allocation={"cpu": 30, "memory": 200},
                demand={"cpu": adhoc_waits},
            ),
            leaf("/project-root/batch", share=10, limit={"cpu": 100, "memory": 1000}, allocation={"cpu": 20}),
            leaf(
                "/project-root/backup",
                reservation={"cpu": 20, "memory": 500},
                limit={"cpu": 100, "memory": 1000},
                allocation={"cpu": 20},
                revocable_demand={"cpu": 10, "memory": 150},
            ),
        ),
    )


def test_worked_example() -> None:
    r = compute_entitlements(_tree(50))
    assert r["/project-root/adhoc"].requirement == {"cpu": 80, "memory": 200}
    assert r["/project-root/backup"].requirement == {"cpu": 20, "memory": 100}
    assert r["/project-root"].requirement == {"cpu": 100, "memory": 300}
    check(
        r,
        "entitlement",
        {
            "/project-root": {"cpu": 100, "memory": 1000},
            "/project-root/adhoc": {"cpu": 80, "memory": 200 + 700 / 12},
            "/project-root/batch": {"cpu": 0, "memory": 7000 / 12},
            "/project-root/backup": {"cpu": 20, "memory": 100 + 700 / 12},
        },
    )
    check(
        r,
        "slack_entitlement",
        {
            "/project-root": {"cpu": 40},
            "/project-root/adhoc": {"cpu": 2.5, "memory": 0},
            "/project-root/batch": {"cpu": 25},
            "/project-root/backup": {"cpu": 12.5, "memory": 100},
        },
    )
    check(r, "non_slack_entitlement", {"/project-root/backup": {"cpu": 20, "memory": 700 / 12}})
    assert r["/project-root/batch"].usage_share == 0.2
    assert r["/project-root/adhoc"].fair_share == 0.8


def test_worked_example_when_adhoc_waits_for_nothing() -> None:
    r = compute_entitlements(_tree(0))
    check(
        r,
        "entitlement",
        {
            "/project-root/adhoc": {"cpu": 32.5},
            "/project-root/batch": {"cpu": 45},
            "/project-root/backup": {"cpu": 22.5},
        },
    )
