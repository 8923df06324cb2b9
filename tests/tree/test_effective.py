"""Resolved pool options (presets, defaults, inheritance) and tree capacity."""

from __future__ import annotations

import math

from events import PoolConfig
from services.tree.domain import capacity, declared_limits, effective_pool, effective_pools, tree_hosts
from tests.tree.builders import ORG, gang, given, host, pool, tree_configured

PRESETS = {
    "small": PoolConfig(limit={"cpu": 10}, slack_limit=30, max_jobs=7),
    "fair": PoolConfig(limit={"cpu": 20}, mode="fair_share", fifo_sort=["arrival"]),
}


def test_defaults() -> None:
    options = tree_configured(resources=["cpu", "memory"], max_running_jobs_per_pool=8, max_jobs_per_pool=50)
    state = given(options, host("h", cpu=64, memory=256), pool("/p"))
    p = effective_pool(state, "default", "/p")
    assert p is not None
    assert p.reservation == {"cpu": 0, "memory": 0}
    assert p.limit == {"cpu": 64, "memory": 256}  # unbounded: the capacity
    assert p.unbounded == frozenset({"cpu", "memory"})
    assert p.share == {"cpu": 1, "memory": 1}
    assert (p.reservation_type, p.controller_limit, p.slack_limit, p.mode) == ("elastic", None, 20, "fifo")
    assert p.fifo_sort == ("priority", "arrival")
    assert (p.max_running_jobs, p.max_jobs) == (8, 50)
    assert not p.create_ephemeral_subpools and not p.preempt_lower_priority and not p.ephemeral


def test_presets_apply_in_order_and_explicit_wins() -> None:
    state = given(tree_configured(resources=["cpu"], pool_config_presets=PRESETS), host("h", cpu=100),
                  pool("/p", config_presets=["small", "fair"], max_jobs=9),
                  pool("/q", config_presets=["fair", "small"]))
    p = effective_pool(state, "default", "/p")
    q = effective_pool(state, "default", "/q")
    assert p is not None and q is not None
    assert p.limit == {"cpu": 20}   # "fair" comes after "small"
    assert q.limit == {"cpu": 10}   # and here before
    assert p.slack_limit == 30 and p.mode == "fair_share" and p.fifo_sort == ("arrival",)
    assert p.max_jobs == 9 and q.max_jobs == 7  # explicit wins over the preset
    assert p.config_presets == ("small", "fair")


def test_limits_are_inherited_down_the_tree() -> None:
    state = given(tree_configured(resources=["cpu", "memory"]), host("h", cpu=100, memory=1000),
                  pool("/org", limit={"cpu": 50}), pool("/org/a"), pool("/org/a/x", limit={"memory": 70}))
    x = effective_pool(state, "default", "/org/a/x")
    assert x is not None
    assert x.limit == {"cpu": 50, "memory": 70}
    assert x.unbounded == frozenset()
    a = effective_pool(state, "default", "/org/a")
    assert a is not None and a.limit == {"cpu": 50, "memory": 1000} and a.unbounded == frozenset({"memory"})
    tree = state.tree()
    assert declared_limits(tree, "/org/a") == {"cpu": 50, "memory": math.inf}


def test_share_as_number_or_per_kind() -> None:
    state = given(tree_configured(resources=["cpu", "memory"]), pool("/a", share=3),
                  pool("/b", share={"cpu": 2}))
    a = effective_pool(state, "default", "/a")
    b = effective_pool(state, "default", "/b")
    assert a is not None and b is not None
    assert a.share == {"cpu": 3, "memory": 3}
    assert b.share == {"cpu": 2, "memory": 1}


def test_root_is_the_capacity() -> None:
    state = given(*ORG)
    root = effective_pool(state, "default", "/")
    assert root is not None
    assert root.reservation == root.limit == {"cpu": 100, "memory": 1000}
    assert (root.max_running_jobs, root.max_jobs) == (None, None)
    assert list(effective_pools(state, "default")) == ["/", "/org", "/org/a", "/org/b"]
    assert effective_pool(state, "default", "/nope") is None


def test_ephemeral_subpool_takes_its_parents_subpool_config() -> None:
    state = given(tree_configured(resources=["cpu"], max_jobs_per_pool=40), host("h", cpu=100),
                  pool("/users", limit={"cpu": 30}, create_ephemeral_subpools=True,
                       ephemeral_subpool_config=PoolConfig(limit={"cpu": 5}, mode="fair_share", max_jobs=3)),
                  gang("g1", "/users", user="alice"))
    alice = effective_pool(state, "default", "/users/users$alice")
    assert alice is not None and alice.ephemeral
    assert alice.limit == {"cpu": 5} and alice.mode == "fair_share" and alice.max_jobs == 3
    assert not alice.create_ephemeral_subpools


def test_capacity_sums_the_hosts_matching_the_tag_filter() -> None:
    hosts = (host("h1", tags=("gpu", "ssd"), revocable={"cpu": 4}, cpu=32, memory=128, gpu=8),
             host("h2", tags=("ssd",), cpu=16, memory=64, tpu=2),
             host("h3", cpu=8, memory=32))
    state = given(*hosts,
                  tree_configured("gpu", resources=["cpu", "memory", "gpu"], node_tag_filter=["gpu"]),
                  tree_configured("ssd", resources=["cpu", "memory"], node_tag_filter=["ssd"]),
                  tree_configured("both", resources=["cpu"], node_tag_filter=["gpu", "ssd"]),
                  tree_configured("all", resources=["cpu", "memory", "disk"]))
    assert capacity(state, "gpu") == ({"cpu": 32, "memory": 128, "gpu": 8}, {"cpu": 4, "memory": 0, "gpu": 0})
    assert capacity(state, "ssd") == ({"cpu": 48, "memory": 192}, {"cpu": 4, "memory": 0})
    assert capacity(state, "both")[0] == {"cpu": 32}
    # no filter: every host; a kind no host has reads 0; kinds the tree lacks (tpu) are not counted
    assert capacity(state, "all") == ({"cpu": 56, "memory": 224, "disk": 0},
                                      {"cpu": 4, "memory": 0, "disk": 0})
    assert [h.name for h in tree_hosts(state, "ssd")] == ["h1", "h2"]


def test_capacity_follows_hosts_coming_and_going() -> None:
    from events import HostRemoved
    state = given(tree_configured(resources=["cpu"]), host("h1", cpu=10), host("h2", cpu=5))
    assert capacity(state, "default")[0] == {"cpu": 15}
    state.apply(HostRemoved(host="h1"), 10)
    assert capacity(state, "default")[0] == {"cpu": 5}
    p = given(tree_configured(resources=["cpu"]), pool("/p")).tree()
    assert p.kinds == ["cpu"]
