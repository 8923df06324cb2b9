"""The incremental engine: leaf updates in place give what a fresh computation gives."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.entitlement import (
    EntitlementEngine,
    LeafUsage,
    PoolInput,
    TreeInput,
    compute_entitlements,
)
from tests.entitlement.helpers import leaf
from tests.entitlement.strategies import trees


def _same(a: object, b: object) -> None:
    assert isinstance(a, type(b))
    for name in ("entitlement_matrix", "slack_matrix", "non_slack_matrix", "requirement_matrix"):
        np.testing.assert_allclose(getattr(a, name), getattr(b, name), atol=1e-9)


@settings(max_examples=100, deadline=None)
@given(trees(), st.data())
def test_set_usage_then_compute_is_a_fresh_computation(tree: TreeInput, data: st.DataObject) -> None:
    engine = EntitlementEngine(tree)
    kids = {p.path.rsplit("/", 1)[0] or "/" for p in tree.pools}
    leaves = [p for p in tree.pools if p.path not in kids]
    changed = data.draw(st.lists(st.sampled_from(leaves), max_size=3, unique_by=lambda p: p.path))
    pools = {p.path: p for p in tree.pools}
    for p in changed:
        usage = LeafUsage(demand={k: data.draw(st.sampled_from([0.0, 3.0, 300.0])) for k in tree.kinds})
        engine.set_usage(p.path, usage)
        pools[p.path] = dataclasses.replace(p, usage=usage)
    _same(engine.compute(), compute_entitlements(dataclasses.replace(tree, pools=tuple(pools.values()))))


def test_set_capacity() -> None:
    tree = TreeInput(kinds=("cpu",), capacity={"cpu": 100}, pools=(leaf("/a", demand={"cpu": 80}), leaf("/b")))
    engine = EntitlementEngine(tree)
    assert engine.compute()["/a"].entitlement["cpu"] == pytest.approx(90)
    engine.set_capacity({"cpu": 50}, {"cpu": 7})
    r = engine.compute()
    assert r["/a"].entitlement["cpu"] == pytest.approx(50)
    assert r.slack_capacity == {"cpu": 7}
    assert engine.leaves == ["/a", "/b"]


def test_result_mapping() -> None:
    r = compute_entitlements(
        TreeInput(kinds=("cpu", "memory"), capacity={"cpu": 10, "memory": 20}, pools=(leaf("/a"), leaf("/a/b")))
    )
    assert list(r) == ["/", "/a", "/a/b"]
    assert len(r) == 3 and "/a/b" in r and "/zz" not in r
    assert r.entitlement("/a/b", "memory") == pytest.approx(20)
    assert r.row_of("/a") == 1
    assert r["/a/b"].dominant_kind is None
    assert r.capacity == {"cpu": 10, "memory": 20}


def test_explicit_parent_and_root_entry() -> None:
    r = compute_entitlements(
        TreeInput(
            kinds=("cpu",),
            capacity={"cpu": 10},
            pools=(PoolInput(path="/"), PoolInput(path="/x", parent="/"), leaf("/x/y")),
        )
    )
    assert list(r) == ["/", "/x", "/x/y"]


@pytest.mark.parametrize(
    ("pools", "message"),
    [
        ((leaf("/a/b"),), "parent /a does not exist"),
        ((leaf("/a"), leaf("/a")), "given twice"),
        ((PoolInput(path="/a", parent="/b"), PoolInput(path="/b", parent="/a")), "not reachable"),
    ],
)
def test_bad_trees_are_refused(pools: tuple[PoolInput, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        compute_entitlements(TreeInput(kinds=("cpu",), capacity={"cpu": 1}, pools=pools))


def test_only_leaves_take_usage() -> None:
    engine = EntitlementEngine(TreeInput(kinds=("cpu",), capacity={"cpu": 1}, pools=(leaf("/a"), leaf("/a/b"))))
    with pytest.raises(ValueError, match="not a leaf"):
        engine.set_usage("/a", LeafUsage())
    with pytest.raises(KeyError):
        engine.set_usage("/nope", LeafUsage())
