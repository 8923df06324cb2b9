"""`preemption_wants` keeps a pool that was deleted and created again at the same path before the
next computation: admission's entitlement map still holds its numbers then, so a computation whose
numbers for it come out the same does not write it again (only what changed is written, in a tree
of more than `WHOLE_POOLS` pools), and the pool must still be named as wanting more."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from events import EntitlementsComputed, Event, PoolConfig, PoolConfigChanged, PoolDeleted, PreemptionRequested
from projections import ProjectionStore
from projections.records import PreemptionsProjection
from services.admission.domain.entitle import WHOLE_POOLS
from services.common.log import Stored
from tests.explain.world import World, cancel, gang, pool, world
from tests.projections.make import stored
from tests.projections.test_preemption_wants import wanting as pool_wanting

OVER = "over non-slack entitlement since 2: cpu 14 held, 10 entitled"


@dataclass(slots=True)
class Logged(World):
    """Admission's fold, with every event it was fed or decided kept in log order."""

    log: list[Event] = field(default_factory=list)

    def add(self, event: Event, at: float | None = None) -> None:
        self.log.append(event)
        World.add(self, event, at)


def admission_log() -> list[Event]:
    """/p0 wants more (entitled to half the cpu, holds none, asks 60); its gang is cancelled, the
    pool deleted and made again, and the same gang asked for again, all before the next cycle."""
    w = world(*(pool(f"/p{i}") for i in range(WHOLE_POOLS + 2)), capacity={"cpu": 100.0})
    logged = Logged(w.state, w.history, w.seq, w.time)
    logged.feed(gang("x", "/p1", cpu=50.0), gang("y", "/p1", cpu=50.0), gang("a", "/p0", cpu=60.0), at=1).tick(at=2)
    logged.feed(cancel("a"), PoolDeleted(tree="default", path="/p0"),
                PoolConfigChanged(tree="default", path="/p0", config=PoolConfig(), created=True),
                gang("a2", "/p0", cpu=60.0), at=3).tick(at=4)
    return logged.log


def as_stored(events: list[Event], first: int = 1) -> list[Stored]:
    return [stored(first + i, e, source="admission" if isinstance(e, EntitlementsComputed) else "test")
            for i, e in enumerate(events)]


def written(event: EntitlementsComputed) -> list[str]:
    return [p.path for p in event.pools]


def test_a_pool_made_again_with_the_same_numbers_still_wants_more(tmp_path: Path) -> None:
    log = admission_log()
    computed = [e for e in log if isinstance(e, EntitlementsComputed)]
    deleted = log.index(next(e for e in log if isinstance(e, PoolDeleted)))
    before, after = computed[: -1], computed[-1]
    assert any("/p0" in written(e) for e in before) and all(log.index(e) < deleted for e in before)
    assert not after.replace and "/p0" not in written(after) and "/p0" not in after.removed  # not written again
    items = as_stored(log)
    items.append(stored(len(items) + 1, PreemptionRequested(tree="default", pool="/p1", gang="x", tasks=["x/0"],
                                                            reason=OVER), source="preemption"))
    with ProjectionStore(tmp_path / "tree.duckdb", [PreemptionsProjection()]) as store:
        store.apply(items)
        assert store.query("SELECT for_pools FROM preemptions")[1] == [(["/p0"],)]


def wanting(path: str) -> EntitlementsComputed:
    return EntitlementsComputed(tree="t", capacity={"cpu": 100.0}, pools=[pool_wanting(path)], replace=False)


def over(seq: int) -> Stored:
    return stored(seq, PreemptionRequested(tree="t", pool="/c", gang=f"g{seq}", tasks=[f"g{seq}/0"], reason=OVER),
                  source="preemption")


def test_a_deleted_pool_is_remembered_across_a_restart_and_forgotten_once_removed(tmp_path: Path) -> None:
    path = tmp_path / "tree.duckdb"
    with ProjectionStore(path, [PreemptionsProjection()]) as store:
        store.apply([stored(1, wanting("/a"), source="admission"), stored(2, PoolDeleted(tree="t", path="/a")),
                     over(3)])
    with ProjectionStore(path, [PreemptionsProjection()]) as store:  # read back after a stop
        store.apply([stored(4, PoolConfigChanged(tree="t", path="/a", config=PoolConfig(), created=True)), over(5),
                     stored(6, PoolDeleted(tree="t", path="/a")),
                     stored(7, EntitlementsComputed(tree="t", capacity={"cpu": 100.0}, pools=[],
                                                    replace=False, removed=["/a"]), source="admission"),
                     stored(8, PoolConfigChanged(tree="t", path="/a", config=PoolConfig(), created=True)), over(9)])
        assert store.query("SELECT requested_seq, for_pools FROM preemptions ORDER BY 1")[1] == [
            (3, []), (5, ["/a"]), (9, [])]
        assert store.query("SELECT * FROM preemption_wants")[1] == []
