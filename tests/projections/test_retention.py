"""Retention of the read models' history (`ProjectionStore(retention=...)`), on real DuckDB.

The log here runs for a few hundred seconds of log time with a retention of 100 s and a prune every
10 s: what finished (or happened) early is deleted, what is live or recent stays, the tables are
the same however the log is cut into batches or the store is stopped between them, and nothing is
deleted with the option off."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

from events import Envelope, Event, GangCancelled, PreemptionRequested, TreeConfigured, TreeOptions, encode
from events.subjects import for_event
from projections import EventLogProjection, ProjectionStore
from projections.read_models import read_models
from services.common.log import Stored
from services.common.memlog import MemoryLog
from services.tools.cli.args import InputError, parse_duration
from services.tools.cli.serve_cmd import tree_args, tree_options
from services.tree.service import TreeService, serve_tree
from tests.projections.make import T0
from tests.projections.test_gangs import POOL, History, admitted, enqueue, finished, report
from tests.projections.test_pool_status import computed, pool
from tests.projections.test_store import Exploding

RETENTION = 100.0
EVERY = 10.0
TABLES = ("gangs", "tasks", "event_log", "entitlement_history", "preemptions", "rejections", "gangs_held")


class Timed(History):
    """A `History` whose log time advances a second per message, and by `wait(seconds)`."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def add(self, event: Event, *, source: str = "sdk", basis: int | None = None) -> int:
        seq = self.seq + 1
        self.now += 1
        envelope = Envelope(id=f"ev-{seq}", time=T0 + timedelta(seconds=self.now), source=source, basis=basis,
                            event=event)  # type: ignore[arg-type]
        subject = for_event(event.type, getattr(event, "tree", None), source)
        self.messages.append(Stored(seq, subject, encode(envelope), envelope.id))
        return seq

    def wait(self, seconds: float) -> None:
        self.now += seconds

    def done(self, gang: str, members: int = 2) -> None:
        """`gang` enqueued whole, admitted, run and succeeded: done."""
        self.add(enqueue(gang, members))
        self.cycle(admitted(gang))
        for member in range(members):
            self.add(report(f"{gang}/{member}", "running"))
        last = 0
        for member in range(members):
            last = self.add(report(f"{gang}/{member}", "succeeded"))
        self.decide(finished(gang, "done"), basis=last)


def long_history() -> Timed:
    h = Timed()
    h.add(TreeConfigured(tree="default", options=TreeOptions()), source="tree")
    h.add(computed(pool("/a", 10), pool("/b", 5)), source="admission", basis=h.seq)
    h.wait(2)
    h.add(computed(pool("/a", 20), pool("/b", 5)), source="admission", basis=h.seq)  # /a changed
    h.wait(2)
    h.add(computed(pool("/a", 20)), source="admission", basis=h.seq)  # /b deleted
    h.wait(2)
    h.done("old")  # finished early: deleted with its tasks
    h.add(enqueue("gone", 1, size=2))  # waiting, then cancelled early
    cancel = h.add(GangCancelled(gang="gone", reason="user asked"))
    h.decide(finished("gone", "cancelled"), basis=cancel)
    refused = h.add(enqueue("nowhere", 1, pool="/nowhere"))  # rejected at its first members
    h.refuse(refused, "pool_missing", "nowhere")
    h.decide(finished("nowhere", "rejected", "/nowhere"), basis=refused)
    h.add(enqueue("live"))  # admitted early and still running: stays
    h.cycle(admitted("live"))
    h.add(report("live/0", "running"))
    h.decide(PreemptionRequested(tree="default", pool=POOL, gang="live", tasks=["live/1"], reason="over"),
             source="preemption")
    h.add(enqueue("pending"))  # pending early and never admitted: stays
    h.cycle()
    for _ in range(20):  # log time goes by, a tick every 10 s
        h.wait(9)
        h.cycle()
    h.add(computed(pool("/a", 20)), source="admission", basis=h.seq)  # /a unchanged: no history row
    h.done("recent")  # finished within the retention: stays
    # late inputs for the deleted gang, refused by admission, which forgot it too
    late = h.add(enqueue("old"))
    h.refuse(late, "gang_forgotten", "old", "gang old finished and was forgotten")
    late = h.add(report("old/0", "running"))
    h.refuse(late, "gang_forgotten", "old/0", "gang old finished and was forgotten")
    h.decide(finished("old", "done"))  # (a decision for it, which admission would not make: nothing either)
    h.wait(9)
    h.cycle()
    return h


@pytest.fixture(scope="module")
def history() -> Timed:
    return long_history()


def make(path: str | Path = ":memory:", retention: float | None = RETENTION, **options: Any) -> ProjectionStore:
    return ProjectionStore(path, [EventLogProjection(), *read_models()], retention=retention, prune_every=EVERY,
                           **options)


def snapshot(store: ProjectionStore) -> dict[str, list[tuple[Any, ...]]]:
    found = {table: store.query(f"SELECT * FROM {table} ORDER BY ALL")[1] for table in TABLES}
    if store.retention is not None:
        found["pruning"] = store.query("SELECT * FROM pruning ORDER BY ALL")[1]
    return found


def column(store: ProjectionStore, sql: str) -> list[Any]:
    return [row[0] for row in store.query(sql)[1]]


def test_old_history_goes_and_what_is_live_or_recent_stays(history: Timed) -> None:
    with make() as store:
        store.apply(history.messages)
        assert column(store, "SELECT gang FROM gangs ORDER BY gang") == ["live", "pending", "recent"]
        assert column(store, "SELECT DISTINCT gang FROM tasks ORDER BY gang") == ["live", "pending", "recent"]
        assert column(store, "SELECT state FROM gangs ORDER BY gang") == ["admitted", "pending", "done"]
        horizons = column(store, "SELECT DISTINCT horizon FROM pruning")
        assert len(horizons) == 1  # every projection pruned at the same points
        horizon = horizons[0]
        assert horizon == T0 + timedelta(seconds=(history.now // EVERY) * EVERY - RETENTION)
        assert column(store, "SELECT min(time) FROM event_log")[0] >= horizon
        kept = [m for m in history.messages if _time(m) >= horizon]
        assert column(store, "SELECT seq FROM event_log ORDER BY seq") == [m.seq for m in kept]
        assert column(store, "SELECT count(*) FROM preemptions") == [0]
        assert column(store, "SELECT rule FROM rejections ORDER BY seq") == ["gang_forgotten", "gang_forgotten"]
        # each pool's last history row stays (what it is entitled to now); /b was deleted early: all gone
        assert store.query("SELECT path, entitlement['cpu'] FROM entitlement_history")[1] == [("/a", 20.0)]
        assert store.checkpoint("gangs") == history.seq


def _time(message: Stored) -> Any:
    from events import decode

    return decode(message.data).time


def test_without_the_option_nothing_is_deleted(history: Timed) -> None:
    with make(retention=None) as store:
        store.apply(history.messages)
        assert column(store, "SELECT gang FROM gangs ORDER BY gang") == ["gone", "live", "nowhere", "old", "pending",
                                                                         "recent"]
        assert column(store, "SELECT count(*) FROM event_log") == [history.seq]
        assert column(store, "SELECT count(*) FROM preemptions") == [1]
        assert column(store, "SELECT count(*) FROM entitlement_history WHERE path = '/b'") == [2]
        assert store.query("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'pruning'")[1] == [(0,)]


def test_what_stays_is_what_the_tables_hold_without_retention(history: Timed) -> None:
    """Pruning only deletes: every row kept is the row the store without retention has (no
    resurrected gang from its late inputs, no row changed)."""
    with make() as pruned, make(retention=None) as whole:
        pruned.apply(history.messages)
        whole.apply(history.messages)
        everything = snapshot(whole)
        for table, rows in snapshot(pruned).items():
            if table != "pruning":
                assert all(row in everything[table] for row in rows), table
        assert column(whole, "SELECT state FROM gangs WHERE gang = 'old'") == ["done"]


@pytest.mark.parametrize(("batch", "chunk_size"), [(1, 4096), (3, 2), (7, 5), (40, 4096), (1000, 1)])
def test_batches_and_chunks_give_the_same_tables(history: Timed, batch: int, chunk_size: int) -> None:
    with make() as whole:
        whole.apply(history.messages)
        expected = snapshot(whole)
    with make(chunk_size=chunk_size) as store:
        for start in range(0, len(history.messages), batch):
            store.apply(history.messages[start : start + batch])
        assert snapshot(store) == expected


def test_a_rebuild_from_the_log_gives_the_same_tables(tmp_path: Path, history: Timed) -> None:
    path = tmp_path / "tree.duckdb"
    with make(path) as store:
        for start in range(0, len(history.messages), 11):
            store.apply(history.messages[start : start + 11])
        expected = snapshot(store)
    path.unlink()
    with make(path) as store:
        store.apply(history.messages)
        assert snapshot(store) == expected


@pytest.mark.parametrize("cut", [17, 40, 61, 90])
def test_a_store_stopped_between_batches_resumes_the_same(tmp_path: Path, history: Timed, cut: int) -> None:
    with make() as whole:
        whole.apply(history.messages)
        expected = snapshot(whole)
    path = tmp_path / "tree.duckdb"
    with make(path) as store:
        store.apply(history.messages[:cut])
        before = store.query("SELECT * FROM pruning ORDER BY ALL")[1]
    with make(path) as store:  # "after the crash": the checkpoint, the rows and `pruning` agree
        assert store.rebuilt == ()
        assert store.query("SELECT * FROM pruning ORDER BY ALL")[1] == before
        store.apply(history.messages[cut - 10 :])  # redelivered from before the checkpoint
        assert snapshot(store) == expected


def test_a_batch_that_fails_after_a_prune_leaves_nothing_pruned(tmp_path: Path, history: Timed) -> None:
    path = tmp_path / "tree.duckdb"
    cut = 60
    with make(path) as store:
        store.apply(history.messages[:cut])
        before = snapshot(store)
        checkpoints = store.checkpoints()
    fail_at = len(history.messages) - 3  # past several prune points of the rest of the log
    with ProjectionStore(path, [EventLogProjection(), *read_models(), Exploding(fail_at)], retention=RETENTION,
                         prune_every=EVERY) as store:
        with pytest.raises(RuntimeError, match="boom"):
            store.apply(history.messages[cut:])
        assert snapshot(store) == before
        assert {k: v for k, v in store.checkpoints().items() if k != "exploding"} == checkpoints
    with make(path) as store:
        store.apply(history.messages[cut:])
        with make() as whole:
            whole.apply(history.messages)
            assert snapshot(store) == snapshot(whole)


def test_each_prune_is_bounded_and_the_rest_goes_at_the_next(history: Timed) -> None:
    def bounded() -> ProjectionStore:
        store = make()
        for projection in store.projections:
            projection.prune_rows = 1
        return store

    with bounded() as store:
        store.apply(history.messages)
        expected = snapshot(store)
        with make() as unbounded:
            unbounded.apply(history.messages)
            assert len(expected["event_log"]) > len(snapshot(unbounded)["event_log"])  # a backlog left
        seqs = column(store, "SELECT seq FROM event_log ORDER BY seq")  # the oldest went first
        assert seqs == list(range(seqs[0], history.seq + 1))
    with bounded() as store:  # and it is as deterministic
        for start in range(0, len(history.messages), 4):
            store.apply(history.messages[start : start + 4])
        assert snapshot(store) == expected


def test_turning_retention_on_later_prunes_what_is_there(tmp_path: Path, history: Timed) -> None:
    path = tmp_path / "tree.duckdb"
    with make(path, retention=None) as store:
        store.apply(history.messages[:-20])
        assert column(store, "SELECT count(*) FROM gangs WHERE gang = 'old'") == [1]
    with make(path) as store:
        assert store.rebuilt == ()
        store.apply(history.messages)
        assert column(store, "SELECT gang FROM gangs ORDER BY gang") == ["live", "pending", "recent"]


def test_the_option_is_validated() -> None:
    with pytest.raises(ValueError, match="retention"):
        ProjectionStore(":memory:", [], retention=-1)
    with pytest.raises(ValueError, match="prune_every"):
        ProjectionStore(":memory:", [], retention=1, prune_every=0)


# --- the option on the command line and in the tree service ------------------------------------------


@pytest.mark.parametrize(("text", "seconds"), [
    ("30d", 30 * 86400.0), ("12h", 43200.0), ("1h30m", 5400.0), ("90s", 90.0), ("3600", 3600.0), ("1.5h", 5400.0),
    ("2w", 14 * 86400.0), ("off", None), ("", None), (None, None), ("0", 0.0), (repr(2592000.0), 2592000.0),
])
def test_durations(text: str | None, seconds: float | None) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["abc", "3x", "h", "-5", "1e400", "5 days"])
def test_bad_durations_are_input_errors(text: str) -> None:
    with pytest.raises(InputError, match="--sql-retention"):
        parse_duration(text, option="sql-retention")


def test_up_passes_the_option_to_the_tree_service_only() -> None:
    assert tree_options(None) == {} and tree_args(None) == {}
    assert tree_options(86400.0) == {"tree": {"sql_retention": 86400.0}}
    assert tree_args(86400.0) == {"tree": ["--sql-retention", "86400.0"]}
    assert parse_duration(tree_args(86400.0)["tree"][1]) == 86400.0


@pytest.mark.anyio
async def test_serve_tree_gives_its_store_the_retention(tmp_path: Path) -> None:
    async with anyio.create_task_group() as tg:
        service: TreeService = await tg.start(
            lambda task_status: serve_tree(MemoryLog(), tmp_path / "tree", sql_retention=3600.0,
                                           task_status=task_status))
        assert service.store is not None and service.store.retention == 3600.0
        assert all(p.retention == 3600.0 for p in service.store.projections)
        tg.cancel_scope.cancel()
