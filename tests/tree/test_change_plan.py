"""`plan_changes`: the commands from a live configuration to a target one, in an order the tree
service's `decide` accepts one by one, or every rule the target breaks (pure, no services)."""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest

from events import PoolConfig, TreeOptions
from events.commands import PoolDelete, PoolUpsert
from services.tree.domain import TreeState, decide
from services.tree.domain.change_plan import Plan, plan_changes, reaches
from services.tree.domain.cluster import ClusterConfig, config_of, state_of_views
from services.tree.domain.decide import Accepted
from services.tree.domain.tree import Host
from services.tree.domain.views import list_hosts, list_pools, list_trees
from tests.tree.builders import gang, host, pool, tree_configured

CPU = TreeOptions(resources=["cpu"])


def _live(*events: Any) -> TreeState:
    return TreeState.of([tree_configured(resources=["cpu"]), host("h1", cpu=100), *events])


def _target(pools: dict[str, dict[str, Any]], options: TreeOptions = CPU,
            hosts: dict[str, Host] | None = None) -> ClusterConfig:
    return ClusterConfig({"default": options}, hosts,
                         {("default", p): PoolConfig(**c) for p, c in pools.items()})


def _run(live: TreeState, plan: Plan) -> TreeState:
    """Send the plan's commands to `decide` on the live state, folding each: every one accepted."""
    for command in plan.commands:
        decision = decide(live, command)
        assert isinstance(decision, Accepted), (command, decision)
        assert decision.events, command  # a command that changes nothing is not planned
        for event in decision.events:
            live.apply(event, live.last_seq + 1)
    return live


def _applied(live: TreeState, target: ClusterConfig, prune: bool = False) -> Plan:
    plan = plan_changes(live, target, prune)
    assert plan.ok, plan.violations
    before = copy.deepcopy(live)
    done = _run(live, plan)
    assert reaches(done, target, prune, before), plan.commands
    again = plan_changes(done, target, prune)
    assert again.ok and again.commands == () and again.changes == ()  # the same target twice: nothing
    return plan


def _paths(plan: Plan) -> list[tuple[str, str]]:
    out = []
    for c in plan.commands:
        if isinstance(c, PoolUpsert | PoolDelete):
            out.append((type(c).__name__, c.path))
        else:
            out.append((type(c).__name__, getattr(c, "tree", getattr(c, "host", ""))))
    return out


def test_nested_pools_are_created_parents_first() -> None:
    target = _target({"/a/b": {"reservation": {"cpu": 10}}, "/a": {"reservation": {"cpu": 20}, "limit": {"cpu": 50}},
                      "/a/b/c": {"limit": {"cpu": 5}}})
    plan = _applied(_live(), target)
    assert _paths(plan) == [("PoolUpsert", "/a"), ("PoolUpsert", "/a/b"), ("PoolUpsert", "/a/b/c")]
    assert [(c.action, c.ref) for c in plan.changes] == [("created", "/a/b"), ("created", "/a"),
                                                          ("created", "/a/b/c")]


def test_lowering_a_reservation_lowers_the_childrens_first_and_raising_a_limit_raises_the_parents_first() -> None:
    live = _live(pool("/p", reservation={"cpu": 40}, limit={"cpu": 50}),
                 pool("/p/c", reservation={"cpu": 30}, limit={"cpu": 40}))
    lower = _applied(live, _target({"/p": {"reservation": {"cpu": 20}, "limit": {"cpu": 50}},
                                    "/p/c": {"reservation": {"cpu": 10}, "limit": {"cpu": 40}}}))
    assert _paths(lower) == [("PoolUpsert", "/p/c"), ("PoolUpsert", "/p")]
    assert [(c.ref, [f.field for f in c.fields]) for c in lower.changes] == [("/p", ["reservation"]),
                                                                             ("/p/c", ["reservation"])]
    raise_ = _applied(live, _target({"/p": {"reservation": {"cpu": 20}, "limit": {"cpu": 90}},
                                     "/p/c": {"reservation": {"cpu": 10}, "limit": {"cpu": 80}}}))
    assert _paths(raise_) == [("PoolUpsert", "/p"), ("PoolUpsert", "/p/c")]
    lower_limits = _applied(live, _target({"/p": {"reservation": {"cpu": 20}, "limit": {"cpu": 30}},
                                           "/p/c": {"reservation": {"cpu": 10}, "limit": {"cpu": 25}}}))
    assert _paths(lower_limits) == [("PoolUpsert", "/p/c"), ("PoolUpsert", "/p")]


def test_a_pool_and_its_parent_waiting_for_each_other_are_split_into_single_options() -> None:
    live = _live(pool("/p", reservation={"cpu": 10}, limit={"cpu": 100}),
                 pool("/p/c", reservation={"cpu": 8}, limit={"cpu": 50}))
    plan = _applied(live, _target({"/p": {"reservation": {"cpu": 4}, "limit": {"cpu": 200}},
                                   "/p/c": {"reservation": {"cpu": 3}, "limit": {"cpu": 150}}}))
    assert len(plan.commands) >= 3
    assert len(plan.changes) == 2


def test_siblings_trade_reservation_the_one_giving_first() -> None:
    live = _live(pool("/p", reservation={"cpu": 10}), pool("/p/a", reservation={"cpu": 5}),
                 pool("/p/b", reservation={"cpu": 5}))
    plan = _applied(live, _target({"/p": {"reservation": {"cpu": 10}}, "/p/a": {"reservation": {"cpu": 8}},
                                   "/p/b": {"reservation": {"cpu": 2}}}))
    assert _paths(plan) == [("PoolUpsert", "/p/b"), ("PoolUpsert", "/p/a")]


def test_prune_deletes_children_first_and_without_prune_lists_what_stays() -> None:
    events = (pool("/x", limit={"cpu": 10}), pool("/x/y"), pool("/x/y/z"), pool("/k"))
    target = _target({"/k": {}})
    kept = _applied(_live(*events), target)
    assert kept.commands == () and [c.ref for c in kept.left] == ["/x", "/x/y", "/x/y/z"]
    pruned = _applied(_live(*events), target, prune=True)
    assert _paths(pruned) == [("PoolDelete", "/x/y/z"), ("PoolDelete", "/x/y"), ("PoolDelete", "/x")]
    assert [(c.action, c.ref) for c in pruned.changes] == [("deleted", "/x"), ("deleted", "/x/y"),
                                                            ("deleted", "/x/y/z")]


def test_a_kind_is_added_to_the_tree_before_a_pool_uses_it_and_dropped_after_the_last_use() -> None:
    live = _live(pool("/a", reservation={"cpu": 1}))
    plan = _applied(live, _target({"/a": {"reservation": {"cpu": 1, "gpu": 2}}},
                                  TreeOptions(resources=["cpu", "gpu"])))
    assert _paths(plan) == [("TreeConfigure", "default"), ("PoolUpsert", "/a")]
    plan = _applied(live, _target({"/a": {"reservation": {"cpu": 1}}}, CPU))
    assert _paths(plan) == [("PoolUpsert", "/a"), ("TreeConfigure", "default")]


def test_hosts_are_added_updated_and_pruned() -> None:
    hosts = {"h1": Host("h1", {"cpu": 50.0}), "h2": Host("h2", {"cpu": 8.0}, {}, frozenset({"gpu"}))}
    plan = _applied(_live(), _target({}, hosts=hosts))
    assert [(c.what, c.action, c.ref) for c in plan.changes] == [("host", "updated", "h1"), ("host", "created", "h2")]
    plan = _applied(_live(host("h3", cpu=1)), _target({}, hosts=hosts), prune=True)
    assert ("host", "deleted", "h3") in [(c.what, c.action, c.ref) for c in plan.changes]


def test_an_invalid_target_lists_every_rule_it_breaks_and_plans_nothing() -> None:
    target = _target({
        "/a": {"reservation": {"cpu": 50}, "limit": {"cpu": 10}},               # reservation above limit
        "/b": {"reservation": {"cpu": 10}},
        "/b/x": {"reservation": {"cpu": 8}}, "/b/y": {"reservation": {"cpu": 8}},  # 16 of 10
        "/nowhere/c": {},                                                        # unknown parent
        "/d": {"reservation": {"tpu": 1}},                                       # unknown kind
    })
    plan = plan_changes(_live(), target, prune=False)
    assert plan.commands == ()
    found = {(v.ref, v.rule, v.field) for v in plan.violations}
    assert found == {("/a", "reservation_exceeds_limit", "reservation.cpu"),
                     ("/b", "children_reservation_exceeds_parent", "reservation.cpu"),
                     ("/nowhere/c", "parent_missing", "path"),
                     ("/d", "unknown_kind", "reservation.tpu")}, plan.violations


def test_pools_that_cannot_be_deleted_whatever_the_order_are_violations() -> None:
    live = _live(pool("/busy"), gang("g1", "/busy"), pool("/team", create_ephemeral_subpools=True),
                 gang("g2", "/team", user="ann"))
    plan = plan_changes(live, _target({}), prune=True)
    assert {(v.ref, v.rule) for v in plan.violations} == {("/busy", "delete_has_gangs"),
                                                          ("/team", "delete_has_children")}


def test_tree_options_are_checked_and_a_bad_tree_name_named() -> None:
    target = ClusterConfig({"bad name": TreeOptions(resources=["cpu", "cpu"])}, None, {})
    rules = {(v.what, v.ref, v.rule) for v in plan_changes(_live(), target, False).violations}
    assert rules == {("tree", "bad name", "tree_name"), ("tree", "bad name", "duplicate_kind")}


def test_the_state_rebuilt_from_the_services_answers_plans_as_the_state_itself() -> None:
    live = _live(pool("/a", reservation={"cpu": 10}, limit={"cpu": 20}), pool("/a/b", share=2.0),
                 pool("/t", create_ephemeral_subpools=True), gang("g", "/t", user="u"))
    rebuilt = state_of_views(list_trees(live), list_pools(live), list_hosts(live))
    assert config_of(rebuilt) == config_of(live)
    made = rebuilt.tree().pool("/t/t$u")
    assert made is not None and made.ephemeral and len(rebuilt.tree().gangs_in("/t/t$u")) == 1
    target = _target({"/a": {"reservation": {"cpu": 5}}, "/z": {}})
    plan = plan_changes(rebuilt, target, prune=True)
    assert [(v.ref, v.rule) for v in plan.violations] == [("/t", "delete_has_children")]
    assert plan_changes(rebuilt, target, prune=False).ok


# --- random trees ------------------------------------------------------------------------------

UNIVERSE = ["/a", "/a/b", "/a/c", "/a/b/d", "/e", "/e/f", "/e/g", "/e/f/h"]


def _random_valid(rng: random.Random, kinds: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """A random configuration valid by construction, per kind: limits within the parent's,
    reservations within the limit and, summed over siblings, within the parent's (a pool naming a
    kind its parent lacks is dropped by `_valid`)."""
    chosen = [p for p in UNIVERSE if rng.random() < 0.8]
    chosen = [p for p in chosen if all(a in chosen for a in _ancestors(p))]
    out: dict[str, dict[str, Any]] = {p: {} for p in chosen}
    for kind in kinds:
        budget: dict[str, float] = {}
        declared: dict[str, float] = {}
        for path in chosen:
            parent = path.rsplit("/", 1)[0]
            config = out[path]
            cap = declared.get(parent, 200.0)  # the parent's limit, or the nearest ancestor's
            if rng.random() < 0.7:
                config.setdefault("limit", {})[kind] = float(rng.randint(int(cap * 0.3), int(cap)))
            own_cap = declared[path] = config.get("limit", {}).get(kind, cap)
            room = budget.get(parent, own_cap) if parent else own_cap
            if rng.random() < 0.8:
                amount = float(rng.randint(0, int(min(room, own_cap))))
                config.setdefault("reservation", {})[kind] = amount
                if parent:
                    budget[parent] = room - amount
            budget[path] = config.get("reservation", {}).get(kind, 0.0)
    for config in out.values():
        if rng.random() < 0.3:
            config["share"] = float(rng.randint(1, 4))
    return out


def _valid(rng: random.Random, kinds: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    options = TreeOptions(resources=list(kinds))
    while True:
        found = _random_valid(rng, kinds)
        if plan_changes(TreeState(), _target(found, options), prune=False).ok:
            return found


def _ancestors(path: str) -> list[str]:
    parts = path.split("/")[1:-1]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


@pytest.mark.parametrize("seed", range(100))
@pytest.mark.parametrize(("kinds", "prune"), [(("cpu",), True), (("cpu", "memory"), True), (("cpu", "memory"), False)])
def test_from_any_valid_tree_to_any_other_every_step_is_accepted(kinds: tuple[str, ...], prune: bool,
                                                                 seed: int) -> None:
    rng = random.Random(seed)
    options = TreeOptions(resources=list(kinds))
    start, goal = _valid(rng, kinds), _valid(rng, kinds)
    live = TreeState.of([tree_configured(resources=list(kinds)), *(pool(p, **c) for p, c in start.items())])
    assert plan_changes(live, _target(start, options), prune=True).commands == ()
    target = _target(goal, options)
    if not prune and not plan_changes(live, target, prune=False).ok:
        return  # the pools kept (not in the goal) may not fit it: a refusal, tested elsewhere
    _applied(live, target, prune=prune)
