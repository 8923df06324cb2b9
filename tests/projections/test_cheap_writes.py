"""The cheaper ways the read models are written give the rows the former ways gave: a few rows
through an appender rather than a registered Arrow table, gang and task keys known absent from
memory rather than looked up (and no delete before inserting them), each tree's open second of
entitlements and its pools' last history rows kept in memory rather than read back at every call.
Every table, for every public scenario and the lifecycle one, cut into batches of any size, rolled
back or not."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import duckdb
import pyarrow as pa
import pytest

import projections.base as base
import projections.gang_rows as gang_rows
from events import (
    EntitlementsComputed,
    GangEnqueued,
    GangFinished,
    PoolEntitlement,
    TaskSpec,
    TaskStateChanged,
    TreeConfigured,
    TreeOptions,
)
from projections import EventLogProjection, Item, PoolTreeProjection, Projection, ProjectionStore
from projections.base import Connection, delete_rows, insert_rows, update_rows_of
from projections.gangs import GangsProjection
from projections.pool_status import PoolStatusProjection
from projections.read_models import PreemptionsProjection, RejectionsProjection
from services.common.log import Stored
from tests.projections.make import stored
from tests.projections.test_gangs import POOL, History, admitted, enqueue, report
from tests.projections.test_gangs_in_memory import cuts, full_store, tables, tables_of
from tests.projections.test_read_models_scenarios import LIFECYCLE, SHARED_FILES, run


@pytest.fixture(scope="module", params=[*SHARED_FILES, "lifecycle"],
                ids=[*(p.stem for p in SHARED_FILES), "lifecycle"])
def scenario_log(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> list[Stored]:
    path = request.param
    if path == "lifecycle":
        path = tmp_path_factory.mktemp("cheap-writes") / "lifecycle.yaml"
        path.write_text(LIFECYCLE)
    return run(path).log


class ReadBackPoolStatus(PoolStatusProjection):
    """The pool_status projection reading back at every call what it keeps in memory (as after a
    stop): each tree's open second from `pool_entitlements`, its pools' last rows from
    `entitlement_history`."""

    def apply(self, conn: Connection, items: Sequence[Item]) -> None:
        self.rolled_back()
        super().apply(conn, items)


def former_store() -> ProjectionStore:
    return ProjectionStore(":memory:", [PoolTreeProjection(), EventLogProjection(), GangsProjection(),
                                        ReadBackPoolStatus(), PreemptionsProjection(), RejectionsProjection()])


def _tables_by_batches(log: list[Stored], store: ProjectionStore, seed: int | None) -> dict[str, Any]:
    with store:
        for batch in ([log] if seed is None else cuts(log, seed)):
            store.apply(batch)
        return tables(store)


@pytest.mark.parametrize("seed", [None, 0, 1])
def test_cheap_writes_give_the_rows_of_the_former_ones(scenario_log: list[Stored], seed: int | None,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    cheap = _tables_by_batches(scenario_log, full_store(), seed)
    with monkeypatch.context() as m:
        m.setattr(base, "SMALL_WRITE", 0)
        m.setattr(base, "SMALL_FLAT_WRITE", 0)
        m.setattr(gang_rows, "KEYS_LIMIT", -1)
        former = _tables_by_batches(scenario_log, former_store(), seed)
    assert cheap == former
    assert any(cheap["entitlement_history"]) and any(cheap["gangs"])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pool_entitlements_kept_in_memory_give_the_rows_read_back_ones_gave(scenario_log: list[Stored],
                                                                           seed: int) -> None:
    assert _tables_by_batches(scenario_log, full_store(), seed) == _tables_by_batches(
        scenario_log, former_store(), seed)


def _computed(seq: int, capacity: dict[str, float], pools: dict[str, dict[str, float]], fair: float = 0.0) -> Stored:
    return stored(seq, EntitlementsComputed(tree="default", capacity=capacity, pools=[
        PoolEntitlement(path=path, entitlement=values, non_slack_entitlement=values, slack_entitlement={},
                        fair_share=fair) for path, values in pools.items()]), source="admission", basis=seq - 1)


def test_history_of_pools_without_any_kind() -> None:
    """A pool with no kind (a tree without capacity, empty maps) has no `pool_entitlements` row,
    and counts as not in the computation for the history (one computation per second here: each
    closes the second before it). A tree's last computation with no pool of any kind is not
    in `pool_entitlements` at all: its open second is not read back (the NULL rows of seq 6
    come only when it stays in memory)."""
    log = [
        _computed(1, {}, {"/": {}, "/a": {"cpu": 1.0}}),
        _computed(2, {}, {"/": {}, "/a": {"cpu": 1.0}}),
        _computed(3, {}, {"/": {}, "/a": {"cpu": 2.0}}, fair=0.5),
        _computed(4, {"cpu": 4.0}, {"/": {}, "/a": {"cpu": 2.0}}, fair=0.5),
        _computed(5, {"cpu": 4.0}, {"/": {}}, fair=0.5),
        _computed(6, {}, {"/": {}}, fair=0.5),
        stored(7, TreeConfigured(tree="default", options=TreeOptions()), source="tree"),
    ]
    expected = [
        ("/a", 1, {"cpu": 1.0}, 0.0),
        ("/a", 3, {"cpu": 2.0}, 0.5),
        ("/", 4, {"cpu": 0.0}, 0.5),
        ("/a", 5, None, None),  # not in seq 5
        ("/", 6, None, None),  # no kind in seq 6
    ]
    for size in (1, 2, 3, 6, 7):
        batches = [log[i : i + size] for i in range(0, len(log), size)]
        results = []
        for projection in (PoolStatusProjection(), ReadBackPoolStatus()):
            with ProjectionStore(":memory:", [projection]) as store:
                for batch in batches:
                    store.apply(batch)
                results.append({t: store.query(f"SELECT * FROM {t} ORDER BY ALL")[1]
                                for t in ("pool_entitlements", "entitlement_history")})
                _, rows = store.query("SELECT path, seq, entitlement, fair_share FROM entitlement_history ORDER BY seq")
                read_back_loses = isinstance(projection, ReadBackPoolStatus) and any(
                    batch[0].seq == 7 for batch in batches)  # seq 6 ended a call: not read back
                assert rows == (expected[:-1] if read_back_loses else expected), f"batches of {size}"
        if size == 7:
            assert results[0] == results[1]


def _takeover_of_a_finished_gang() -> History:
    """Gang `a` admitted, run and done (no longer kept in memory); gang `b` comes with the task id
    `a/0` (admission forgets the tasks of finished gangs): its row replaces `a`'s."""
    h = History()
    h.add(TreeConfigured(tree="default", options=TreeOptions()), source="tree")
    h.add(enqueue("a", 1, size=1, first=0))
    h.cycle()
    h.cycle(admitted("a"))
    h.add(report("a/0", "running"))
    h.add(report("a/0", "succeeded"))
    h.cycle()
    h.add(GangFinished(tree="default", gang="a", pool=POOL, outcome="done"), source="admission")
    h.add(GangEnqueued(gang="b", pool=POOL, job="job-b", user="bob", size=2,
                       tasks=[TaskSpec(id="a/0", resources={"cpu": 9.0}),
                              TaskSpec(id="b/1", resources={"cpu": 1.0})]))
    h.cycle()
    h.cycle(admitted("b"))
    h.add(TaskStateChanged(tree="default", gang="b", task="a/0", state="running"))
    h.cycle()
    return h


@pytest.mark.parametrize("keys_limit", [gang_rows.KEYS_LIMIT, -1])
def test_a_task_id_of_a_gang_not_kept_is_taken_over(keys_limit: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gang_rows, "KEYS_LIMIT", keys_limit)
    h = _takeover_of_a_finished_gang()
    with ProjectionStore(":memory:", [GangsProjection()]) as whole:
        whole.apply(h.messages)
        expected = tables_of(whole)
    assert [row[:3] for row in expected["tasks"]] == [("default", "a/0", "b"), ("default", "b/1", "b")]
    for size in (1, 2, 3):
        with ProjectionStore(":memory:", [GangsProjection()]) as store:
            for start in range(0, len(h.messages), size):
                store.apply(h.messages[start : start + size])
            assert tables_of(store) == expected, f"batches of {size}"


def test_the_keys_are_forgotten_beyond_their_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gang_rows, "KEYS_LIMIT", 3)
    h = _takeover_of_a_finished_gang()
    projection = GangsProjection()
    kept: list[bool] = []
    with ProjectionStore(":memory:", [projection]) as store:
        for message in h.messages:
            store.apply([message])
            kept.append(projection._rows.keys is not None)
        assert kept[0] is False and True in kept  # read once a fold needs them
        assert projection._rows.keys is None and projection._rows.keys_off  # 2 gangs and 2 tasks: beyond 3
        with ProjectionStore(":memory:", [GangsProjection()]) as whole:
            whole.apply(h.messages)
            assert tables_of(store) == tables_of(whole)


_SCHEMA = pa.schema([("a", pa.int64()), ("b", pa.string()), ("m", pa.map_(pa.string(), pa.float64())),
                     ("t", pa.timestamp("us", tz="UTC"))])
_KEY = pa.schema([("a", pa.int64())])
_T = datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)


def _rows(conn: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = conn.sql("SELECT * FROM u ORDER BY a").to_arrow_table().to_pylist(
        maps_as_pydicts="strict")
    return result


@pytest.mark.parametrize("count", [1, base.SMALL_WRITE, base.SMALL_WRITE + 1, base.SMALL_FLAT_WRITE + 1, 500])
def test_small_and_large_writes_store_the_same_values(count: int) -> None:
    """Through an appender (up to SMALL_WRITE rows) or Arrow: the same rows, maps, times, NULLs."""
    conn = duckdb.connect()
    conn.execute("SET TimeZone = 'UTC'")
    conn.execute("CREATE TABLE u (a BIGINT PRIMARY KEY, b VARCHAR, m MAP(VARCHAR, DOUBLE), t TIMESTAMPTZ)")
    rows = [(i, None if i % 3 else f"r{i}", None if i % 4 == 1 else {"cpu": i / 3, "gpu": 0.0},
             None if i % 5 == 2 else _T + timedelta(microseconds=i)) for i in range(count)]
    insert_rows(conn, "u", _SCHEMA, rows)
    expected = [dict(zip(_SCHEMA.names, row, strict=True)) for row in rows]
    assert _rows(conn) == expected
    update_rows_of(conn, "u", ("a",), pa.schema([_SCHEMA.field("a"), _SCHEMA.field("b")]),
                   [(i, f"u{i}") for i in range(0, count, 2)])
    for row in expected[::2]:
        row["b"] = f"u{row['a']}"
    assert _rows(conn) == expected
    delete_rows(conn, "u", _KEY, [(i,) for i in range(1, count, 2)])
    assert _rows(conn) == expected[::2]


def test_a_failed_small_write_leaves_nothing_to_flush_later() -> None:
    conn = duckdb.connect()
    conn.execute("CREATE TABLE u (a BIGINT PRIMARY KEY, b VARCHAR, m MAP(VARCHAR, DOUBLE), t TIMESTAMPTZ)")
    conn.begin()
    with pytest.raises(duckdb.ConstraintException):
        insert_rows(conn, "u", _SCHEMA, [(1, "x", None, None), (1, "y", None, None)])
    conn.rollback()
    conn.begin()
    insert_rows(conn, "u", _SCHEMA, [(2, "z", None, None)])
    conn.commit()
    assert [r["a"] for r in _rows(conn)] == [2]


class _Fails(Projection):
    """A projection that fails after the others wrote: the transaction is rolled back."""

    name = "fails"
    schema_version = 1

    def create(self, conn: Connection) -> None:
        return

    def apply(self, conn: Connection, items: Sequence[Item]) -> None:
        raise RuntimeError("boom")


def test_a_rolled_back_transaction_leaves_no_row_of_a_small_write() -> None:
    log = [stored(1, TreeConfigured(tree="default", options=TreeOptions()), source="tree"),
           _computed(2, {"cpu": 4.0}, {"/": {"cpu": 4.0}})]
    with ProjectionStore(":memory:", [EventLogProjection(), PoolStatusProjection(), _Fails()]) as store:
        with pytest.raises(RuntimeError):
            store.apply(log)
        for table in ("event_log", "pool_entitlements", "entitlement_history"):
            assert store.query(f"SELECT count(*) FROM {table}")[1] == [(0,)]
