"""decide(): merge and replace, idempotence, optimistic concurrency, tree and host commands."""

from __future__ import annotations

from events import HostRegistered, HostRemoved, PoolConfig, PoolConfigChanged, PoolDeleted, TreeConfigured
from tests.tree.builders import (
    ORG,
    add_host,
    applied,
    configure,
    delete,
    finished,
    gang,
    given,
    pool,
    remove_host,
    then_accepted,
    then_refused,
    tree_configured,
    upsert,
    when,
)


def test_create_carries_the_config_and_created() -> None:
    accepted = then_accepted(when(given(*ORG), upsert("/org/c", reservation={"cpu": 5})), events=1)
    event = accepted.events[0]
    assert isinstance(event, PoolConfigChanged)
    assert (event.tree, event.path, event.created) == ("default", "/org/c", True)
    assert event.config == PoolConfig(reservation={"cpu": 5})


def test_merge_replaces_named_options_and_keeps_the_others() -> None:
    accepted = then_accepted(when(given(*ORG), upsert("/org/a", reservation={"cpu": 25}, slack_limit=30)))
    (event,) = accepted.events
    assert isinstance(event, PoolConfigChanged) and not event.created
    # the reservation map is replaced whole (memory gone), the limit is kept, slack_limit added
    assert event.config == PoolConfig(reservation={"cpu": 25}, limit={"cpu": 50, "memory": 500},
                                      slack_limit=30)


def test_replace_makes_the_command_the_whole_config() -> None:
    accepted = then_accepted(when(given(*ORG), upsert("/org/a", replace=True, reservation={"cpu": 25})))
    (event,) = accepted.events
    assert isinstance(event, PoolConfigChanged)
    assert event.config == PoolConfig(reservation={"cpu": 25})


def test_merged_config_is_what_gets_validated() -> None:
    # /org/a keeps its limit cpu 50, so a reservation of 55 is over it even though the command names no limit
    then_refused(when(given(*ORG), upsert("/org/a", reservation={"cpu": 55})), "reservation_exceeds_limit",
                 "reservation 55 exceeds limit 50")


def test_noop_upsert_is_accepted_with_no_event() -> None:
    state = given(*ORG)
    then_accepted(when(state, upsert("/org/a", reservation={"cpu": 30, "memory": 300})), events=0)
    then_accepted(when(state, upsert("/org/a")), events=0)
    same = upsert("/org/a", replace=True, reservation={"cpu": 30, "memory": 300},
                  limit={"cpu": 50, "memory": 500})
    then_accepted(when(state, same), events=0)


def test_trailing_slash_is_normalised() -> None:
    accepted = then_accepted(when(given(*ORG), upsert("/org/c/", reservation={"cpu": 5})))
    assert accepted.ref == "/org/c"
    assert isinstance(accepted.events[0], PoolConfigChanged) and accepted.events[0].path == "/org/c"
    assert then_accepted(when(given(*ORG), delete("/org/a/"))).ref == "/org/a"


def test_expected_version_matching_is_accepted_and_checked_first() -> None:
    state = given(*ORG)
    then_accepted(when(state, upsert("/org/c", expected_version=5, reservation={"cpu": 5})), events=1)
    # stale wins over the rule the command also breaks
    then_refused(when(state, upsert("/org/c", expected_version=1, reservation={"cpu": 500})), "stale")


def test_version_moves_with_config_events_only() -> None:
    state = given(*ORG)
    assert state.tree().version == 5
    applied(state, when(state, add_host("h2", cpu=5)))
    assert state.tree().version == 5
    applied(state, when(state, upsert("/org/c")))
    assert state.tree().version == 7


def test_delete() -> None:
    state = given(*ORG)
    accepted = then_accepted(when(state, delete("/org/a")), events=1)
    assert accepted.events[0] == PoolDeleted(tree="default", path="/org/a")
    applied(state, accepted)
    assert "/org/a" not in state.tree().pools
    assert state.tree().pools["/org"].children == frozenset({"/org/b"})


def test_delete_after_the_gangs_finish() -> None:
    state = given(*ORG, gang("g1", "/org/a"))
    then_refused(when(state, delete("/org/a")), "delete_has_gangs", "g1")
    state.apply(finished("g1", "/org/a"), 10)
    then_accepted(when(state, delete("/org/a")), events=1)


def test_configure_a_fresh_tree() -> None:
    accepted = then_accepted(when(given(), configure(resources=["cpu"])), events=1)
    expected = TreeConfigured(tree="default", options=tree_configured(resources=["cpu"]).options)
    assert accepted.events[0] == expected
    # the implicit default tree: configuring it with the defaults still records it, once
    state = given()
    applied(state, then_accepted(when(state, configure()), events=1))
    then_accepted(when(state, configure()), events=0)


def test_configure_keeps_pools_valid() -> None:
    # dropping a kind a pool uses
    then_refused(when(given(*ORG), configure(resources=["cpu"])), "unknown_kind", "pool /org:", "memory")
    # per-pool default max_jobs under a pool's max_running_jobs
    state = given(*ORG, pool("/org/a", reservation={"cpu": 30}, limit={"cpu": 50}, max_running_jobs=8))
    then_refused(when(state, configure(resources=["cpu", "memory"], max_jobs_per_pool=5)), "job_limits_order",
                 "pool /org/a", "max_running_jobs 8", "max_jobs 5")
    then_accepted(when(state, configure(resources=["cpu", "memory"], max_jobs_per_pool=8)), events=1)


def test_configure_presets_that_break_a_pool() -> None:
    presets = {"small": PoolConfig(limit={"cpu": 50})}
    state = given(tree_configured(resources=["cpu"], pool_config_presets=presets),
                  pool("/org", reservation={"cpu": 40}, config_presets=["small"]))
    smaller = {"small": PoolConfig(limit={"cpu": 30})}
    then_refused(when(state, configure(resources=["cpu"], pool_config_presets=smaller)),
                 "reservation_exceeds_limit", "pool /org", "reservation 40 exceeds limit 30")


def test_default_parent_pool_must_be_a_valid_path() -> None:
    refused = then_refused(when(given(), configure(default_parent_pool="adhoc")), "path_relative",
                           "default_parent_pool")
    assert refused.field == "options.default_parent_pool"
    then_accepted(when(given(), configure(default_parent_pool="/")), events=1)
    then_accepted(when(given(), configure(default_parent_pool="/adhoc/")), events=1)


def test_preset_with_unknown_kind_is_refused() -> None:
    refused = then_refused(when(given(), configure(resources=["cpu"], pool_config_presets={
        "p": PoolConfig(limit={"gpu": 1})})), "unknown_kind", "gpu")
    assert refused.field == "options.pool_config_presets.p.limit.gpu"


def test_hosts() -> None:
    state = given()
    command = add_host("h1", tags=("gpu",), revocable={"cpu": 4}, cpu=32)
    accepted = then_accepted(when(state, command), events=1)
    assert accepted.events[0] == HostRegistered(host="h1", resources={"cpu": 32}, revocable={"cpu": 4},
                                                tags=["gpu"])
    applied(state, accepted)
    then_accepted(when(state, command), events=0)
    then_accepted(when(state, add_host("h1", cpu=64)), events=1)  # changed
    removed = then_accepted(when(state, remove_host("h1")), events=1)
    assert removed.events[0] == HostRemoved(host="h1")
    applied(state, removed)
    then_refused(when(state, remove_host("h1")), "host_missing", "h1", "none")


def test_refused_carries_tree_ref_and_error() -> None:
    refused = then_refused(when(given(*ORG), upsert("/org/e", limit={"cpu": 200})), "limit_exceeds_parent")
    assert (refused.ref, refused.tree, refused.field) == ("/org/e", "default", "config.limit.cpu")
    error = refused.error()
    assert (error.rule, error.message) == (refused.rule, refused.message)
    host_refusal = then_refused(when(given(), add_host("h 1", cpu=1)), "host_name")
    assert host_refusal.tree is None and host_refusal.ref == "h 1"


def test_upsert_of_an_ephemeral_pool_makes_it_configured() -> None:
    state = given(tree_configured(default_parent_pool="/adhoc"), pool("/adhoc"),
                  gang("g1", "/scratch", "alice"))
    assert state.tree().pools["/adhoc/scratch"].ephemeral
    accepted = then_accepted(when(state, upsert("/adhoc/scratch", limit={"cpu": 4})), events=1)
    event = accepted.events[0]
    assert isinstance(event, PoolConfigChanged) and event.created
    applied(state, accepted)
    scratch = state.tree().pools["/adhoc/scratch"]
    assert not scratch.ephemeral and scratch.config.limit == {"cpu": 4}
    state.apply(finished("g1"), 100)
    assert "/adhoc/scratch" in state.tree().pools  # a configured pool stays


def test_other_trees_are_independent() -> None:
    state = given(*ORG, tree_configured("gpu", resources=["gpu"]), pool("/org", tree="gpu"))
    then_accepted(when(state, upsert("/org/x", tree="gpu", reservation={"gpu": 0})), events=1)
    then_refused(when(state, upsert("/org/x", tree="gpu", reservation={"cpu": 1})), "unknown_kind")
    then_refused(when(state, upsert("/org/c", reservation={"cpu": 20})),
                 "children_reservation_exceeds_parent")
    assert state.tree("gpu").version == 7 and state.tree("default").version == 5
