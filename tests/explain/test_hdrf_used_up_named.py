"""Under policy `hdrf`, a used-up kind is always said with what uses it up (issue 23), also where
no child of the place where it ran out is entitled to any of it: a leaf's own limit, a tree whose
hosts offer none of it, entitlements from before the demand came."""

from __future__ import annotations

from events import HostRegistered, HostRemoved
from tests.explain.world import gang, pool, world

GPU_JOB = {"cpu": 1.0, "gpu": 1.0}


def test_a_leaf_pools_own_limit_is_named() -> None:
    w = world(pool("/G1", limit={"cpu": 100.0, "gpu": 2.0}), pool("/G2"), resources=("cpu", "gpu"),
              capacity={"cpu": 100.0, "gpu": 8.0}, policy="hdrf", preemption=False)
    w.feed(*(gang(f"a{i}", "/G1", resources=GPU_JOB) for i in range(3)), at=1).tick(at=2)
    assert w.states("a1", "a2") == {"a1": "admitted", "a2": "pending"}
    result = w.explain("a2")
    assert result.summary == ("entitlement: needs cpu 1, pool /G1 has 0 of 2 left; needs gpu 1, pool /G1 has 0 of 2 "
                              "left; gpu is used up: /G1's limit gpu 2 is reached")
    assert result.findings[0].numbers["used_up_gpu"] == {"at": "/G1", "holders": {}}


def test_a_tree_without_the_kind_says_so() -> None:
    """The gpu host leaves after two gangs were admitted: the third waits, and no pool is entitled
    to any gpu."""
    w = world(pool("/G1"), pool("/G2"), resources=("cpu", "gpu"), capacity={"cpu": 100.0, "gpu": 2.0},
              policy="hdrf", preemption=False)
    w.feed(*(gang(f"a{i}", "/G1", resources=GPU_JOB) for i in range(3)), at=1).tick(at=2)
    w.feed(HostRemoved(host="cluster"), HostRegistered(host="cpus", resources={"cpu": 100.0}), at=3).tick(at=4)
    assert w.state_of("a2") == "pending"
    assert w.explain("a2").summary.endswith("; gpu is used up: tree default has no gpu")


def test_entitlements_from_before_the_demand_name_the_next_cycles_holders() -> None:
    """A cycle ran before any gang came: its entitlements give nobody any gpu, so the holders
    are the ones of the computation that found the gpu used up."""
    w = world(pool("/G1"), pool("/G2"), resources=("cpu", "gpu"), capacity={"cpu": 100.0, "gpu": 2.0},
              policy="hdrf", preemption=False)
    w.tick(at=1)
    for i in range(3):
        w.feed(gang(f"a{i}", "/G1", resources=GPU_JOB), gang(f"b{i}", "/G2", resources=GPU_JOB), at=2)
    result = w.explain("a0")
    assert result.summary.endswith("; gpu is used up: /G1 1, /G2 1")
    assert result.findings[0].numbers["used_up_gpu"] == {"at": "/", "holders": {"/G1": 1.0, "/G2": 1.0}}
