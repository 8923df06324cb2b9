"""PoolStatusProjection: the latest entitlements per tree, their history (changes only, sampled per second
of log time), starvation."""

from __future__ import annotations

import random
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from events import (
    ClockTicked,
    EntitlementsComputed,
    Envelope,
    Event,
    PoolDeleted,
    PoolEntitlement,
    PoolStarvationChanged,
    at_seconds,
    encode,
)
from events.subjects import for_event
from projections import ProjectionStore
from projections.pool_status import PoolStatusProjection
from services.common.log import Stored
from tests.projections.make import T0, gang, stored

CAPACITY = {"cpu": 100.0, "memory": 1000.0, "gpu": 0.0}


def pool(path: str, cpu: float, *, slack: float = 0.0, usage: float = 0.0) -> PoolEntitlement:
    return PoolEntitlement(path=path, entitlement={"cpu": cpu, "memory": round(cpu * 10, 9)},
                           non_slack_entitlement={"cpu": cpu - slack, "memory": round(cpu * 10, 9)},
                           slack_entitlement={"cpu": slack} if slack else {}, fair_share=cpu / 100,
                           usage_share=usage, demand_share=cpu / 100, dominant_kind="cpu")


def computed(*pools: PoolEntitlement, tree: str = "default") -> EntitlementsComputed:
    return EntitlementsComputed(tree=tree, capacity=CAPACITY, pools=list(pools))


def log(*events: Event) -> list[Stored]:
    """`events` at seq 1, 2, ... (time: T0 + seq seconds: each in a second of its own)."""
    return [stored(seq, event, source="admission", basis=seq - 1) for seq, event in enumerate(events, start=1)]


def at(seconds: float, seq: int, event: Event) -> Stored:
    """`event` at `seq`, at T0 + `seconds` of log time (T0 is a whole second)."""
    envelope = Envelope(id=f"ev-{seq}", time=T0 + timedelta(seconds=seconds), source="admission", basis=seq - 1,
                        event=event)  # type: ignore[arg-type]
    return Stored(seq, for_event(event.type, getattr(event, "tree", None), "admission"), encode(envelope), envelope.id)


def timed(*events: tuple[float, Event]) -> list[Stored]:
    """Each event at T0 + its seconds, at seq 1, 2, ..."""
    return [at(seconds, seq, event) for seq, (seconds, event) in enumerate(events, start=1)]


def tick(tree: str = "default") -> ClockTicked:
    return ClockTicked(tree=tree)


# The Peloton user guide example (DOMAIN §3): 10/45/45, then RP1's demand rises and all get 33.33.
HISTORY = log(
    computed(pool("/RP1", 10), pool("/RP2", 45), pool("/RP3", 45)),
    computed(pool("/RP1", 10), pool("/RP2", 45), pool("/RP3", 45)),  # nothing changed
    computed(pool("/RP1", 10), pool("/RP2", 45, usage=0.2), pool("/RP3", 45)),  # RP2 admitted work
    computed(pool("/X", 50), tree="other"),
    computed(pool("/RP1", 33.33), pool("/RP2", 33.33, usage=0.2), pool("/RP3", 33.33)),
    computed(pool("/RP1", 33.33), pool("/RP2", 33.33, usage=0.2)),  # RP3 deleted
    tick(),  # closes the second of the last computation
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
    """One computation per second: each is the last of its second."""
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
        store.apply(log(computed(zero), computed(same), tick()))
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
    schema_version = PoolStatusProjection.schema_version + 1


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


def rows_of(store: ProjectionStore, path: str = "/a", tree: str = "default") -> list[tuple[Any, ...]]:
    """A pool's history rows: seq, seconds after T0, entitlement['cpu'] (None: a NULL row)."""
    _, rows = store.query("SELECT seq, computed_at, entitlement['cpu'] FROM entitlement_history "
                          "WHERE tree = ? AND path = ? ORDER BY seq", [tree, path])
    return [(seq, (time - T0).total_seconds(), cpu) for seq, time, cpu in rows]


def test_a_pool_gets_one_row_per_second_from_the_last_computation_in_it() -> None:
    messages = timed(
        (10.1, computed(pool("/a", 2))),
        (10.4, computed(pool("/a", 3))),
        (10.9, computed(pool("/a", 4))),  # the last of second 10
        (11.2, computed(pool("/a", 5))),  # closes second 10; the last of second 11
        (11.95, tick()),  # before the end of second 11: closes nothing
        (12.0, tick()),  # at its end: closes it
    )
    with ProjectionStore(":memory:", [PoolStatusProjection()]) as store:
        store.apply(messages[:3])
        assert rows_of(store) == []  # second 10 is still open
        assert store.query("SELECT computed_seq, entitlement FROM pool_entitlements WHERE kind = 'cpu'")[1] == [
            (3, 4.0)]  # the exact now
        store.apply(messages[3:4])
        assert rows_of(store) == [(3, 10.9, 4.0)]  # nothing of 10.1 nor 10.4
        store.apply(messages[4:5])
        assert rows_of(store) == [(3, 10.9, 4.0)]
        store.apply(messages[5:])
        assert rows_of(store) == [(3, 10.9, 4.0), (4, 11.2, 5.0)]
        # every kind of the pool's pool_entitlements rows (gpu: 0 in the capacity, not in the event)
        assert store.query("SELECT entitlement, non_slack_entitlement, slack_entitlement, fair_share "
                           "FROM entitlement_history WHERE seq = 4")[1] == [
            ({"cpu": 5.0, "gpu": 0.0, "memory": 50.0}, {"cpu": 5.0, "gpu": 0.0, "memory": 50.0},
             {"cpu": 0.0, "gpu": 0.0, "memory": 0.0}, 0.05)]


def test_a_second_whose_last_values_are_the_previous_rows_writes_nothing() -> None:
    messages = timed(
        (10.2, computed(pool("/a", 2))),
        (11.3, computed(pool("/a", 3))),  # changed, then back within the second
        (11.8, computed(pool("/a", 2))),
        (12.5, tick()),
        (12.6, computed(pool("/a", 2, slack=1))),  # only the split between slack and not changes
        (13.0, tick()),
    )
    with ProjectionStore(":memory:", [PoolStatusProjection()]) as store:
        store.apply(messages)
        assert rows_of(store) == [(1, 10.2, 2.0), (5, 12.6, 2.0)]


def test_a_pool_not_in_the_last_computation_of_a_second_gets_a_null_row() -> None:
    messages = timed(
        (10.0, computed(pool("/a", 1), pool("/b", 1))),
        (11.2, computed(pool("/a", 1))),  # /b out, and back within the second: no row
        (11.6, computed(pool("/a", 1), pool("/b", 1))),
        (12.3, computed(pool("/a", 1))),  # /b deleted
        (13.0, tick()),
        (13.5, computed(pool("/a", 1), pool("/b", 2))),  # a /b again
        (14.0, tick()),
    )
    with ProjectionStore(":memory:", [PoolStatusProjection()]) as store:
        store.apply(messages)
        assert rows_of(store, "/a") == [(1, 10.0, 1.0)]
        assert rows_of(store, "/b") == [(1, 10.0, 1.0), (4, 12.3, None), (6, 13.5, 2.0)]
        assert store.query("SELECT non_slack_entitlement, slack_entitlement, fair_share, usage_share, demand_share, "
                           "dominant_kind FROM entitlement_history WHERE seq = 4")[1] == [(None,) * 6]


def test_any_event_closes_the_seconds_of_every_tree() -> None:
    messages = timed(
        (10.5, computed(pool("/a", 1))),
        (10.7, computed(pool("/x", 7), tree="other")),
        (11.1, gang(1)),  # a gang event of another tree closes both
    )
    with ProjectionStore(":memory:", [PoolStatusProjection()]) as store:
        store.apply(messages)
        assert rows_of(store) == [(1, 10.5, 1.0)]
        assert rows_of(store, "/x", "other") == [(2, 10.7, 7.0)]


def test_a_second_left_open_by_a_stop_is_closed_once_after_it(tmp_path: Path) -> None:
    messages = timed(
        (9.5, computed(pool("/a", 1), pool("/b", 1))),
        (10.1, computed(pool("/a", 2), pool("/b", 1))),
        (10.9, computed(pool("/a", 4))),  # /b deleted: the last of second 10, open when the store stops
        (11.5, tick()),
        (12.5, tick()),
        (13.5, tick()),
    )
    path = tmp_path / "tree.duckdb"
    with ProjectionStore(path, [PoolStatusProjection()]) as store:
        store.apply(messages[:3])
        assert rows_of(store, "/a") == [(1, 9.5, 1.0)] and rows_of(store, "/b") == [(1, 9.5, 1.0)]
    with ProjectionStore(path, [PoolStatusProjection()]) as store:
        store.apply(messages[3:4])
        assert rows_of(store, "/a") == [(1, 9.5, 1.0), (3, 10.9, 4.0)]
        assert rows_of(store, "/b") == [(1, 9.5, 1.0), (3, 10.9, None)]
        store.apply(messages[4:5])
        closed = snapshot(store)
    with ProjectionStore(path, [PoolStatusProjection()]) as store:  # second 10 read back again: closed already
        store.apply(messages[5:])
        assert snapshot(store) == closed
    with ProjectionStore(":memory:", [PoolStatusProjection()]) as whole:
        whole.apply(messages)
        assert snapshot(whole) == closed


def random_log(seed: int, count: int = 160, back: float = 0.03) -> list[Stored]:
    """Computations of two trees a few times a second (few values: many repeat), pools deleted
    and back, ticks, gang events, and the log's time going back now and then (`back`: how often)."""
    rng = random.Random(seed)
    events: list[tuple[float, Event]] = []
    now = 100.0
    for n in range(count):
        now += rng.choice([0.05, 0.1, 0.3, 0.7, 1.2])
        seconds = now - 1.5 if rng.random() < back else now
        kind = rng.random()
        if kind < 0.7:
            tree = rng.choice(["default", "other"])
            pools = [pool(path, rng.choice([1, 2, 3]), usage=rng.choice([0.0, 0.5]))
                     for path in ("/a", "/b", "/c") if rng.random() < 0.8]
            events.append((seconds, computed(*pools, tree=tree)))
        elif kind < 0.85:
            events.append((seconds, tick(rng.choice(["default", "other"]))))
        else:
            events.append((seconds, gang(n)))
    return timed(*events)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_same_log_gives_the_same_rows_whatever_the_batches(tmp_path: Path, seed: int) -> None:
    messages = random_log(seed)
    with ProjectionStore(":memory:", [PoolStatusProjection()]) as whole:
        whole.apply(messages)
        expected = snapshot(whole)
    assert expected["entitlement_history"]
    rng = random.Random(seed)
    batchings = {
        "one by one": [[m] for m in messages],
        "random": [messages[start : start + size] for start, size in _cuts(rng, len(messages))],
    }
    for name, batches in batchings.items():
        with ProjectionStore(":memory:", [PoolStatusProjection()]) as store:
            for batch in batches:
                store.apply(batch)
            assert snapshot(store) == expected, name
    with ProjectionStore(":memory:", [PoolStatusProjection()], chunk_size=1) as store:
        store.apply(messages)
        assert snapshot(store) == expected, "chunks of one"
    path = tmp_path / "tree.duckdb"
    for start, size in _cuts(rng, len(messages)):  # a stop after every batch: read back
        with ProjectionStore(path, [PoolStatusProjection()]) as store:
            store.apply(messages[start : start + size])
    with ProjectionStore(path, [PoolStatusProjection()]) as store:
        assert snapshot(store) == expected, "stopped after every batch"


def _cuts(rng: random.Random, count: int) -> list[tuple[int, int]]:
    found = []
    start = 0
    while start < count:
        size = rng.randint(1, 15)
        found.append((start, size))
        start += size
    return found


@pytest.mark.parametrize("seed", [0, 1])
def test_at_most_one_row_per_pool_per_second(seed: int) -> None:
    messages = random_log(seed, back=0.0)
    computations = sum(1 for m in messages if b'"EntitlementsComputed"' in m.data)
    with ProjectionStore(":memory:", [PoolStatusProjection()]) as store:
        store.apply(messages)
        _, twice = store.query("SELECT tree, path, floor(epoch(computed_at)) AS second, count(*) "
                               "FROM entitlement_history GROUP BY ALL HAVING count(*) > 1")
        assert twice == []
        _, [(written,)] = store.query("SELECT count(DISTINCT seq) FROM entitlement_history")
        assert 0 < written < computations  # some computations leave no row


def test_a_computation_before_the_open_second_closes_it_and_opens_its_own(tmp_path: Path) -> None:
    """The log's time may go back (events of several sources): a tree's computation in a second
    before its open one closes that one and opens its own, as reading it back after a stop does."""
    messages = timed(
        (10.5, computed(pool("/a", 1))),
        (11.5, computed(pool("/a", 2))),
        (10.8, computed(pool("/a", 3))),  # closes second 11 (its last: 11.5), opens second 10 again
        (11.2, computed(pool("/a", 4))),  # closes that
        (12.0, tick()),
    )
    expected = [(1, 10.5, 1.0), (2, 11.5, 2.0), (3, 10.8, 3.0), (4, 11.2, 4.0)]
    with ProjectionStore(":memory:", [PoolStatusProjection()]) as store:
        store.apply(messages)
        assert rows_of(store) == expected
    for cut in range(1, len(messages)):
        path = tmp_path / f"tree-{cut}.duckdb"
        for batch in (messages[:cut], messages[cut:]):
            with ProjectionStore(path, [PoolStatusProjection()]) as store:
                store.apply(batch)
        with ProjectionStore(path, [PoolStatusProjection()]) as store:
            assert rows_of(store) == expected, f"stopped after {cut}"
