"""PoolStatusProjection: the latest entitlements per tree, their history (changes only), starvation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from events import EntitlementsComputed, Event, PoolDeleted, PoolEntitlement, PoolStarvationChanged, at_seconds
from projections import ProjectionStore
from projections.pool_status import PoolStatusProjection
from services.common.log import Stored
from tests.projections.make import T0, stored

CAPACITY = {"cpu": 100.0, "memory": 1000.0, "gpu": 0.0}


def pool(path: str, cpu: float, *, slack: float = 0.0, usage: float = 0.0) -> PoolEntitlement:
    return PoolEntitlement(path=path, entitlement={"cpu": cpu, "memory": round(cpu * 10, 9)},
                           non_slack_entitlement={"cpu": cpu - slack, "memory": round(cpu * 10, 9)},
                           slack_entitlement={"cpu": slack} if slack else {}, fair_share=cpu / 100,
                           usage_share=usage, demand_share=cpu / 100, dominant_kind="cpu")


def computed(*pools: PoolEntitlement, tree: str = "default") -> EntitlementsComputed:
    return EntitlementsComputed(tree=tree, capacity=CAPACITY, pools=list(pools))


def log(*events: Event) -> list[Stored]:
    return [stored(seq, event, source="admission", basis=seq - 1) for seq, event in enumerate(events, start=1)]


# The Peloton user guide example (DOMAIN §3): 10/45/45, then RP1's demand rises and all get 33.33.
HISTORY = log(
    computed(pool("/RP1", 10), pool("/RP2", 45), pool("/RP3", 45)),
    computed(pool("/RP1", 10), pool("/RP2", 45), pool("/RP3", 45)),  # nothing changed
    computed(pool("/RP1", 10), pool("/RP2", 45, usage=0.2), pool("/RP3", 45)),  # RP2 admitted work
    computed(pool("/X", 50), tree="other"),
    computed(pool("/RP1", 33.33), pool("/RP2", 33.33, usage=0.2), pool("/RP3", 33.33)),
    computed(pool("/RP1", 33.33), pool("/RP2", 33.33, usage=0.2)),  # RP3 deleted
)


def snapshot(store: ProjectionStore) -> dict[str, list[tuple[Any, ...]]]:
    return {table: store.query(f"SELECT * FROM {table} ORDER BY ALL")[1]
            for table in ("pool_entitlements", "entitlement_history", "pool_starvation")}


@pytest.fixture
def store() -> ProjectionStore:
    store = ProjectionStore(":memory:", [PoolStatusProjection()])
    store.apply(HISTORY)
    return store


def test_the_latest_computation_of_each_tree_one_row_per_pool_and_kind(store: ProjectionStore) -> None:
    _, rows = store.query("SELECT tree, path, kind, entitlement, non_slack_entitlement, slack_entitlement, capacity, "
                          "computed_seq FROM pool_entitlements ORDER BY tree, path, kind")
    assert rows == [
        ("default", "/RP1", "cpu", 33.33, 33.33, 0.0, 100.0, 6),
        ("default", "/RP1", "gpu", 0.0, 0.0, 0.0, 0.0, 6),  # every kind of the capacity
        ("default", "/RP1", "memory", 333.3, 333.3, 0.0, 1000.0, 6),
        ("default", "/RP2", "cpu", 33.33, 33.33, 0.0, 100.0, 6),
        ("default", "/RP2", "gpu", 0.0, 0.0, 0.0, 0.0, 6),
        ("default", "/RP2", "memory", 333.3, 333.3, 0.0, 1000.0, 6),
        ("other", "/X", "cpu", 50.0, 50.0, 0.0, 100.0, 4),
        ("other", "/X", "gpu", 0.0, 0.0, 0.0, 0.0, 4),
        ("other", "/X", "memory", 500.0, 500.0, 0.0, 1000.0, 4),
    ]
    _, shares = store.query("SELECT DISTINCT path, fair_share, usage_share, demand_share, dominant_kind, computed_at "
                            "FROM pool_entitlements WHERE tree = 'default' ORDER BY path")
    assert shares == [("/RP1", 0.3333, 0.0, 0.3333, "cpu", T0.replace(second=6)),
                      ("/RP2", 0.3333, 0.2, 0.3333, "cpu", T0.replace(second=6))]


def test_history_keeps_only_what_changed(store: ProjectionStore) -> None:
    _, rows = store.query("SELECT tree, path, seq, entitlement['cpu'], usage_share FROM entitlement_history "
                          "ORDER BY seq, tree, path")
    assert rows == [
        ("default", "/RP1", 1, 10.0, 0.0),
        ("default", "/RP2", 1, 45.0, 0.0),
        ("default", "/RP3", 1, 45.0, 0.0),
        ("default", "/RP2", 3, 45.0, 0.2),  # seq 2 changed nothing; seq 3 only RP2's usage
        ("other", "/X", 4, 50.0, 0.0),
        ("default", "/RP1", 5, 33.33, 0.0),
        ("default", "/RP2", 5, 33.33, 0.2),
        ("default", "/RP3", 5, 33.33, 0.0),
        ("default", "/RP3", 6, None, None),  # left the computation
    ]


def test_history_answers_what_a_pool_was_entitled_to_at_an_instant(store: ProjectionStore) -> None:
    _, rows = store.query("SELECT entitlement['cpu'] FROM entitlement_history WHERE tree = 'default' AND "
                          "path = '/RP2' AND computed_at <= ? ORDER BY seq DESC LIMIT 1", [T0.replace(second=4)])
    assert rows == [(45.0,)]


def test_a_kind_missing_from_a_map_counts_as_zero_when_comparing() -> None:
    zero = PoolEntitlement(path="/a", entitlement={"cpu": 1.0, "gpu": 0.0}, non_slack_entitlement={"cpu": 1.0},
                           slack_entitlement={})
    same = PoolEntitlement(path="/a", entitlement={"cpu": 1.0}, non_slack_entitlement={"cpu": 1.0, "gpu": 0.0},
                           slack_entitlement={"gpu": 0.0})
    with ProjectionStore(":memory:", [PoolStatusProjection()]) as store:
        store.apply(log(computed(zero), computed(same)))
        assert store.query("SELECT seq FROM entitlement_history")[1] == [(1,)]


@pytest.mark.parametrize("chunk_size", [1, 2, 4096])
def test_batches_chunks_redelivery_and_resume_give_the_same_tables(
    tmp_path: Path, store: ProjectionStore, chunk_size: int
) -> None:
    expected = snapshot(store)
    path = tmp_path / "tree.duckdb"
    with ProjectionStore(path, [PoolStatusProjection()], chunk_size=chunk_size) as other:
        for message in HISTORY[:3]:
            other.apply([message])
    with ProjectionStore(path, [PoolStatusProjection()], chunk_size=chunk_size) as other:
        other.apply(HISTORY)  # redelivered from the start: only 4.. apply
        other.apply(HISTORY)
        assert snapshot(other) == expected


class PoolStatusV2(PoolStatusProjection):
    schema_version = 2


def test_a_schema_version_bump_rebuilds(tmp_path: Path, store: ProjectionStore) -> None:
    expected = snapshot(store)
    path = tmp_path / "tree.duckdb"
    with ProjectionStore(path, [PoolStatusProjection()]) as other:
        other.apply(HISTORY[:4])
    with ProjectionStore(path, [PoolStatusV2()]) as other:
        assert other.rebuilt == ("pool_status",)
        assert all(rows == [] for rows in snapshot(other).values())
        other.apply(HISTORY)
        assert snapshot(other) == expected


def starvation(pool: str, status: str, previous: str, since: float, **more: Any) -> PoolStarvationChanged:
    return PoolStarvationChanged(tree="default", pool=pool, status=status, previous=previous,  # type: ignore[arg-type]
                                 since=since, **more)


def test_pool_starvation_is_each_pools_latest_status() -> None:
    start = T0.timestamp()
    events = [
        starvation("/a", "below_fair_share", "ok", start + 1, below_since=start + 1, kinds=["cpu"],
                   usage={"cpu": 2.0}, entitlement={"cpu": 10.0}, demand={"cpu": 8.0}),
        starvation("/b", "below_fair_share", "ok", start + 2, below_since=start + 2, kinds=["gpu"]),
        starvation("/a", "starving", "below_fair_share", start + 31, below_since=start + 1, kinds=["cpu"],
                   usage={"cpu": 2.0}, entitlement={"cpu": 10.0}, demand={"cpu": 8.0}),
        starvation("/b", "ok", "below_fair_share", start + 4),
    ]
    messages = [stored(seq, e, source="preemption", basis=seq - 1) for seq, e in enumerate(events, start=1)]
    with ProjectionStore(":memory:", [PoolStatusProjection()]) as store:
        store.apply(messages)
        _, rows = store.query("SELECT pool, status, previous, since, below_since, kinds, usage, demand, seq "
                              "FROM pool_starvation ORDER BY pool")
        assert rows == [
            ("/a", "starving", "below_fair_share", at_seconds(start + 31), at_seconds(start + 1), ["cpu"],
             {"cpu": 2.0}, {"cpu": 8.0}, 3),
            ("/b", "ok", "below_fair_share", at_seconds(start + 4), None, [], {}, {}, 4),
        ]
        store.apply([stored(5, PoolDeleted(tree="default", path="/b"), source="tree")])
        assert store.query("SELECT pool FROM pool_starvation")[1] == [("/a",)]
