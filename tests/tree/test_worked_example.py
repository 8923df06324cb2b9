"""The worked example at the top of services/tree/domain/__init__.py, run for real: each refusal's
rule and exact message must be what the docstring says."""

from __future__ import annotations

import re

import services.tree.domain as domain
from events import PoolConfig, PoolConfigChanged
from services.tree.domain import Accepted, Refused, effective_pool
from tests.tree.builders import delete, given, host, pool, run, tree_configured, upsert

DOC = re.sub(r"\s+", " ", domain.__doc__ or "")


def _example_state() -> domain.TreeState:
    return given(
        tree_configured(resources=["cpu", "memory"]),
        host("h1", cpu=100, memory=1000),
        pool("/org", reservation={"cpu": 60, "memory": 600}, limit={"cpu": 100, "memory": 1000}),
        pool("/org/a", reservation={"cpu": 30, "memory": 300}, limit={"cpu": 50, "memory": 500}),
        pool("/org/b", reservation={"cpu": 20, "memory": 200}, limit={"cpu": 100}),
    )


def test_effective_options_of_org_b() -> None:
    b = effective_pool(_example_state(), "default", "/org/b")
    assert b is not None
    assert b.reservation == {"cpu": 20, "memory": 200} and b.limit == {"cpu": 100, "memory": 1000}
    assert b.share == {"cpu": 1, "memory": 1} and b.slack_limit == 20 and b.mode == "fifo"
    assert b.fifo_sort == ("priority", "arrival") and b.max_running_jobs is None and b.max_jobs is None


def test_the_worked_example() -> None:
    state = _example_state()
    decisions = run(
        state,
        upsert("/org/c", reservation={"cpu": 20}),                                   # 1
        upsert("/org/c", reservation={"cpu": 10.0005}),                              # 2
        upsert("/org/d", reservation={"cpu": 1}, limit={"cpu": 0.5}),                # 3
        upsert("/org/e", limit={"cpu": 200}),                                        # 4
        upsert("/org/b", reservation={"cpu": 20, "memory": 450}),                    # 5
        upsert("/org", reservation={"cpu": 50, "memory": 600}),                      # 6
        upsert("/org", limit={"cpu": 45, "memory": 1000}),                           # 7
        upsert("/org/a", limit={"cpu": 35, "memory": 500}),                          # 8
        upsert("/org/a", limit={"cpu": 35, "memory": 500}),                          # 9
        upsert("/lab", reservation={"cpu": 500}, limit={"cpu": 800}),                # 10
        upsert("/lab/x", limit={"cpu": 700}),                                        # 11
        upsert("/lab", limit={"cpu": 600}),                                          # 12
        delete("/org"),                                                              # 13
        upsert("/org/b", max_running_jobs=10, max_jobs=5),                           # 14
        upsert("/nope/x"),                                                           # 15
    )
    refused = {i: d for i, d in enumerate(decisions, start=1) if isinstance(d, Refused)}
    accepted = {i: d for i, d in enumerate(decisions, start=1) if isinstance(d, Accepted)}
    assert sorted(accepted) == [2, 8, 9, 10, 11]
    rules = {i: d.rule for i, d in refused.items()}
    assert rules == {
        1: "children_reservation_exceeds_parent", 3: "reservation_exceeds_limit", 4: "limit_exceeds_parent",
        5: "children_reservation_exceeds_parent", 6: "children_reservation_exceeds_parent",
        7: "reservation_exceeds_limit", 12: "limit_below_children", 13: "delete_has_children",
        14: "job_limits_order", 15: "parent_missing",
    }
    for i, decision in refused.items():
        assert f"``{decision.message}``" in DOC, f"step {i}: {decision.message!r} is not in the docstring"
        assert f"`{decision.rule}`" in DOC or i == 6
    created = accepted[2].events[0]
    assert isinstance(created, PoolConfigChanged) and created.created and created.path == "/org/c"
    merged = accepted[8].events[0]
    assert isinstance(merged, PoolConfigChanged)
    assert merged.config == PoolConfig(reservation={"cpu": 30, "memory": 300},
                                       limit={"cpu": 35, "memory": 500})
    assert accepted[9].events == ()
