"""Folding the log into a TreeState: trees, pools, hosts, unfinished gangs, ephemeral pools."""

from __future__ import annotations

from events import ClockTicked, InputRejected, PoolConfig
from services.tree.domain import DEFAULT_TREE, TreeState, place_gang
from tests.tree.builders import (
    ORG,
    delete,
    finished,
    gang,
    given,
    host,
    pool,
    pool_deleted,
    then_accepted,
    then_refused,
    tree_configured,
    upsert,
    when,
)


def test_a_fresh_state_has_the_default_tree_with_its_root() -> None:
    state = TreeState()
    tree = state.tree()
    assert tree.name == DEFAULT_TREE and tree.version == 0 and not tree.configured
    assert list(tree.pools) == ["/"] and tree.root.is_root
    assert state.tree_names() == ["default"]
    assert tree.options.resources == ["cpu", "memory", "disk", "gpu"]


def test_a_pool_for_a_tree_never_configured_gets_default_options() -> None:
    state = given(pool("/a", tree="batch", reservation={"cpu": 1}))
    tree = state.tree("batch")
    assert tree.pools["/a"].config.reservation == {"cpu": 1}
    assert not tree.configured and tree.version == 1
    assert tree.options.policy == "per_resource"
    assert state.tree_names() == ["batch", "default"]


def test_pools_link_parents_and_children() -> None:
    tree = given(*ORG).tree()
    assert tree.pools["/"].children == frozenset({"/org"})
    assert tree.pools["/org"].children == frozenset({"/org/a", "/org/b"})
    assert tree.pools["/org/a"].parent == "/org" and tree.pools["/org/a"].is_leaf
    assert [p.path for p in tree.descendants("/")] == ["/org", "/org/a", "/org/b"]


def test_a_config_change_replaces_the_whole_config() -> None:
    tree = given(*ORG, pool("/org/a", limit={"cpu": 10})).tree()
    assert tree.pools["/org/a"].config == PoolConfig(limit={"cpu": 10})
    assert tree.version == 6


def test_delete_unlinks() -> None:
    tree = given(*ORG, pool_deleted("/org/b")).tree()
    assert "/org/b" not in tree.pools and tree.pools["/org"].children == frozenset({"/org/a"})
    assert tree.version == 6


def test_tree_configured_replaces_options_and_sets_version() -> None:
    state = given(*ORG, tree_configured(resources=["cpu", "memory"], max_jobs_per_pool=9))
    tree = state.tree()
    assert tree.configured and tree.version == 6 and tree.options.max_jobs_per_pool == 9
    assert "/org/a" in tree.pools


def test_hosts_are_registered_replaced_and_removed() -> None:
    from events import HostRemoved
    state = given(host("h1", cpu=4), host("h2", cpu=8), host("h1", cpu=16, tags=("gpu",)),
                  HostRemoved(host="h2"))
    assert list(state.hosts) == ["h1"]
    assert state.hosts["h1"].resources == {"cpu": 16} and state.hosts["h1"].tags == frozenset({"gpu"})
    assert state.tree().version == 0  # hosts are not tree config


def test_irrelevant_events_are_ignored() -> None:
    state = given(*ORG)
    state.apply(ClockTicked(tree="default"), 6)
    state.apply(InputRejected(ref="/x", input_type="PoolUpsert", reason="r", rule="r"), 7)
    assert state.tree().version == 5 and state.last_seq == 7


def test_unfinished_gangs_are_counted_once_and_forgotten_when_finished() -> None:
    state = given(*ORG, gang("g1", "/org/a"), gang("g1", "/org/a"), gang("g2", "/org/a"))
    tree = state.tree()
    assert tree.gangs_in("/org/a") == frozenset({"g1", "g2"})
    state.apply(finished("g1", "/org/a"), 20)
    assert tree.gangs_in("/org/a") == frozenset({"g2"})
    # a used gang id stays used: enqueueing it again counts nothing
    state.apply(gang("g1", "/org/a"), 21)
    assert tree.gangs_in("/org/a") == frozenset({"g2"})


def test_a_gang_for_a_missing_pool_is_counted_nowhere() -> None:
    state = given(*ORG, gang("g1", "/org/zzz"))
    tree = state.tree()
    assert "g1" in tree.seen_gangs and "g1" not in tree.unfinished
    assert "/org/zzz" not in tree.pools
    state.apply(finished("g1", "/org/zzz"), 10)  # harmless


def test_ephemeral_user_subpools() -> None:
    state = given(tree_configured(resources=["cpu"]),
                  pool("/users", limit={"cpu": 20}, create_ephemeral_subpools=True,
                       ephemeral_subpool_config=PoolConfig(limit={"cpu": 5}, mode="fair_share")),
                  gang("g1", "/users", user="alice"), gang("g2", "/users", user="alice"),
                  gang("g3", "/users", user="bob"))
    tree = state.tree()
    alice = tree.pools["/users/users$alice"]
    assert alice.ephemeral and tree.gangs_in(alice.path) == frozenset({"g1", "g2"})
    assert tree.gangs_in("/users/users$bob") == frozenset({"g3"})
    # the parent now has children: it cannot be deleted
    then_refused(when(state, delete("/users")), "delete_has_children", "users$alice", "users$bob")
    state.apply(finished("g1"), 10)
    assert "/users/users$alice" in tree.pools
    state.apply(finished("g2"), 11)
    assert "/users/users$alice" not in tree.pools  # removed with its last unfinished gang
    state.apply(finished("g3"), 12)
    assert tree.pools["/users"].children == frozenset()
    then_accepted(when(state, delete("/users")), events=1)


def test_ephemeral_pools_under_the_default_parent() -> None:
    options = tree_configured(resources=["cpu"], default_parent_pool="/adhoc", max_ephemeral_pools_per_user=1)
    state = given(options,
                  pool("/adhoc", limit={"cpu": 10}),
                  gang("g1", "/scratch", user="alice"),
                  gang("g2", "/scratch", user="alice"),   # same pool: fine
                  gang("g3", "/other", user="alice"),     # a second pool for alice: over the limit
                  gang("g4", "/other", user="bob"))
    tree = state.tree()
    assert tree.pools["/adhoc/scratch"].ephemeral
    assert tree.gangs_in("/adhoc/scratch") == frozenset({"g1", "g2"})
    assert tree.gangs_in("/adhoc/other") == frozenset({"g4"})
    assert "g3" not in tree.unfinished
    refused = place_gang(tree, "/third", "alice")
    assert refused.path is None and refused.reason is not None and "at most 1" in refused.reason
    # bob may join alice's /adhoc/scratch only as one of his own: he has /adhoc/other already
    assert place_gang(tree, "/scratch", "bob").path is None
    assert place_gang(tree, "/scratch", "carol").path == "/adhoc/scratch"
    # a deeper missing path names a place that does not exist
    assert place_gang(tree, "/a/b", "carol").path is None


def test_placement_without_default_parent() -> None:
    tree = given(*ORG).tree()
    assert place_gang(tree, "/org/a", "u").path == "/org/a"
    assert place_gang(tree, "/org/a/", "u").path == "/org/a"
    missing = place_gang(tree, "/org/zzz", "u")
    assert missing.path is None and missing.reason == "pool /org/zzz does not exist"
    parentless = given(tree_configured(default_parent_pool="/adhoc")).tree()
    reason = place_gang(parentless, "/x", "u").reason
    assert reason is not None and "/adhoc" in reason


def test_fold_then_decide() -> None:
    state = given(*ORG, gang("g1", "/org/b"), pool("/org/c", reservation={"cpu": 10}), finished("g1"))
    # 30 + 20 + 10 = 60 taken: nothing more fits under /org
    then_refused(when(state, upsert("/org/d", reservation={"cpu": 1})), "children_reservation_exceeds_parent",
                 "Aggregated child reservation 61 of kind `cpu`")
    then_accepted(when(state, upsert("/org/d", reservation={"memory": 100})), events=1)
    then_accepted(when(state, delete("/org/b")), events=1)
