"""EventLogProjection: every message one row, decoded or not; a 100k-event batch in one go."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from events import (
    ClockTicked,
    GangAdmitted,
    HostRegistered,
    InputRejected,
    TaskSpec,
    TreeConfigured,
    TreeOptions,
)
from projections import MALFORMED, EventLogProjection, ProjectionStore
from projections.event_log import zstd_available
from services.common.log import Stored
from tests.projections.make import gang, gangs, stored


@pytest.fixture
def store() -> Iterator[ProjectionStore]:
    with ProjectionStore(":memory:", [EventLogProjection()]) as store:
        yield store


def test_each_event_is_a_row_with_its_envelope_and_body(store: ProjectionStore) -> None:
    admitted = GangAdmitted(
        tree="research",
        gang="g1",
        pool="/ATG/AV",
        queue="pending",
        tasks=[TaskSpec(id="t1", resources={"cpu": 8.0, "memory": 32768.0})],
    )
    store.apply(
        [
            stored(1, TreeConfigured(tree="research", options=TreeOptions(policy="dominant"))),
            stored(2, HostRegistered(host="h1", resources={"cpu": 64.0}), source="cli"),
            stored(3, gang(3, tree="research"), source="sdk:batch"),
            stored(4, admitted, source="admission", basis=3, causation="ev-3", event_id="dec-1"),
            stored(5, ClockTicked()),
        ]
    )
    _, rows = store.query(
        "SELECT seq, id, type, version, strftime(time, '%Y-%m-%dT%H:%M:%S'), source, subject, tree, basis,"
        " causation, error, raw FROM event_log ORDER BY seq"
    )
    assert rows == [
        (1, "ev-1", "TreeConfigured", 1, "2024-05-01T12:00:01", "test", "poolwise.config.research",
         "research", None, None, None, None),
        (2, "ev-2", "HostRegistered", 1, "2024-05-01T12:00:02", "cli", "poolwise.hosts",
         None, None, None, None, None),
        (3, "ev-3", "GangEnqueued", 1, "2024-05-01T12:00:03", "sdk:batch", "poolwise.gang.research",
         "research", None, None, None, None),
        (4, "dec-1", "GangAdmitted", 1, "2024-05-01T12:00:04", "admission",
         "poolwise.decision.research.admission", "research", 3, "ev-3", None, None),
        (5, "ev-5", "ClockTicked", 1, "2024-05-01T12:00:05", "test", "poolwise.clock._",
         None, None, None, None, None),
    ]
    _, rows = store.query(
        "SELECT data->>'gang', CAST(data->'tasks'->0->'resources'->>'cpu' AS DOUBLE), data->>'policy'"
        " FROM event_log WHERE seq IN (3, 4) ORDER BY seq"
    )
    assert rows == [("g3", 1.5, None), ("g1", 8.0, None)]
    _, rows = store.query("SELECT data FROM event_log WHERE seq = 1")
    assert json.loads(rows[0][0])["options"]["policy"] == "dominant"


def test_time_is_stored_as_an_instant_in_utc(store: ProjectionStore) -> None:
    data = (
        b'{"id":"x","time":"2024-05-01T14:00:00+02:00","event":{"type":"ClockTicked","version":1}}'
    )
    store.apply([Stored(1, "poolwise.clock._", data)])
    _, rows = store.query("SELECT epoch(time), time = TIMESTAMPTZ '2024-05-01 12:00:00+00' FROM event_log")
    assert rows == [(1714564800.0, True)]


def test_malformed_messages_are_rows_of_type_malformed_with_the_raw_text(store: ProjectionStore) -> None:
    good = gangs(1, 1)
    unknown_type = b'{"id":"u1","time":"2024-05-01T12:00:00Z","event":{"type":"GangExploded","version":1}}'
    missing_field = json.loads(good[0].data)
    del missing_field["event"]["pool"]
    missing_field["id"] = "m1"
    store.apply(
        [
            *good,
            Stored(2, "poolwise.gang.default", b"{not json", msg_id="nats-2"),
            Stored(3, "poolwise.gang.default", unknown_type),
            Stored(4, "poolwise.gang.default", json.dumps(missing_field).encode()),
            Stored(5, "poolwise.task.default", b"\xff\xfe\x00binary"),
        ]
    )
    _, rows = store.query(
        "SELECT seq, id, type, version, time, subject, data, error, raw FROM event_log"
        " WHERE seq > 1 ORDER BY seq"
    )
    assert [row[:4] for row in rows] == [
        (2, "nats-2", MALFORMED, None),
        (3, "u1", MALFORMED, None),
        (4, "m1", MALFORMED, None),
        (5, None, MALFORMED, None),
    ]
    assert all(row[4] is None and row[6] is None for row in rows)  # no time, no data
    assert [row[5] for row in rows] == ["poolwise.gang.default"] * 3 + ["poolwise.task.default"]
    errors = [row[7] for row in rows]
    assert "[json]" in errors[0]
    assert "GangExploded" in errors[1] and "[unknown_type]" in errors[1]
    assert errors[2].startswith("event.pool:") and "[missing]" in errors[2]
    assert "[json]" in errors[3]
    raws = [row[8] for row in rows]
    assert raws[0] == "{not json"
    assert raws[1] == unknown_type.decode()
    assert json.loads(raws[2]) == missing_field
    assert raws[3].endswith("binary") and "\ufffd" in raws[3]
    _, counts = store.query("SELECT type, count(*) FROM event_log GROUP BY type ORDER BY type")
    assert counts == [("GangEnqueued", 1), (MALFORMED, 4)]


def test_a_rejection_records_its_input(store: ProjectionStore) -> None:
    rejected = InputRejected(tree="default", ref="2", input_type="GangEnqueued", reason="bad", rule="json",
                             input="{not json", input_seq=2)
    store.apply([stored(3, rejected, source="admission", basis=2)])
    _, rows = store.query("SELECT subject, data->>'input', CAST(data->>'input_seq' AS INT) FROM event_log")
    assert rows == [("poolwise.rejected.default", "{not json", 2)]


def test_a_batch_of_100k_events_applies_in_one_transaction(store: ProjectionStore) -> None:
    n = 100_000
    batch = gangs(1, n)
    batch[49_999] = Stored(50_000, "poolwise.gang.default", b"garbage")
    assert store.apply(batch) == n
    _, rows = store.query(
        "SELECT count(*), count(DISTINCT seq), count(DISTINCT id), min(seq), max(seq), sum(seq),"
        " count(*) FILTER (WHERE type = '_malformed'), sum(CAST(data->>'priority' AS INT))"
        " FROM event_log"
    )
    priorities = sum(seq % 3 for seq in range(1, n + 1)) - 50_000 % 3
    assert rows == [(n, n, n - 1, 1, n, n * (n + 1) // 2, 1, priorities)]
    assert store.checkpoint("event_log") == n


def test_the_bodies_are_stored_compressed_with_zstd(tmp_path: Path) -> None:
    """In the file, `data` is written with zstd (its JSON bodies compress to about half of what
    DuckDB's default for strings gives); the other columns keep DuckDB's choice."""
    path = tmp_path / "log.duckdb"
    with ProjectionStore(path, [EventLogProjection()]) as store:
        store.apply(gangs(1, 5_000))
        store._conn.execute("CHECKPOINT")
        _, rows = store.query("SELECT column_name, list(DISTINCT compression ORDER BY compression) "
                              "FROM pragma_storage_info('event_log') WHERE segment_type <> 'VALIDITY' "
                              "GROUP BY ALL ORDER BY ALL")
        compression = dict(rows)
        assert compression["data"] == ["ZSTD"]
        assert "ZSTD" not in compression["id"]
        _, rows = store.query("SELECT count(*), count(DISTINCT data->>'gang') FROM event_log")
        assert rows == [(5_000, 5_000)]


def test_a_file_of_an_older_storage_version_keeps_duckdbs_default(tmp_path: Path) -> None:
    """A file made in a storage version without zstd for strings (DuckDB refuses such a column
    there): the table is made without it, and the store opens and applies as ever."""
    path = tmp_path / "old.duckdb"
    duckdb.connect(str(path), config={"storage_compatibility_version": "v1.0.0"}).close()
    with ProjectionStore(path, [EventLogProjection()]) as store:
        assert not zstd_available(store._conn)
        store.apply(gangs(1, 10))
        assert store.query("SELECT count(*) FROM event_log")[1] == [(10,)]
    with ProjectionStore(tmp_path / "new.duckdb", [EventLogProjection()]) as store:
        assert zstd_available(store._conn)
