"""`preemption_wants` (the preemptions projection's pools that want more, per tree) lets a deleted
pool go at once: a tree whose pools are all deleted is computed no more, and its rows stayed."""

from __future__ import annotations

from pathlib import Path

from events import EntitlementsComputed, PoolDeleted, PoolEntitlement, PreemptionRequested
from projections import ProjectionStore
from projections.records import PreemptionsProjection
from tests.projections.make import stored


def wanting(path: str) -> PoolEntitlement:
    return PoolEntitlement(path=path, entitlement={"cpu": 40.0}, non_slack_entitlement={"cpu": 40.0},
                           slack_entitlement={}, fair_share=0.4, usage_share=0.1, demand_share=0.5)


def wants(store: ProjectionStore) -> list[tuple[object, ...]]:
    return store.query("SELECT tree, path FROM preemption_wants WHERE NOT deleted ORDER BY ALL")[1]


def test_a_deleted_pool_and_its_tree_leave_preemption_wants(tmp_path: Path) -> None:
    computed = EntitlementsComputed(tree="t", capacity={"cpu": 100.0},
                                    pools=[wanting("/a"), wanting("/a/x"), wanting("/b")])
    path = tmp_path / "tree.duckdb"
    with ProjectionStore(path, [PreemptionsProjection()]) as store:
        store.apply([stored(1, computed, source="admission"), stored(2, PoolDeleted(tree="t", path="/a"))])
        assert wants(store) == [("t", "/b")]  # /a and what was under it
    with ProjectionStore(path, [PreemptionsProjection()]) as store:  # read back after a stop
        over = PreemptionRequested(tree="t", pool="/c", gang="g", tasks=["g/0"],
                                   reason="over non-slack entitlement since 2: cpu 14 held, 10 entitled")
        store.apply([stored(3, over, source="preemption"), stored(4, PoolDeleted(tree="t", path="/b"))])
        assert wants(store) == []
        assert store.query("SELECT for_pools FROM preemptions")[1] == [(["/b"],)]
