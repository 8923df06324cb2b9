"""What the gangs projection keeps in memory (the events waiting for admission's answer, the rows of
waiting and pending gangs) is what the tables hold: however a log is cut into batches, whatever was
rolled back, the tables come out the same as from one batch. And the cheaper writes (an update of
the changed columns, `event_log` bodies from the serializer) give the rows the slower ones gave."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

import projections.gang_fold as gang_fold
from events import (
    GangCancelled,
    GangEnqueued,
    GangMovedToQueue,
    PreemptionRequested,
    TaskSpec,
    TreeConfigured,
    TreeOptions,
    decode_all,
)
from projections import EventLogProjection, Item, PoolTreeProjection, Projection, ProjectionStore
from projections.base import Connection, update_rows
from projections.event_log import body
from projections.gang_rows import RowCache
from projections.gangs import GangsProjection
from projections.read_models import TABLES, read_models
from services.common.log import Stored
from tests.projections.test_gangs import POOL, History, admitted, enqueue, lifecycle, report
from tests.projections.test_read_models_scenarios import LIFECYCLE, SHARED_FILES, run

ALL_TABLES = (*TABLES, "gangs_held", "gangs_answered", "event_log")


def tables(store: ProjectionStore) -> dict[str, list[tuple[Any, ...]]]:
    return {table: store.query(f"SELECT * FROM {table} ORDER BY ALL")[1] for table in ALL_TABLES}


def full_store(path: str | Path = ":memory:", *extra: Projection) -> ProjectionStore:
    return ProjectionStore(path, [PoolTreeProjection(), EventLogProjection(), *read_models(), *extra])


def cuts(messages: Sequence[Stored], seed: int) -> Iterator[list[Stored]]:
    """The log in batches of random sizes (1 to 12 messages)."""
    rng = random.Random(seed)
    start = 0
    while start < len(messages):
        size = rng.randint(1, 12)
        yield list(messages[start : start + size])
        start += size


@pytest.fixture(scope="module", params=[*SHARED_FILES, "lifecycle"],
                ids=[*(p.stem for p in SHARED_FILES), "lifecycle"])
def scenario_log(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> list[Stored]:
    path = request.param
    if path == "lifecycle":
        path = tmp_path_factory.mktemp("in-memory") / "lifecycle.yaml"
        path.write_text(LIFECYCLE)
    return run(path).log


def test_any_batches_give_the_tables_of_one_batch(scenario_log: list[Stored]) -> None:
    with full_store() as whole:
        whole.apply(scenario_log)
        expected = tables(whole)
    for seed in range(3):
        with full_store() as store:
            for batch in cuts(scenario_log, seed):
                store.apply(batch)
            assert tables(store) == expected, f"seed {seed}"
    with full_store() as store:  # one message at a time: every row read back, or kept, in turn
        for message in scenario_log:
            store.apply([message])
        assert tables(store) == expected


def test_a_restart_in_the_middle_reads_back_what_waits(tmp_path: Path, scenario_log: list[Stored]) -> None:
    with full_store() as whole:
        whole.apply(scenario_log)
        expected = tables(whole)
    path = tmp_path / "tree.duckdb"
    middle = len(scenario_log) // 2
    with full_store(path) as store:
        for batch in cuts(scenario_log[:middle], 7):
            store.apply(batch)
    with full_store(path) as store:  # a new projection: nothing in memory, all from the file
        for batch in cuts(scenario_log[middle - 3 :], 8):
            store.apply(batch)
        assert tables(store) == expected


class FailOnce(Projection):
    """Raises the `n`-th time it is given items: the store rolls the whole batch back."""

    name = "fail_once"
    schema_version = 1

    def __init__(self, n: int) -> None:
        self.calls = 0
        self.n = n

    def create(self, conn: Connection) -> None:
        pass

    def apply(self, conn: Connection, items: Sequence[Item]) -> None:
        self.calls += 1
        if self.calls == self.n:
            raise RuntimeError("boom")


@pytest.mark.parametrize("n", [2, 5, 9])
def test_a_rolled_back_batch_is_forgotten_in_memory_too(scenario_log: list[Stored], n: int) -> None:
    with full_store() as whole:
        whole.apply(scenario_log)
        expected = tables(whole)
    with full_store(":memory:", FailOnce(n)) as store:
        for batch in cuts(scenario_log, n):
            try:
                store.apply(batch)
            except RuntimeError:
                store.apply(batch)  # the consumer delivers the batch again
        assert tables(store) == expected


def test_the_rollback_hook_is_called_and_the_batch_left_no_trace() -> None:
    h, _ = lifecycle()
    with ProjectionStore(":memory:", [GangsProjection()]) as clean:
        clean.apply(h.messages)
        expected = tables_of(clean)
    gangs = GangsProjection()
    with ProjectionStore(":memory:", [gangs, FailOnce(2)]) as store:
        store.apply(h.messages[:5])
        before = tables_of(store)
        assert gangs._held  # inputs wait for admission's answer, in memory
        with pytest.raises(RuntimeError):
            store.apply(h.messages[5:])
        assert gangs._held is None and len(gangs._rows) == 0
        assert tables_of(store) == before
        store.apply(h.messages[5:])
        assert tables_of(store) == expected


def tables_of(store: ProjectionStore) -> dict[str, list[tuple[Any, ...]]]:
    return {t: store.query(f"SELECT * FROM {t} ORDER BY ALL")[1] for t in ("gangs", "tasks", "gangs_held")}


def _takeover() -> History:
    """Gang `a` pending with task `x/0`; gang `b` comes with the same task id (admission forgets
    the tasks of finished gangs; the projection must not care), then both are admitted."""
    h = History()
    h.add(TreeConfigured(tree="default", options=TreeOptions()), source="tree")
    h.add(enqueue("a", 1, size=1, first=0))
    h.cycle()  # answered: `a` pending, its rows kept in memory
    h.add(GangEnqueued(gang="b", pool=POOL, job="job-b", user="bob", size=2,
                       tasks=[TaskSpec(id="a/0", resources={"cpu": 9.0}),
                              TaskSpec(id="b/1", resources={"cpu": 1.0})]))
    h.cycle()
    h.cycle(admitted("a"), admitted("b"))
    h.add(report("a/0", "running"))
    h.cycle()
    return h


def test_a_task_taken_over_by_another_gang_is_read_as_the_table_has_it() -> None:
    h = _takeover()
    with ProjectionStore(":memory:", [GangsProjection()]) as whole:
        whole.apply(h.messages)
        expected = tables_of(whole)
    assert [row[:3] for row in expected["tasks"]] == [("default", "a/0", "b"), ("default", "b/1", "b")]
    for size in (1, 2, 3):
        with ProjectionStore(":memory:", [GangsProjection()]) as store:
            for start in range(0, len(h.messages), size):
                store.apply(h.messages[start : start + size])
            assert tables_of(store) == expected, f"batches of {size}"


def test_the_row_cache_forgets_what_leaves_the_kept_states_and_the_oldest() -> None:
    cache = RowCache(limit=2)
    rows = {(("t", g)): {"tree": "t", "gang": g, "state": "pending"} for g in "abc"}
    tasks = {("t", f"{g}/0"): {"tree": "t", "task": f"{g}/0", "gang": g} for g in "abc"}
    members = {("t", g): [tasks[("t", f"{g}/0")]] for g in "abc"}
    cache.written(list(rows), rows, members, tasks, list(tasks), False)
    assert list(cache.gangs) == [("t", "b"), ("t", "c")]  # the oldest went
    rows[("t", "b")]["state"] = "admitted"
    cache.written([("t", "b")], rows, members, tasks, [], False)
    assert list(cache.gangs) == [("t", "c")]
    # a written task row of another gang with the key of a kept gang's task: that gang goes
    taken = {("t", "c/0"): {"tree": "t", "task": "c/0", "gang": "d"}}
    cache.written([], rows, members, taken, list(taken), True)
    assert len(cache) == 0


def test_update_rows_sets_the_other_columns_by_key() -> None:
    conn = duckdb.connect()
    conn.execute("CREATE TABLE t (a VARCHAR, b INTEGER, c VARCHAR, d DOUBLE, PRIMARY KEY (a, b))")
    conn.execute("INSERT INTO t VALUES ('x', 1, 'old', 1.5), ('x', 2, 'old', 2.5), ('y', 1, 'old', 3.5)")
    update_rows(conn, "t", ("a", "b"), pa.table({"b": pa.array([2, 1], pa.int32()), "c": ["new2", "new1"],
                                                 "a": ["x", "y"]}))
    assert conn.execute("SELECT * FROM t ORDER BY ALL").fetchall() == [
        ("x", 1, "old", 1.5), ("x", 2, "new2", 2.5), ("y", 1, "new1", 3.5)]
    update_rows(conn, "t", ("a", "b"), pa.table({"a": pa.array([], pa.string()), "b": pa.array([], pa.int32())}))


def test_event_log_bodies_are_the_events_as_dumped(scenario_log: list[Stored]) -> None:
    for message in scenario_log:
        for envelope in decode_all(message.data):
            assert body(envelope.event) == envelope.event.model_dump_json(exclude_none=True)


def test_held_events_keep_their_refusal_across_batches() -> None:
    """An input refused while it waits (its refusal in a later batch than it) is skipped when the
    inputs before it are answered, in memory as in the table."""
    h, at = lifecycle()
    with ProjectionStore(":memory:", [GangsProjection()]) as whole:
        whole.apply(h.messages)
        expected = tables_of(whole)
    cut = at["g7 more"] + 1  # the refusal of g7's second enqueue comes in the next batch
    with ProjectionStore(":memory:", [GangsProjection()]) as store:
        store.apply(h.messages[:cut])
        store.apply(h.messages[cut:])
        assert tables_of(store) == expected


def built_at_once(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The gangs whose rows the gangs projection builds at once (`GangFold._add_admitted`), as it goes."""
    built: list[str] = []
    add_admitted = gang_fold.GangFold._add_admitted

    def counting(self: Any, enqueued: GangEnqueued, *args: Any) -> None:
        built.append(enqueued.gang)
        add_admitted(self, enqueued, *args)

    monkeypatch.setattr(gang_fold.GangFold, "_add_admitted", counting)
    return built


def _at_once_log() -> History:
    """Gangs enqueued whole and admitted in the same cycle (built at once), beside gangs that are
    not: members in two events, a task id another gang had (kept pending, then finished), a gang
    admitted in a later batch, one moved to a queue first, one refused."""
    h = History()
    h.add(TreeConfigured(tree="default", options=TreeOptions()), source="tree")
    h.add(enqueue("old", 1, size=1, first=0))
    h.cycle()  # `old` pending: kept in memory, its task `old/0`
    h.add(enqueue("a", 2, size=2, first=0))
    h.add(GangEnqueued(gang="b", pool=POOL, job="job-b", user="bob", size=2,
                       tasks=[TaskSpec(id="old/0", resources={"cpu": 2.0}),
                              TaskSpec(id="b/1", resources={"cpu": 1.0})]))
    h.add(enqueue("c", 1, size=2, first=0))
    h.add(enqueue("c", 1, size=2, first=1))
    h.add(enqueue("d", 1, size=1, first=0))
    h.cycle(admitted("a"), admitted("b"), admitted("c"),
            GangMovedToQueue(tree="default", gang="d", pool=POOL, queue="non_preemptible", reason="no room"))
    h.add(enqueue("e", 3, size=3, first=0))
    h.cycle(admitted("e"), admitted("d"))
    h.add(report("a/0", "running"))
    h.cycle()
    return h


@pytest.mark.parametrize("batch", [0, 1, 2, 3, 5])
def test_gangs_admitted_at_once_get_the_rows_of_one_event_at_a_time(monkeypatch: pytest.MonkeyPatch,
                                                                     batch: int) -> None:
    h = _at_once_log()
    built = built_at_once(monkeypatch)

    def rows(fast: bool) -> dict[str, list[tuple[Any, ...]]]:
        monkeypatch.setattr(gang_fold, "FAST_PATH", fast)
        with ProjectionStore(":memory:", [GangsProjection()]) as store:
            size = batch or len(h.messages)
            for start in range(0, len(h.messages), size):
                store.apply(h.messages[start : start + size])
            return tables_of(store)

    one_by_one = rows(False)
    assert not built
    assert rows(True) == one_by_one
    gangs = {row[1]: row for row in one_by_one["gangs"]}
    assert {g: gangs[g][14] for g in "abcde"} == dict.fromkeys("abcde", "admitted")
    assert [row[:3] for row in one_by_one["tasks"] if row[1] == "old/0"] == [("default", "old/0", "b")]
    # in one batch, `a` has a third event (a report) and `b` shares `old/0` with `old`'s enqueue
    if batch == 0:
        assert built == ["e"]
    if batch == 5:  # the batches end where cycles end: `b` takes over `old/0`, which `old` had
        assert sorted(built) == ["a", "b", "e"]


def test_the_at_once_rows_of_a_scenario_are_the_one_by_one_rows(scenario_log: list[Stored],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    with full_store() as fast:
        fast.apply(scenario_log)
        expected = tables(fast)
    monkeypatch.setattr(gang_fold, "FAST_PATH", False)
    with full_store() as slow:
        slow.apply(scenario_log)
        assert tables(slow) == expected


def _random_log(seed: int) -> History:
    """A log of gangs in any order of things: whole or in two parts, task ids reused, admitted in
    the cycle after their enqueue or later, moved first, admitted twice, cancelled, refused,
    reported on, preempted; the cycles' decisions as admission would write them or not."""
    rng = random.Random(seed)
    h = History()
    h.add(TreeConfigured(tree="default", options=TreeOptions()), source="tree")
    open_gangs: list[str] = []
    for step in range(30):
        decisions: list[Any] = []
        for index in range(rng.randint(0, 3)):
            # mostly a new gang; now and then more members of one already there
            gang = rng.choice(open_gangs) if open_gangs and rng.random() < 0.15 else f"g{step}.{index}"
            members = rng.choice([1, 2])
            size = rng.choice([members, members, members + 1])
            if rng.random() < 0.25:  # task ids that other gangs have too
                seq = h.add(GangEnqueued(gang=gang, pool=POOL, job=f"job-{gang}", user="alice", size=size, tasks=[
                    TaskSpec(id=f"shared/{rng.randint(0, 4)}", resources={"cpu": 1.0}) for _ in range(members)]))
            else:
                seq = h.add(enqueue(gang, members, size=size, first=rng.choice([0, 0, 1])))
            if rng.random() < 0.1:
                h.refuse(seq, "members", gang)
            open_gangs.append(gang)
        recent = open_gangs[-4:]  # decisions mostly on the gangs of this cycle and the one before
        for gang in rng.sample(recent, min(len(recent), rng.randint(0, 3))):
            kind = rng.random()
            if kind < 0.6:
                decisions.append(admitted(gang, attempt=rng.choice([1, 1, 1, 2])))
            elif kind < 0.8:
                decisions.append(GangMovedToQueue(tree="default", gang=gang, pool=POOL, queue="non_preemptible",
                                                  reason="no room"))
            elif kind < 0.9:
                decisions.append(PreemptionRequested(tree="default", gang=gang, pool=POOL, tasks=[f"{gang}/0"],
                                                     reason="over"))
            else:
                h.add(GangCancelled(gang=gang))
        if open_gangs and rng.random() < 0.4:
            gang = rng.choice(open_gangs)
            h.add(report(f"{gang}/{rng.choice([0, 1])}", rng.choice(["running", "succeeded", "failed"])))
        h.cycle(*decisions)
        if rng.random() < 0.2 and open_gangs:  # a decision on an old gang, in a cycle of its own
            h.cycle(admitted(rng.choice(open_gangs)))
    return h


@pytest.mark.parametrize("seed", range(12))
def test_random_logs_give_the_same_rows_built_at_once_or_one_by_one(monkeypatch: pytest.MonkeyPatch,
                                                                     seed: int) -> None:
    h = _random_log(seed)
    built = built_at_once(monkeypatch)
    for cut in (None, seed, seed + 100):
        batches = [h.messages] if cut is None else list(cuts(h.messages, cut))
        results = []
        for fast in (False, True):
            monkeypatch.setattr(gang_fold, "FAST_PATH", fast)
            with ProjectionStore(":memory:", [GangsProjection()]) as store:
                for batch in batches:
                    store.apply(batch)
                results.append(tables_of(store))
        assert results[0] == results[1], f"cut {cut}"
    assert built  # the log has gangs the at-once path takes


def test_a_gang_taking_a_task_id_of_a_gang_in_the_same_fold_is_applied_one_by_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`keep` is pending with task `keep/0` (its rows kept in memory); in the next fold it is moved
    while `f`, with a task of the same id, is enqueued and admitted: `f` takes the id over as it
    would event by event."""
    h = History()
    h.add(TreeConfigured(tree="default", options=TreeOptions()), source="tree")
    h.add(enqueue("keep", 1, size=1))
    first = h.cycle()
    h.add(GangEnqueued(gang="f", pool=POOL, job="job-f", user="bob", size=1,
                       tasks=[TaskSpec(id="keep/0", resources={"cpu": 3.0})]))
    h.cycle(GangMovedToQueue(tree="default", gang="keep", pool=POOL, queue="non_preemptible", reason="no room"),
            admitted("f"))
    built = built_at_once(monkeypatch)
    results = []
    for fast in (False, True):
        monkeypatch.setattr(gang_fold, "FAST_PATH", fast)
        with ProjectionStore(":memory:", [GangsProjection()]) as store:
            store.apply(h.messages[:first])
            store.apply(h.messages[first:])
            results.append(tables_of(store))
    assert results[0] == results[1]
    assert built == []
    assert [row[:3] for row in results[1]["tasks"]] == [("default", "keep/0", "f")]
