"""Property: whatever upserts and deletes arrive, applying only the accepted ones keeps every
invariant of DOMAIN §2 on the whole tree."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events import PoolConfig, TreeOptions
from events.commands import PoolDelete, PoolUpsert, TreeConfigure
from services.tree.domain import (
    TOLERANCE,
    TreeState,
    capacity,
    decide,
    declared_limits,
    effective,
    effective_of,
    effective_pools,
)
from services.tree.domain.decide import ConfigCommand
from tests.tree.builders import applied, pool, tree_configured

KINDS = ["cpu", "memory"]
PATHS = ["/a", "/b", "/a/x", "/a/y", "/a/x/p", "/a/x/q", "/a/y/r", "/b/z", "/b/z/w", "/A"]
PRESETS = {"small": PoolConfig(limit={"cpu": 20}),
           "big": PoolConfig(reservation={"cpu": 40}, limit={"cpu": 100})}
START = (
    tree_configured(resources=KINDS, pool_config_presets=PRESETS),
    pool("/a", reservation={"cpu": 60, "memory": 60}, limit={"cpu": 100, "memory": 100}),
    pool("/a/x", reservation={"cpu": 20}, limit={"cpu": 50, "memory": 80}),
    pool("/a/y", reservation={"cpu": 10, "memory": 10}),
    pool("/b"),
)

amounts = st.sampled_from([0.0, 2.0, 5.0, 10.0, 20.0, 30.0, 40.0, 50.0, 80.0, 100.0, 150.0])
maps = st.none() | st.dictionaries(st.sampled_from(KINDS), amounts, min_size=1, max_size=2)
good_configs = st.builds(
    PoolConfig,
    reservation=maps,
    limit=maps,
    share=st.none() | st.sampled_from([1.0, 2.0]),
    max_running_jobs=st.none() | st.sampled_from([1, 5, 10]),
    max_jobs=st.none() | st.sampled_from([5, 10]),
    config_presets=st.none() | st.sampled_from([["small"], ["big"], ["big", "small"]]),
)
bad_configs = st.builds(
    PoolConfig,
    reservation=st.dictionaries(st.sampled_from([*KINDS, "tpu"]), st.sampled_from([-1.0, 5.0]), max_size=2),
    share=st.sampled_from([0.0, -1.0, {"cpu": 0.0}]),
    max_running_jobs=st.sampled_from([-1, 10]),
    max_jobs=st.sampled_from([5, 10]),
    config_presets=st.none() | st.just(["unknown"]),
)
configs = st.sampled_from([good_configs, good_configs, good_configs, bad_configs]).flatmap(lambda s: s)
upserts = st.builds(PoolUpsert, path=st.sampled_from(PATHS), config=configs, replace=st.booleans())
deletes = st.builds(PoolDelete, path=st.sampled_from(PATHS))
reconfigures = st.builds(
    TreeConfigure,
    options=st.builds(
        TreeOptions,
        resources=st.sampled_from([KINDS, KINDS, ["cpu"]]),
        pool_config_presets=st.sampled_from([PRESETS, {**PRESETS, "small": PoolConfig(limit={"cpu": 5})}]),
        max_jobs_per_pool=st.none() | st.sampled_from([3, 10]),
    ),
)
command = st.sampled_from([upserts, upserts, upserts, upserts, deletes, reconfigures]).flatmap(lambda s: s)
commands = st.lists(command, min_size=1, max_size=40)


def _le(a: float, b: float) -> bool:
    return a <= b or a - b < TOLERANCE


def assert_invariants(state: TreeState) -> None:
    tree = state.tree()
    everything = effective_pools(state, "default")
    assert everything == {p: effective_of(tree, p, capacity(state, "default")[0]) for p in sorted(tree.pools)}
    for path, node in tree.pools.items():
        if node.is_root:
            continue
        assert node.parent in tree.pools and path in tree.pools[node.parent].children
        config = effective.resolved(tree, path)
        for values in (config.reservation or {}, config.limit or {}):
            assert all(v >= 0 for v in values.values()), (path, values)
            assert set(values) <= set(tree.kinds)
        reserved = effective.reservation(tree, path)
        limits = declared_limits(tree, path)
        for kind in tree.kinds:
            assert _le(reserved[kind], limits[kind]), (path, kind, reserved, limits)
        running, total = effective.job_limits(tree, path)
        assert running is None or total is None or running <= total
        if not node.is_top_level:
            assert node.parent is not None
            parent_limits = declared_limits(tree, node.parent)
            for kind in tree.kinds:
                assert _le(limits[kind], parent_limits[kind]), (path, kind, limits, parent_limits)
        if node.children:
            sums = dict.fromkeys(tree.kinds, 0.0)
            for child in tree.children(path):
                for kind, amount in effective.reservation(tree, child.path).items():
                    sums[kind] += amount
            for kind in tree.kinds:
                assert _le(sums[kind], reserved[kind]), (path, kind, sums, reserved)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(commands)
def test_accepted_commands_keep_every_invariant(sequence: list[ConfigCommand]) -> None:
    state = TreeState.of(START)
    assert_invariants(state)
    for command in sequence:
        version = state.tree().version
        decision = decide(state, command)
        applied(state, decision)
        assert_invariants(state)
        if not getattr(decision, "events", ()):
            assert state.tree().version == version


@settings(max_examples=100, deadline=None)
@given(commands)
def test_decide_is_pure(sequence: list[ConfigCommand]) -> None:
    state = TreeState.of(START)
    for command in sequence:
        before = (dict(state.tree().pools), state.tree().options, state.tree().version)
        first = decide(state, command)
        assert (dict(state.tree().pools), state.tree().options, state.tree().version) == before
        assert decide(state, command) == first
        applied(state, first)
