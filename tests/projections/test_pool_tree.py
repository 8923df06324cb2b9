"""PoolTreeProjection: trees, pools and hosts follow create, update and delete, in any batching."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from events import (
    HostRegistered,
    HostRemoved,
    PoolConfig,
    PoolConfigChanged,
    PoolDeleted,
    TreeConfigured,
    TreeOptions,
)
from events.config import PreemptionOptions
from projections import EventLogProjection, PoolTreeProjection, ProjectionStore
from projections.pool_tree import split_path
from services.common.log import Stored
from tests.projections.make import gangs, stored

ATG = PoolConfig(reservation={"cpu": 100.0, "memory": 1000.0}, limit={"cpu": 200.0}, mode="fifo")
AV = PoolConfig(
    reservation={"cpu": 40.0, "memory": 400.0},
    limit={"cpu": 80.0, "gpu": 4.0},
    share=2.0,
    mode="fair_share",
    fifo_sort=["priority", "pending_tasks"],
    max_running_jobs=10,
    max_jobs=25,
    preempt_lower_priority=True,
)
AV_V2 = PoolConfig(reservation={"cpu": 30.0}, share={"cpu": 3.0, "gpu": 0.5}, controller_limit=20.0)
USERS = PoolConfig(
    reservation={"cpu": 10.0},
    create_ephemeral_subpools=True,
    ephemeral_subpool_config=PoolConfig(limit={"cpu": 4.0}),
    config_presets=["small"],
)


def history() -> list[Stored]:
    """A tree is made, pools and hosts come, change and go."""
    events = [
        TreeConfigured(
            tree="research", options=TreeOptions(node_tag_filter=["gpu"], default_parent_pool="/adhoc")
        ),
        PoolConfigChanged(tree="research", path="/ATG", config=ATG, created=True),
        PoolConfigChanged(tree="research", path="/ATG/AV", config=AV, created=True),
        PoolConfigChanged(tree="research", path="/users", config=USERS, created=True),
        HostRegistered(
            host="h1", resources={"cpu": 64.0, "memory": 256.0}, revocable={"cpu": 16.0}, tags=["gpu"]
        ),
        HostRegistered(host="h2", resources={"cpu": 32.0, "memory": 128.0, "gpu": 2.0}),
        PoolConfigChanged(tree="research", path="/ATG/AV", config=AV_V2),
        PoolDeleted(tree="research", path="/users"),
        HostRegistered(host="h1", resources={"cpu": 96.0, "memory": 384.0}, tags=["gpu", "big"]),
        HostRemoved(host="h2"),
        TreeConfigured(
            tree="research",
            options=TreeOptions(
                policy="dominant", node_tag_filter=["gpu"], preemption=PreemptionOptions(grace=60)
            ),
        ),
        HostRegistered(host="h3", resources={"cpu": 8.0}),
    ]
    return [stored(seq, event, source="tree") for seq, event in enumerate(events, start=1)]


@pytest.fixture
def store() -> Iterator[ProjectionStore]:
    with ProjectionStore(":memory:", [PoolTreeProjection()]) as store:
        yield store


def state(store: ProjectionStore) -> dict[str, list[tuple[object, ...]]]:
    return {
        table: store.query(f"SELECT * EXCLUDE (updated_at) FROM {table} ORDER BY ALL")[1]
        if table not in ("pool_resources", "host_resources")
        else store.query(f"SELECT * FROM {table} ORDER BY ALL")[1]
        for table in PoolTreeProjection.tables
    }


def test_the_final_state_has_the_real_numbers(store: ProjectionStore) -> None:
    store.apply(history())

    _, trees = store.query(
        "SELECT tree, policy, resources, node_tag_filter, default_parent_pool, version, seq,"
        " CAST(options->'preemption'->>'grace' AS DOUBLE) FROM trees"
    )
    assert trees == [("research", "dominant", ["cpu", "memory", "disk", "gpu"], ["gpu"], None, 2, 11, 60.0)]

    _, pools = store.query(
        "SELECT path, name, parent, depth, ephemeral, share, mode, controller_limit, max_jobs, version, seq"
        " FROM pools ORDER BY path"
    )
    assert pools == [
        ("/ATG", "ATG", "/", 1, False, None, "fifo", None, None, 1, 2),
        ("/ATG/AV", "AV", "/ATG", 2, False, None, None, 20.0, None, 2, 7),  # replaced whole by AV_V2
    ]
    _, resources = store.query(
        'SELECT path, kind, reservation, "limit", share FROM pool_resources ORDER BY ALL'
    )
    assert resources == [
        ("/ATG", "cpu", 100.0, 200.0, None),
        ("/ATG", "memory", 1000.0, None, None),
        ("/ATG/AV", "cpu", 30.0, None, 3.0),
        ("/ATG/AV", "gpu", None, None, 0.5),
    ]
    _, config = store.query("SELECT config FROM pools WHERE path = '/ATG/AV'")
    assert PoolConfig.model_validate_json(config[0][0]) == AV_V2

    _, hosts = store.query("SELECT host, resources['cpu'], revocable, tags, seq FROM hosts ORDER BY host")
    assert hosts == [("h1", 96.0, {}, ["gpu", "big"], 9), ("h3", 8.0, {}, [], 12)]
    _, capacity = store.query(
        "SELECT kind, sum(amount), sum(revocable) FROM host_resources GROUP BY kind ORDER BY kind"
    )
    assert capacity == [("cpu", 104.0, 0.0), ("memory", 384.0, 0.0)]
    # the tree's capacity: hosts whose tags match its node_tag_filter
    _, tree_capacity = store.query(
        "SELECT r.kind, sum(r.amount) FROM trees t JOIN hosts h ON list_has_any(h.tags, t.node_tag_filter)"
        " JOIN host_resources r USING (host) GROUP BY r.kind ORDER BY r.kind"
    )
    assert tree_capacity == [("cpu", 96.0), ("memory", 384.0)]


def test_intermediate_states_are_visible_after_each_batch(store: ProjectionStore) -> None:
    log = history()
    store.apply(log[:6])
    _, pools = store.query(
        "SELECT path, ephemeral, share, mode, fifo_sort, max_running_jobs FROM pools ORDER BY path"
    )
    assert pools == [
        ("/ATG", False, None, "fifo", None, None),
        ("/ATG/AV", False, 2.0, "fair_share", ["priority", "pending_tasks"], 10),
        ("/users", False, None, None, None, None),
    ]
    _, users = store.query(
        "SELECT create_ephemeral_subpools, config_presets, ephemeral_subpool_config"
        " FROM pools WHERE path = '/users'"
    )
    assert users[0][:2] == (True, ["small"])
    assert json.loads(users[0][2]) == {"limit": {"cpu": 4.0}}
    _, av = store.query(
        'SELECT kind, reservation, "limit", share FROM pool_resources WHERE path = ? ORDER BY kind',
        ["/ATG/AV"],
    )
    assert av == [("cpu", 40.0, 80.0, None), ("gpu", None, 4.0, None), ("memory", 400.0, None, None)]
    _, hosts = store.query("SELECT host, kind, amount, revocable FROM host_resources ORDER BY ALL")
    assert hosts == [
        ("h1", "cpu", 64.0, 16.0),
        ("h1", "memory", 256.0, 0.0),
        ("h2", "cpu", 32.0, 0.0),
        ("h2", "gpu", 2.0, 0.0),
        ("h2", "memory", 128.0, 0.0),
    ]

    store.apply(log[6:8])  # AV replaced, /users deleted
    _, pools = store.query("SELECT path, version FROM pools ORDER BY path")
    assert pools == [("/ATG", 1), ("/ATG/AV", 2)]
    _, gone = store.query("SELECT count(*) FROM pool_resources WHERE path = '/users'")
    assert gone == [(0,)]


def test_one_batch_and_one_event_per_batch_give_the_same_state() -> None:
    log = history()
    with ProjectionStore(":memory:", [PoolTreeProjection()]) as at_once:
        at_once.apply(log)
        expected = state(at_once)
    with ProjectionStore(":memory:", [PoolTreeProjection()], chunk_size=5) as chunked:
        chunked.apply(log)  # one batch, handed over in chunks
        assert state(chunked) == expected
    with ProjectionStore(":memory:", [PoolTreeProjection()]) as one_by_one:
        for message in log:
            one_by_one.apply([message])
        assert state(one_by_one) == expected
    assert expected["pools"] and expected["hosts"]


def test_a_redelivered_history_changes_nothing(store: ProjectionStore) -> None:
    store.apply(history())
    before = state(store)
    store.apply(history())
    assert state(store) == before


def test_a_pool_deleted_and_made_again_starts_at_version_one(store: ProjectionStore) -> None:
    make = PoolConfigChanged(tree="t", path="/a", config=PoolConfig(limit={"cpu": 5.0}), created=True)
    store.apply([stored(1, make), stored(2, make.model_copy(update={"created": False}))])
    store.apply(
        [
            stored(3, PoolDeleted(tree="t", path="/a")),
            stored(4, make.model_copy(update={"config": PoolConfig(limit={"cpu": 7.0})})),
        ]
    )
    _, rows = store.query(
        'SELECT p.version, p.seq, r."limit" FROM pools p JOIN pool_resources r USING (tree, path)'
    )
    assert rows == [(1, 4, 7.0)]


def test_trees_are_kept_apart(store: ProjectionStore) -> None:
    store.apply(
        [
            stored(1, PoolConfigChanged(tree="a", path="/x", config=PoolConfig(reservation={"cpu": 1.0}))),
            stored(2, PoolConfigChanged(tree="b", path="/x", config=PoolConfig(reservation={"cpu": 2.0}))),
            stored(3, PoolDeleted(tree="a", path="/x")),
        ]
    )
    _, rows = store.query("SELECT tree, path, reservation FROM pool_resources")
    assert rows == [("b", "/x", 2.0)]


def test_other_events_and_malformed_messages_are_ignored(store: ProjectionStore) -> None:
    store.apply([*gangs(1, 3), Stored(4, "poolwise.config.research", b'{"event":{"type":"PoolDeleted"}}')])
    assert all(rows == [] for rows in state(store).values())
    assert store.checkpoint("pool_tree") == 4


def test_beside_the_event_log_in_one_store() -> None:
    with ProjectionStore(":memory:", [EventLogProjection(), PoolTreeProjection()]) as store:
        store.apply(history())
        _, rows = store.query(
            "SELECT e.seq, e.type FROM event_log e JOIN pools p ON e.seq = p.seq ORDER BY e.seq"
        )
        assert rows == [(2, "PoolConfigChanged"), (7, "PoolConfigChanged")]


@pytest.mark.parametrize(
    ("path", "expected"),
    [("/", ("/", None, 0)), ("/a", ("a", "/", 1)), ("/a/b$alice", ("b$alice", "/a", 2))],
)
def test_split_path(path: str, expected: tuple[str, str | None, int]) -> None:
    assert split_path(path) == expected
