"""One test per validation rule, with real numbers: the rule name, and the numbers in the message."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from events import Event, PoolConfig
from services.tree.domain import RULES, Accepted
from services.tree.domain.decide import ConfigCommand
from services.tree.domain.validation.position import check_no_cycle, check_no_reparent
from tests.tree.builders import (
    ORG,
    add_host,
    configure,
    delete,
    gang,
    given,
    host,
    pool,
    remove_host,
    then_refused,
    tree_configured,
    upsert,
    when,
)

USERS: tuple[Event, ...] = (
    tree_configured(resources=["cpu", "memory"], default_parent_pool="/adhoc"),
    pool("/adhoc", reservation={"cpu": 10}, limit={"cpu": 50}),
    gang("g1", "/scratch", user="alice"),  # -> ephemeral /adhoc/scratch
)
LAB: tuple[Event, ...] = (
    tree_configured(resources=["cpu", "memory"]),
    pool("/lab", reservation={"cpu": 10}, limit={"cpu": 100}),
    pool("/lab/a", limit={"cpu": 80}),
    pool("/lab/b"),
    pool("/lab/b/x", limit={"cpu": 70}),
)


@dataclass(frozen=True)
class Case:
    rule: str
    given: tuple[Event, ...]
    command: ConfigCommand
    fragments: tuple[str, ...]
    field: str | None = None


CASES: list[Case] = [
    Case("stale", ORG, upsert("/org/c", expected_version=4, reservation={"cpu": 5}), ("version 5", "not 4"),
         "expected_version"),
    Case("stale", ORG, delete("/org/a", expected_version=0), ("version 5", "not 0")),
    Case("stale", ORG, configure(expected_version=2, resources=["cpu", "memory"]), ("version 5", "not 2")),
    Case("tree_name", ORG, upsert("/x", tree="bad tree"), ("'bad tree'",), "tree"),
    Case("path_empty", ORG, upsert(""), ("empty",), "path"),
    Case("path_empty", ORG, delete("  "), ("empty",)),
    Case("path_relative", ORG, upsert("org/x"), ("org/x", "begin with /")),
    Case("path_root", ORG, upsert("/"), ("root /", "capacity")),
    Case("path_root", ORG, delete("/"), ("root /", "deleted")),
    Case("path_empty_name", ORG, upsert("/org//x"), ("/org//x",)),
    Case("path_empty_name", ORG, upsert("//"), ("//",)),
    Case("name_reserved", ORG, upsert("/org/a$b"), ("a$b", "ephemeral")),
    Case("name_charset", ORG, upsert("/org/bad name!"), ("bad name!", "' '", "'!'")),
    Case("name_too_long", ORG, upsert("/" + "x" * 101), ("101 characters", "100")),
    Case("parent_missing", ORG, upsert("/nope/x"), ("parent /nope does not exist",)),
    Case("parent_ephemeral", USERS, upsert("/adhoc/scratch/x"), ("/adhoc/scratch", "ephemeral")),
    Case("sibling_clash", ORG, upsert("/ORG"), ("/ORG", "sibling /org")),
    Case("sibling_clash", ORG, upsert("/org/A"), ("/org/A", "sibling /org/a")),
    Case("pool_missing", ORG, delete("/org/zz"), ("pool /org/zz does not exist",)),
    Case("unknown_kind", ORG, upsert("/org/h", reservation={"tpu": 1}), ("tpu", "cpu, memory"),
         "config.reservation.tpu"),
    Case("unknown_kind", ORG, upsert("/org/h", share={"gpu": 2}), ("gpu",), "config.share.gpu"),
    Case("unknown_kind", ORG, configure(resources=["cpu"]), ("pool /org", "memory", "kinds: cpu"), "options"),
    Case("duplicate_kind", ORG, upsert("/org/h", limit={"cpu": 10, "CPU": 20}), ("cpu", "`CPU`")),
    Case("duplicate_kind", ORG, configure(resources=["cpu", "memory", "cpu"]), ("cpu",), "options.resources"),
    Case("kind_name", ORG, configure(resources=["cpu", "memory", "GPU"]), ("'GPU'",)),
    Case("kinds_empty", (), configure(resources=[]), ("at least one",)),
    Case("negative_value", ORG, upsert("/org/i", reservation={"cpu": -1}), ("resource cpu", "-1"),
         "config.reservation.cpu"),
    Case("negative_value", ORG, upsert("/org/i", limit={"memory": -2.5}), ("memory", "-2.5")),
    Case("negative_value", ORG, add_host("h2", cpu=-4), ("cpu", "-4"), "resources.cpu"),
    Case("share_not_positive", ORG, upsert("/org/s", share=0), ("share 0",)),
    Case("share_not_positive", ORG, upsert("/org/s", share={"cpu": -1}), ("cpu", "share -1")),
    Case("percent_range", ORG, upsert("/org/f", controller_limit=150), ("controller_limit 150", "0..100")),
    Case("percent_range", ORG, upsert("/org/f", slack_limit=-5), ("slack_limit -5", "0..100")),
    Case("job_limit_negative", ORG, upsert("/org/g", max_jobs=-1), ("max_jobs -1",)),
    Case("job_limit_negative", ORG, upsert("/org/g", max_running_jobs=-3), ("max_running_jobs -3",)),
    Case("job_limits_order", ORG, upsert("/org/g", max_running_jobs=10, max_jobs=5),
         ("max_running_jobs 10", "max_jobs 5")),
    Case("job_limits_order", (tree_configured(max_jobs_per_pool=5),), upsert("/g", max_running_jobs=8),
         ("max_running_jobs 8", "max_jobs 5", "max_jobs_per_pool")),
    Case("job_limits_order", (), configure(max_running_jobs_per_pool=9, max_jobs_per_pool=4),
         ("max_running_jobs 9", "max_jobs 4")),
    Case("job_limits_order", (pool("/g", max_running_jobs=7),), configure(max_jobs_per_pool=6),
         ("pool /g", "max_running_jobs 7", "max_jobs 6")),
    Case("unknown_preset", ORG, upsert("/org/p", config_presets=["gpu-heavy"]),
         ("gpu-heavy", "presets: none")),
    Case("unknown_preset", (tree_configured(pool_config_presets={"small": PoolConfig(limit={"cpu": 5})}),
                            pool("/p", config_presets=["small"])),
         configure(), ("pool /p", "small")),
    Case("preset_nested", (), configure(pool_config_presets={"a": PoolConfig(config_presets=["b"]),
                                                             "b": PoolConfig()}), ("`a`", "b")),
    Case("ephemeral_reservation", ORG,
         upsert("/users", create_ephemeral_subpools=True,
                ephemeral_subpool_config=PoolConfig(reservation={"cpu": 5})), ("cpu 5",)),
    Case("reservation_exceeds_limit", ORG, upsert("/org/d", reservation={"cpu": 10}, limit={"cpu": 5}),
         ("resource cpu, reservation 10 exceeds limit 5",), "config.reservation.cpu"),
    Case("reservation_exceeds_limit", ORG, upsert("/org/d", reservation={"memory": 1200}),
         ("resource memory, reservation 1200 exceeds limit 1000 (inherited from /org)",)),
    Case("reservation_exceeds_limit", ORG, upsert("/org", limit={"cpu": 45, "memory": 1000}),
         ("resource cpu, reservation 60 exceeds limit 45",)),
    Case("limit_exceeds_parent", ORG, upsert("/org/e", limit={"cpu": 200}),
         ("resource cpu, limit 200 exceeds parent /org limit 100",), "config.limit.cpu"),
    Case("limit_exceeds_parent", LAB, upsert("/lab/b/y", limit={"cpu": 100.5}),
         ("limit 100.5 exceeds parent /lab/b limit 100 (inherited from /lab)",)),
    Case("limit_exceeds_parent", ORG,
         upsert("/org/u", create_ephemeral_subpools=True, limit={"cpu": 40},
                ephemeral_subpool_config=PoolConfig(limit={"cpu": 60})),
         ("ephemeral_subpool_config limit 60 exceeds limit 40",)),
    Case("kind_missing_in_parent", LAB, upsert("/lab/m", limit={"memory": 10}),
         ("resource memory is used by /lab/m", "parent /lab")),
    Case("kind_missing_in_parent", LAB, upsert("/lab", replace=True, reservation={"memory": 5}),
         ("resource cpu is used by /lab/a", "parent /lab")),
    Case("children_reservation_exceeds_parent", ORG, upsert("/org/c", reservation={"cpu": 20}),
         ("Aggregated child reservation 70 of kind `cpu` exceed parent `/org` reservation 60",)),
    Case("children_reservation_exceeds_parent", ORG, upsert("/org", reservation={"cpu": 40, "memory": 600}),
         ("Aggregated child reservation 50 of kind `cpu` exceed parent `/org` reservation 40",)),
    Case("children_reservation_exceeds_parent", ORG, upsert("/org/b", reservation={"cpu": 20, "memory": 301}),
         ("Aggregated child reservation 601 of kind `memory` exceed parent `/org` reservation 600",)),
    Case("limit_below_children", LAB, upsert("/lab", limit={"cpu": 75}),
         ("resource cpu, limit 75 of /lab is below limit 80 of child /lab/a",), "config.limit.cpu"),
    Case("limit_below_children", LAB, upsert("/lab", limit={"cpu": 60}, reservation={"cpu": 0}),
         ("limit 60 of /lab is below limit 80 of child /lab/a",)),
    Case("delete_has_children", ORG, delete("/org"), ("pool /org has 2 child pool(s) (/org/a, /org/b)",)),
    Case("delete_has_gangs", (*ORG, gang("g1", "/org/a"), gang("g2", "/org/a")), delete("/org/a"),
         ("pool /org/a has 2 unfinished gang(s) (g1, g2)",)),
    Case("host_name", ORG, add_host("bad host", cpu=1), ("'bad host'",), "host"),
    Case("host_missing", (host("h1", cpu=1),), remove_host("h9"), ("host h9 is not registered", "h1")),
]


@pytest.mark.parametrize("case", CASES, ids=[f"{c.rule}-{i}" for i, c in enumerate(CASES)])
def test_rule(case: Case) -> None:
    refused = then_refused(when(given(*case.given), case.command), case.rule, *case.fragments)
    if case.field is not None:
        assert refused.field == case.field


def test_descendant_limit_under_an_inherited_limit() -> None:
    # /lab/b sets no cpu limit: it inherits /lab's, which /lab/b/x (70) must stay within.
    lab = [e for e in LAB if getattr(e, "path", None) != "/lab/a"]
    refused = then_refused(when(given(*lab), upsert("/lab", limit={"cpu": 65})), "limit_below_children")
    assert "limit 65 of /lab is below limit 70 of descendant /lab/b/x" in refused.message


def test_reparent_guard() -> None:
    tree = given(*ORG).tree()
    refusal = check_no_reparent(tree, "/org/a", "/elsewhere")
    assert refusal is not None and refusal.rule == "reparent"
    assert "/org/a is under /org" in refusal.message and "/elsewhere" in refusal.message
    assert check_no_reparent(tree, "/org/a", "/org") is None


def test_cycle_guard() -> None:
    refusal = check_no_cycle("/org/a", "/org/a/x")
    assert refusal is not None and refusal.rule == "cycle"
    assert "/org/a" in refusal.message
    assert check_no_cycle("/org/a", "/org") is None


def test_refusal_changes_nothing() -> None:
    state = given(*ORG)
    before = dict(state.tree().pools)
    decision = when(state, upsert("/org/c", reservation={"cpu": 20}))
    then_refused(decision, "children_reservation_exceeds_parent")
    assert state.tree().pools == before and state.tree().version == 5


def test_tolerance_both_ways() -> None:
    # 30 + 20 + 10.0008 = 60.0008: over 60 by less than 0.0009, so within.
    assert isinstance(when(given(*ORG), upsert("/org/c", reservation={"cpu": 10.0008})), Accepted)
    then_refused(when(given(*ORG), upsert("/org/c", reservation={"cpu": 10.001})),
                 "children_reservation_exceeds_parent", "60.001", "reservation 60")


def test_top_level_pools_are_held_to_no_parent() -> None:
    # capacity is cpu 100, but a top-level pool may reserve and limit more.
    big = upsert("/big", reservation={"cpu": 500}, limit={"cpu": 800})
    assert isinstance(when(given(*ORG), big), Accepted)
    # a top-level pool may name a kind no one else does
    assert isinstance(when(given(*ORG), upsert("/mem", limit={"memory": 5})), Accepted)


def test_every_rule_is_tested() -> None:
    covered = {c.rule for c in CASES} | {"reparent", "cycle"}
    assert covered == set(RULES)


def test_a_grouping_parent_passes_every_kind() -> None:
    # /lab/b declares nothing itself, but inherits /lab's cpu limit: it has cpu only
    then_refused(when(given(*LAB), upsert("/lab/b/m", limit={"memory": 1})), "kind_missing_in_parent",
                 "parent /lab/b", "it has: cpu")
    # /g declares nothing and inherits nothing: its children may name any kind
    grouping = given(tree_configured(resources=["cpu", "memory"]), pool("/g"))
    assert isinstance(when(grouping, upsert("/g/x", limit={"memory": 1, "cpu": 2})), Accepted)
