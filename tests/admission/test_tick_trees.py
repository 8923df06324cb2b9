"""Which trees a tick naming no tree (the service's clock's) starts a cycle in: every tree that
holds anything to decide; a tree of a root alone that never had a gang (the default tree next to
named ones) is left out: its cycle decided nothing and cost three log messages per tick."""

from __future__ import annotations

from events import CycleCompleted, EntitlementsComputed
from services.admission.domain.state import trees_ticked
from tests.admission.builders import gang, pool, tree, world


def test_a_clock_tick_cycles_the_trees_holding_pools_and_leaves_out_an_empty_default_tree() -> None:
    log = world(tree(name="prod"), pool("/a", tree_name="prod"))  # `world` configures the default tree too
    assert trees_ticked(log.state, None) == ["prod"]
    assert trees_ticked(log.state, "default") == ["default"]  # a tick that names it still does
    out = log.tick(1.0)
    assert {e.tree for e in out if isinstance(e, EntitlementsComputed | CycleCompleted)} == {"prod"}


def test_a_tree_is_cycled_once_it_holds_a_pool_or_a_gang() -> None:
    log = world(tree(name="prod"), pool("/a", tree_name="prod"))
    log.feed(gang("g", "/"))  # a gang for the default tree's root (a leaf while it is alone)
    assert trees_ticked(log.state, None) == ["default", "prod"]
    log = world(tree(name="prod"), pool("/a", tree_name="prod"), pool("/b"))
    assert trees_ticked(log.state, None) == ["default", "prod"]
