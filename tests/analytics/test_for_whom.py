"""Whom a preemption was for (`preemptions.cause`, `for_gang`, `for_pools`): the pools that, in
the tree's latest computation before the request, were entitled to more than they held and asked
for more, the deepest of them; across a restart of the store (read back from `preemption_wants`)."""

from __future__ import annotations

from pathlib import Path

from events import EntitlementsComputed, PoolEntitlement, PreemptionRequested
from projections import ProjectionStore
from projections.records import PreemptionsProjection
from tests.projections.make import stored

OVER = "over non-slack entitlement since 2: cpu 14 held, 10 entitled"


def pool(path: str, fair: float, usage: float, demand: float) -> PoolEntitlement:
    return PoolEntitlement(path=path, entitlement={"cpu": fair * 100}, non_slack_entitlement={"cpu": fair * 100},
                           slack_entitlement={}, fair_share=fair, usage_share=usage, demand_share=demand)


def computed(*pools: PoolEntitlement, replace: bool = True, removed: tuple[str, ...] = ()) -> EntitlementsComputed:
    return EntitlementsComputed(tree="default", capacity={"cpu": 100.0}, pools=list(pools), replace=replace,
                                removed=list(removed))


def preempt(pool_path: str, gang: str, reason: str = OVER) -> PreemptionRequested:
    return PreemptionRequested(tree="default", pool=pool_path, gang=gang, tasks=[f"{gang}/0"], reason=reason)


def rows(store: ProjectionStore) -> list[tuple[object, ...]]:
    return store.query("SELECT gang, cause, for_gang, for_pools FROM preemptions ORDER BY requested_seq")[1]


def test_over_entitlement_is_for_the_deepest_pools_that_want_more(tmp_path: Path) -> None:
    path = tmp_path / "tree.duckdb"
    first = [
        # /x wants more (entitled 0.4 > holds 0.1, asks 0.5), and so does its parent /x's child /x/y;
        # /b holds more than it is entitled to; /c is entitled to more but asks for nothing more
        stored(1, computed(pool("/", 1.0, 0.9, 1.0), pool("/x", 0.4, 0.1, 0.5), pool("/x/y", 0.4, 0.1, 0.5),
                           pool("/b", 0.3, 0.6, 0.6), pool("/c", 0.3, 0.2, 0.2)), source="admission"),
    ]
    with ProjectionStore(path, [PreemptionsProjection()]) as store:
        store.apply(first)
    later = [
        stored(2, preempt("/b", "g1"), source="preemption"),
        # only /c changes (a large tree's partial map): it now wants more too
        stored(3, computed(pool("/c", 0.3, 0.2, 0.4), replace=False), source="admission"),
        stored(4, preempt("/b", "g2"), source="preemption"),
        stored(5, preempt("/c", "g3", "makes room for gang big one (priority 5, blocked at the head of queue "
                                      "pending of /c: entitlement: needs cpu 20); takes priority 0 < 5"),
               source="preemption"),
        stored(6, computed(pool("/b", 0.3, 0.6, 0.6), pool("/c", 0.3, 0.4, 0.4)), source="admission"),
        stored(7, preempt("/b", "g4"), source="preemption"),
    ]
    with ProjectionStore(path, [PreemptionsProjection()]) as store:  # a restart: /x/y is read back
        store.apply(first + later)
        assert rows(store) == [
            ("g1", "over_entitlement", None, ["/x/y"]),
            ("g2", "over_entitlement", None, ["/c", "/x/y"]),
            ("g3", "lower_priority", "big one", ["/c"]),
            ("g4", "over_entitlement", None, []),  # nobody wants more: nobody known
        ]
        assert store.query("SELECT * FROM preemption_wants")[1] == []
