"""The balance of trees over instances (`services.common.tree_leases.plan`, pure): rounds of every
instance's plan, each seeing the others' counts, end with each holding floor(n/L) or ceil(n/L)
trees and every tree held; a new instance gets its share, a gone one's trees are taken."""

from __future__ import annotations

import pytest

from services.common.tree_leases import leases_mode, plan, tree_of


def settle(holdings: dict[str, set[str]], trees: set[str], rounds: int = 50) -> dict[str, set[str]]:
    """Run every instance's plan in turn until nothing changes (a race-free bucket)."""
    for _ in range(rounds):
        moved = False
        for me in sorted(holdings):
            taken = set().union(*holdings.values())
            others = {who: len(held) for who, held in holdings.items() if who != me}
            todo = plan(me, holdings[me], trees, taken, others)
            for tree in todo.give:
                holdings[me].discard(tree)
                moved = True
            for tree in todo.take:
                if tree not in set().union(*holdings.values()):
                    holdings[me].add(tree)
                    moved = True
        if not moved:
            return holdings
    raise AssertionError(f"no balance after {rounds} rounds: {holdings}")


def assert_balanced(holdings: dict[str, set[str]], trees: set[str]) -> None:
    counts = sorted(len(held) for held in holdings.values())
    assert counts[-1] - counts[0] <= 1, holdings
    assert set().union(*holdings.values()) == trees
    assert sum(counts) == len(trees)  # nobody holds a tree twice


@pytest.mark.parametrize(("instances", "n"), [(1, 3), (2, 2), (2, 4), (2, 5), (3, 4), (3, 10), (4, 3), (5, 1)])
def test_instances_settle_on_an_even_share(instances: int, n: int) -> None:
    trees = {f"t{i}" for i in range(n)}
    holdings: dict[str, set[str]] = {f"{i:08x}": set() for i in range(instances)}
    assert_balanced(settle(holdings, trees), trees)


def test_a_new_instance_gets_its_share_and_a_gone_ones_trees_are_taken() -> None:
    trees = {f"t{i}" for i in range(4)}
    holdings = settle({"aaaaaaaa": set(), "bbbbbbbb": set()}, trees)
    assert sorted(len(h) for h in holdings.values()) == [2, 2]
    holdings["cccccccc"] = set()  # joins: someone gives one back, the newcomer takes it
    assert_balanced(settle(holdings, trees), trees)
    assert holdings["cccccccc"]
    del holdings["aaaaaaaa"]  # dies: its trees are free, the others take them
    assert_balanced(settle(holdings, trees), trees)
    holdings["dddddddd"] = set()
    trees.add("t9")  # a tree created later is held too
    assert_balanced(settle(holdings, trees), trees)


def test_an_instance_alone_holds_every_tree_and_none_gives_back_for_nothing() -> None:
    assert set(plan("a", set(), {"x", "y"}, set(), {}).take) == {"x", "y"}
    assert plan("a", {"x"}, {"x", "y"}, {"x", "y"}, {"b": 1}) == plan("a", {"x"}, {"x", "y"}, {"x", "y"}, {"b": 1})
    assert not plan("a", {"x"}, {"x", "y"}, {"x", "y"}, {"b": 1}).give


def test_subjects_name_their_trees_and_the_mode_is_checked() -> None:
    assert tree_of("poolwise.gang.t1") == "t1"
    assert tree_of("poolwise.decision.t2.admission") == "t2"
    assert tree_of("poolwise.rejected._") == "_"
    assert tree_of("poolwise.hosts") is None
    assert tree_of("poolwise.gang.a$b") == "_"  # no tree name: the lease of what names none
    assert leases_mode(None) == "service" and leases_mode(" Per-Tree ") == "per-tree"
    with pytest.raises(ValueError, match="per-tree"):
        leases_mode("sharded")
