"""ProjectionStore: rows and checkpoints commit together, resume, rebuild on schema change, reads."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from collections.abc import Sequence
from pathlib import Path

import duckdb
import pytest

from events import HostRegistered, TreeConfigured, TreeOptions
from projections import (
    EventLogProjection,
    Item,
    NotReadOnly,
    PoolTreeProjection,
    Projection,
    ProjectionStore,
    StoreBusy,
)
from projections.base import Connection, insert_arrow
from services.common.log import Stored
from tests.projections.make import gangs, stored

REPO = Path(__file__).resolve().parents[2]


class Exploding(Projection):
    """Writes a row per item, and raises at `fail_at` after writing the rows before it."""

    name = "exploding"
    schema_version = 1
    tables = ("exploded",)

    def __init__(self, fail_at: int | None = None) -> None:
        self.fail_at = fail_at

    def create(self, conn: Connection) -> None:
        conn.execute("CREATE TABLE exploded (seq BIGINT)")

    def apply(self, conn: Connection, items: Sequence[Item]) -> None:
        import pyarrow as pa

        before = [item.seq for item in items if self.fail_at is None or item.seq < self.fail_at]
        insert_arrow(conn, "exploded", pa.table({"seq": pa.array(before, pa.int64())}))
        if self.fail_at is not None and any(item.seq >= self.fail_at for item in items):
            raise RuntimeError(f"boom at {self.fail_at}")


def count(store: ProjectionStore, table: str) -> int:
    _, rows = store.query(f"SELECT count(*) FROM {table}")
    return int(rows[0][0])


def test_a_failing_projection_leaves_neither_rows_nor_checkpoints(tmp_path: Path) -> None:
    path = tmp_path / "svc.duckdb"
    exploding = Exploding(fail_at=5)
    with ProjectionStore(path, [EventLogProjection(), exploding]) as store:
        with pytest.raises(RuntimeError, match="boom at 5"):
            store.apply(gangs(1, 10))
        # event_log ran first and inserted 10 rows; `exploded` got 4 rows before raising: all gone.
        assert count(store, "event_log") == 0
        assert count(store, "exploded") == 0
        assert store.checkpoints() == {"event_log": 0, "exploding": 0}
        assert store.lowest_checkpoint == 0

    with ProjectionStore(path, [EventLogProjection(), Exploding()]) as store:  # "after the crash"
        assert store.checkpoints() == {"event_log": 0, "exploding": 0}
        assert store.rebuilt == ()
        assert store.apply(gangs(1, 10)) == 10
        assert count(store, "event_log") == 10
        assert count(store, "exploded") == 10
        _, rows = store.query("SELECT projection, last_seq FROM checkpoints ORDER BY projection")
        assert rows == [("event_log", 10), ("exploding", 10)]


def test_the_store_stays_usable_after_a_failed_batch() -> None:
    exploding = Exploding(fail_at=3)
    with ProjectionStore(":memory:", [EventLogProjection(), exploding]) as store:
        store.apply(gangs(1, 2))
        with pytest.raises(RuntimeError):
            store.apply(gangs(3, 4))
        assert store.checkpoints() == {"event_log": 2, "exploding": 2}
        exploding.fail_at = None
        store.apply(gangs(3, 4))  # the redelivered batch
        assert count(store, "event_log") == 4
        assert count(store, "exploded") == 4


def test_resume_after_checkpoint_applies_nothing_twice(tmp_path: Path) -> None:
    path = tmp_path / "svc.duckdb"
    with ProjectionStore(path, [EventLogProjection()]) as store:
        assert store.rebuilt == ("event_log",)
        assert store.apply(gangs(1, 100)) == 100

    with ProjectionStore(path, [EventLogProjection()]) as store:
        assert store.rebuilt == ()
        assert store.checkpoint("event_log") == 100
        assert store.lowest_checkpoint == 100
        assert store.apply(gangs(50, 150)) == 150
        _, rows = store.query(
            "SELECT count(*), count(DISTINCT seq), count(DISTINCT id), min(seq), max(seq) FROM event_log"
        )
        assert rows == [(150, 150, 150, 1, 150)]


def test_a_redelivered_batch_and_repeated_seqs_have_one_effect() -> None:
    with ProjectionStore(":memory:", [EventLogProjection()]) as store:
        batch = gangs(1, 10)
        store.apply(batch)
        assert store.apply(batch) == 10
        assert store.apply(list(reversed(gangs(5, 12))) + gangs(11, 12)) == 12
        _, rows = store.query("SELECT count(*), count(DISTINCT seq) FROM event_log")
        assert rows == [(12, 12)]
        assert store.apply([]) == 12


def test_checkpoints_advance_over_gaps_in_sequence() -> None:
    with ProjectionStore(":memory:", [EventLogProjection()]) as store:
        store.apply([*gangs(3, 3), *gangs(9, 9)])  # a filtered consumer sees gaps
        assert store.checkpoint("event_log") == 9
        store.apply(gangs(5, 5))  # at or below the checkpoint: skipped
        assert count(store, "event_log") == 2


class EventLogNext(EventLogProjection):
    schema_version = EventLogProjection.schema_version + 1


def tree_event(seq: int) -> Stored:
    return stored(seq, TreeConfigured(tree="default", options=TreeOptions()))


def test_a_schema_version_bump_drops_and_rebuilds_only_that_projection(tmp_path: Path) -> None:
    path = tmp_path / "svc.duckdb"
    log = [tree_event(1), *gangs(2, 20)]
    with ProjectionStore(path, [EventLogProjection(), PoolTreeProjection()]) as store:
        store.apply(log)
        assert store.checkpoints() == {"event_log": 20, "pool_tree": 20}

    with ProjectionStore(path, [EventLogNext(), PoolTreeProjection()]) as store:
        assert store.rebuilt == ("event_log",)
        assert store.checkpoints() == {"event_log": 0, "pool_tree": 20}
        assert store.lowest_checkpoint == 0  # the caller replays the log from 1
        assert count(store, "event_log") == 0
        _, rows = store.query(
            "SELECT schema_version, last_seq FROM checkpoints WHERE projection = 'event_log'"
        )
        assert rows == [(EventLogNext.schema_version, 0)]

        store.apply(log)  # the replay
        assert store.checkpoints() == {"event_log": 20, "pool_tree": 20}
        assert count(store, "event_log") == 20
        # pool_tree was not applied again: its tree was configured once, not twice
        _, rows = store.query("SELECT tree, version FROM trees")
        assert rows == [("default", 1)]


def test_projection_names_must_be_unique() -> None:
    with pytest.raises(ValueError, match="unique"):
        ProjectionStore(":memory:", [EventLogProjection(), EventLogNext()])


def test_undecodable_messages_never_raise_out_of_apply() -> None:
    deep = b'{"id":"x","event":' + b"[" * 200_000 + b"]" * 200_000 + b"}"  # RecursionError in json
    batch = [Stored(1, "poolwise.gang.default", deep), Stored(2, "poolwise.gang.default", b"\xff\x00{")]
    with ProjectionStore(":memory:", [EventLogProjection(), PoolTreeProjection()]) as store:
        assert store.apply(batch) == 2
        _, rows = store.query("SELECT seq, type FROM event_log ORDER BY seq")
        assert rows == [(1, "_malformed"), (2, "_malformed")]


# -- reading ------------------------------------------------------------------------------------


def test_query_returns_columns_and_python_values() -> None:
    with ProjectionStore(":memory:", [EventLogProjection()]) as store:
        store.apply(gangs(1, 3))
        columns, rows = store.query(
            "SELECT seq, time, data->>'gang' AS gang FROM event_log WHERE seq >= ? ORDER BY seq", [2]
        )
        assert columns == ["seq", "time", "gang"]
        assert [(seq, gang) for seq, _, gang in rows] == [(2, "g2"), (3, "g3")]
        assert rows[0][1].isoformat() == "2024-05-01T12:00:02+00:00"
        _, limited = store.query("SELECT seq FROM event_log ORDER BY seq", max_rows=2)
        assert limited == [(1,), (2,)]
        columns, _ = store.query("DESCRIBE event_log")
        assert "column_name" in columns


@pytest.mark.parametrize(
    "sql",
    [
        "DELETE FROM event_log",
        "INSERT INTO checkpoints VALUES ('x', 1, 1)",
        "SELECT 1; DROP TABLE event_log",
        "CREATE TABLE x AS SELECT 1",
        "COPY event_log TO 'out.csv'",
        "ATTACH 'other.duckdb'",
        "SET threads = 1",
        "PRAGMA threads = 1",
        "SELEC oops",
    ],
)
def test_query_refuses_anything_but_one_read_only_statement(sql: str) -> None:
    with ProjectionStore(":memory:", [EventLogProjection()]) as store:
        store.apply(gangs(1, 3))
        with pytest.raises(NotReadOnly):
            store.query(sql)
        assert count(store, "event_log") == 3


def test_query_cannot_read_files_of_the_host(tmp_path: Path) -> None:
    secret = tmp_path / "secret.csv"
    secret.write_text("a,b\n1,2\n")
    with (
        ProjectionStore(":memory:", [EventLogProjection()]) as store,
        pytest.raises(duckdb.PermissionException, match="disabled"),
    ):
        store.query(f"SELECT * FROM read_csv('{secret}')")


def _run(code: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_another_process_reads_only_when_no_service_holds_the_file(tmp_path: Path) -> None:
    path = tmp_path / "svc.duckdb"
    reader = f"""
        from projections import ProjectionStore, StoreBusy
        try:
            with ProjectionStore.open_read_only({str(path)!r}) as store:
                print(store.query("SELECT count(*) FROM event_log")[1][0][0], store.checkpoint("event_log"))
        except StoreBusy:
            print("busy")
    """
    with ProjectionStore(path, [EventLogProjection()]) as store:
        store.apply(gangs(1, 5))
        assert _run(reader) == "busy"
    assert _run(reader) == "5 5"

    with ProjectionStore.open_read_only(path) as store:
        assert store.read_only
        with pytest.raises(PermissionError):
            store.apply(gangs(6, 6))


def test_open_read_only_needs_an_existing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        ProjectionStore.open_read_only(tmp_path / "none.duckdb")


def test_each_projection_sees_only_events_after_its_own_checkpoint(tmp_path: Path) -> None:
    seen: list[int] = []

    class Recorder(Projection):
        name = "recorder"
        schema_version = 1

        def create(self, conn: Connection) -> None:
            pass

        def apply(self, conn: Connection, items: Sequence[Item]) -> None:
            seen.extend(item.seq for item in items)

    path = tmp_path / "svc.duckdb"
    with ProjectionStore(path, [EventLogProjection()]) as store:
        store.apply(gangs(1, 5))
    with ProjectionStore(path, [EventLogProjection(), Recorder()]) as store:  # a new projection
        assert store.rebuilt == ("recorder",)
        assert store.lowest_checkpoint == 0
        store.apply([*gangs(1, 6), stored(7, HostRegistered(host="h1", resources={"cpu": 4.0}))])
        assert seen == [1, 2, 3, 4, 5, 6, 7]
        _, rows = store.query("SELECT count(*), count(DISTINCT seq) FROM event_log")
        assert rows == [(7, 7)]


def test_a_query_on_another_thread_sees_whole_batches_only() -> None:
    """MVCC: a reader never sees a batch's rows without its checkpoint, or half a batch."""
    with ProjectionStore(":memory:", [EventLogProjection()]) as store:
        log = gangs(1, 6000)
        done = threading.Event()

        def write() -> None:
            try:
                for start in range(0, len(log), 500):
                    store.apply(log[start : start + 500])
            finally:
                done.set()

        writer = threading.Thread(target=write)
        writer.start()
        seen: set[tuple[int, int]] = set()
        while not done.is_set():
            _, rows = store.query(
                "SELECT (SELECT count(*) FROM event_log),"
                " (SELECT last_seq FROM checkpoints WHERE projection = 'event_log')"
            )
            seen.add(rows[0])
        writer.join()
        assert all(count == last and count % 500 == 0 for count, last in seen), sorted(seen)
        assert count(store, "event_log") == 6000


def test_a_read_only_store_reports_the_committed_checkpoints(tmp_path: Path) -> None:
    path = tmp_path / "svc.duckdb"
    with ProjectionStore(path, [EventLogProjection(), PoolTreeProjection()]) as store:
        store.apply(gangs(1, 7))
    with ProjectionStore.open_read_only(path) as store:
        assert store.checkpoints() == {"event_log": 7, "pool_tree": 7}
        assert store.checkpoint("pool_tree") == 7
        assert store.lowest_checkpoint == 7


def test_one_writing_store_per_file_per_process(tmp_path: Path) -> None:
    path = tmp_path / "svc.duckdb"
    with ProjectionStore(path, [EventLogProjection()]):
        with pytest.raises(StoreBusy, match="already open"):
            ProjectionStore(path, [EventLogProjection()])
        with pytest.raises(StoreBusy):
            ProjectionStore.open_read_only(path)
    with ProjectionStore(path, [EventLogProjection()]) as store:  # released on close
        assert store.rebuilt == ()


class BrokenCreate(EventLogProjection):
    name = "broken"

    def create(self, conn: Connection) -> None:
        raise RuntimeError("bad DDL")


def test_a_store_that_fails_to_open_releases_the_file(tmp_path: Path) -> None:
    path = tmp_path / "svc.duckdb"
    with pytest.raises(RuntimeError, match="bad DDL"):
        ProjectionStore(path, [EventLogProjection(), BrokenCreate()])
    with ProjectionStore(path, [EventLogProjection()]) as store:
        assert store.rebuilt == ("event_log",)  # the failed open committed nothing


def test_a_process_killed_mid_batch_keeps_only_whole_batches(tmp_path: Path) -> None:
    path = tmp_path / "svc.duckdb"
    crash = f"""
        import os
        from projections import EventLogProjection, ProjectionStore
        from projections.base import Projection
        from tests.projections.make import gangs

        class Dies(Projection):
            name = "dies"
            schema_version = 1
            def create(self, conn): pass
            def apply(self, conn, items):
                if items[-1].seq > 10:
                    os._exit(3)  # no rollback, no close: the process is gone

        store = ProjectionStore({str(path)!r}, [EventLogProjection(), Dies()])
        store.apply(gangs(1, 10))
        store.apply(gangs(11, 20))
    """
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(crash)], cwd=REPO, timeout=60)
    assert result.returncode == 3
    with ProjectionStore(path, [EventLogProjection()]) as store:
        assert store.checkpoint("event_log") == 10
        assert count(store, "event_log") == 10
        _, rows = store.query("SELECT last_seq FROM checkpoints WHERE projection = 'dies'")
        assert rows == [(10,)]


def test_a_pack_of_decisions_is_a_row_per_event_at_one_position(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from events import Envelope, GangAdmitted, TaskSpec, encode, encode_pack

    def admitted(i: int) -> Envelope:
        event = GangAdmitted(tree="default", gang=f"g{i}", pool="/a", queue="pending",
                             tasks=[TaskSpec(id=f"g{i}/0", resources={"cpu": 1.0})])
        return Envelope(id=f"adm-{i}", time=datetime(2026, 1, 1, tzinfo=UTC), source="admission", basis=1,
                        event=event)

    pack = encode_pack([encode(admitted(i)) for i in range(3)])
    log = [tree_event(1), Stored(2, "poolwise.decision.default.admission", pack, "pack-1"), tree_event(3)]
    with ProjectionStore(tmp_path / "svc.duckdb", [EventLogProjection()]) as store:
        store.apply(log)
        _, rows = store.query("SELECT seq, part, id, type FROM event_log ORDER BY seq, part")
        assert rows == [(1, 0, "ev-1", "TreeConfigured"), (2, 0, "adm-0", "GangAdmitted"),
                        (2, 1, "adm-1", "GangAdmitted"), (2, 2, "adm-2", "GangAdmitted"),
                        (3, 0, "ev-3", "TreeConfigured")]
        assert store.checkpoint("event_log") == 3


class Poisoned(Exploding):
    """Writes a row per item, and raises on the items at the positions in `poison` only."""

    def __init__(self, poison: set[int], error: type[Exception] = RuntimeError) -> None:
        super().__init__()
        self.poison, self.error = poison, error

    def apply(self, conn: Connection, items: Sequence[Item]) -> None:
        import pyarrow as pa

        insert_arrow(conn, "exploded", pa.table({"seq": pa.array([i.seq for i in items], pa.int64())}))
        bad = sorted({item.seq for item in items} & self.poison)
        if bad:
            raise self.error(f"cannot take {bad[0]}")


def test_a_message_a_projection_cannot_apply_is_left_out_of_it_alone_and_recorded() -> None:
    """A service must go on (docs/architecture.md, "No input crashes a service"): the poisoned
    messages (4 and 8 of 1..10) are applied to every other projection, left out of the one that
    raises on them with a row each in `projection_errors`, and every checkpoint moves to 10."""
    with ProjectionStore(":memory:", [EventLogProjection(), Poisoned({4, 8})]) as store:
        assert store.apply_isolating(gangs(1, 10), {}) == 10
        assert count(store, "event_log") == 10
        _, rows = store.query("SELECT seq FROM exploded ORDER BY seq")
        assert [r[0] for r in rows] == [1, 2, 3, 5, 6, 7, 9, 10]
        _, rows = store.query("SELECT seq, projection, error FROM projection_errors ORDER BY seq")
        assert rows == [(4, "exploding", "RuntimeError: cannot take 4"),
                        (8, "exploding", "RuntimeError: cannot take 8")]
        assert store.checkpoints() == {"event_log": 10, "exploding": 10}
        assert store.apply_isolating(gangs(11, 12), {}) == 12  # and it goes on as before
        assert count(store, "exploded") == 10
        assert count(store, "projection_errors") == 2


class FailingCommits:
    """A connection whose commit raises while `poison` is set (as a constraint DuckDB checks only
    at commit would, on the rows of one message): an error no projection raised itself."""

    def __init__(self) -> None:
        self.conn: Connection | None = None  # the store's, once it is open
        self.poison = False

    def commit(self) -> None:
        if self.poison:
            self.poison = False
            raise duckdb.ConstraintException("Failed to commit: a duplicate key")
        assert self.conn is not None
        self.conn.commit()

    def __getattr__(self, name: str) -> object:
        return getattr(self.conn, name)


class Tainting(Exploding):
    """Writes a row per item; applying the item at `bad` makes the transaction's commit fail."""

    def __init__(self, conn: FailingCommits, bad: int) -> None:
        super().__init__()
        self.failing, self.bad = conn, bad

    def apply(self, conn: Connection, items: Sequence[Item]) -> None:
        import pyarrow as pa

        insert_arrow(conn, "exploded", pa.table({"seq": pa.array([i.seq for i in items], pa.int64())}))
        if any(item.seq == self.bad for item in items):
            self.failing.poison = True


def test_a_message_that_fails_at_commit_is_left_out_of_the_projection_whose_rows_fail_alone() -> None:
    """An error raised where no projection was applying (here the commit, each time the message
    at 3 is applied by `exploding`) is pinned by applying the message to each projection alone,
    each in its own transaction with its checkpoint: it is left out of the one whose commit still
    fails (recorded), applied to the others, and every checkpoint goes on (a crash loop otherwise)."""
    failing = FailingCommits()
    with ProjectionStore(":memory:", [EventLogProjection(), Tainting(failing, 3)]) as store:
        failing.conn = store._conn
        store._conn = failing  # type: ignore[assignment]
        assert store.apply_isolating(gangs(1, 5), {}) == 5
        assert count(store, "event_log") == 5
        _, rows = store.query("SELECT seq FROM exploded ORDER BY seq")
        assert [r[0] for r in rows] == [1, 2, 4, 5]
        _, rows = store.query("SELECT seq, projection, error FROM projection_errors ORDER BY projection")
        assert [(seq, name) for seq, name, _ in rows] == [(3, "exploding")]
        assert all("ConstraintException" in error for _, _, error in rows)
        assert store.checkpoints() == {"event_log": 5, "exploding": 5}


class PoisonedToo(Poisoned):
    """`Poisoned`, under a name and table of its own."""

    name = "poisoned"
    tables = ("poisoned",)

    def create(self, conn: Connection) -> None:
        conn.execute("CREATE TABLE poisoned (seq BIGINT)")

    def apply(self, conn: Connection, items: Sequence[Item]) -> None:
        conn.executemany("INSERT INTO poisoned VALUES (?)", [[item.seq] for item in items])
        if {item.seq for item in items} & self.poison:
            raise self.error("cannot take it")


def test_a_message_one_projection_raises_on_and_another_fails_the_commit_with_is_left_out_of_those_two() -> None:
    """The message at 3 raises in `poisoned` (left out of it, recorded) and fails the commit when
    `exploding` applies it: each alone, `event_log` takes it and `exploding` is left out too."""
    failing = FailingCommits()
    projections = [EventLogProjection(), PoisonedToo({3}), Tainting(failing, 3)]
    with ProjectionStore(":memory:", projections) as store:
        failing.conn = store._conn
        store._conn = failing  # type: ignore[assignment]
        assert store.apply_isolating(gangs(1, 5), {}) == 5
        assert count(store, "event_log") == 5
        for table in ("exploded", "poisoned"):
            _, rows = store.query(f"SELECT seq FROM {table} ORDER BY seq")
            assert [r[0] for r in rows] == [1, 2, 4, 5], table
        _, rows = store.query("SELECT seq, projection, error FROM projection_errors ORDER BY projection")
        assert [(seq, name, error.split(":")[0]) for seq, name, error in rows] == [
            (3, "exploding", "ConstraintException"), (3, "poisoned", "RuntimeError")]
        assert store.checkpoints() == {"event_log": 5, "exploding": 5, "poisoned": 5}


class FailingPastBad(FailingCommits):
    """A connection whose commit raises whenever the transaction moves a checkpoint to `bad` or
    past it, whatever was applied (the store's fault, not a projection's)."""

    def __init__(self, bad: int) -> None:
        super().__init__()
        self.bad = bad

    def execute(self, sql: str, parameters: object = None) -> object:
        assert self.conn is not None
        if sql.startswith("UPDATE checkpoints") and isinstance(parameters, list) and parameters[0] >= self.bad:
            self.poison = True
        return self.conn.execute(sql, parameters)

    def rollback(self) -> None:
        assert self.conn is not None
        self.poison = False
        self.conn.rollback()


def test_a_message_whose_commit_fails_whatever_is_applied_stops_the_store() -> None:
    """A commit that fails with every projection alone and with none (the store at fault) skips
    nothing: the error propagates and every checkpoint stays before the message."""
    failing = FailingPastBad(3)
    with ProjectionStore(":memory:", [EventLogProjection(), Exploding()]) as store:
        failing.conn = store._conn
        store._conn = failing  # type: ignore[assignment]
        with pytest.raises(duckdb.ConstraintException, match="a duplicate key"):
            store.apply_isolating(gangs(1, 5), {})
        assert store.checkpoints() == {"event_log": 2, "exploding": 2}
        assert count(store, "projection_errors") == 0


def test_the_stores_own_failures_skip_nothing() -> None:
    """A disk or memory failure is not the message's fault: it propagates and nothing is kept."""
    with ProjectionStore(":memory:", [EventLogProjection(), Poisoned({3}, duckdb.IOException)]) as store:
        with pytest.raises(duckdb.IOException, match="cannot take 3"):
            store.apply_isolating(gangs(1, 5), {})
        assert store.checkpoints() == {"event_log": 0, "exploding": 0}
        assert count(store, "projection_errors") == 0
