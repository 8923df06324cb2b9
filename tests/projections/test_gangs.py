"""GangsProjection: `gangs` and `tasks` from admission's decisions and the inputs it accepted.

The log here is written as the services write it: inputs from a submitter or executor, then the
admission service's answers (decisions whose `basis` is the position they were based on), and a
refusal for each refused input (`InputRejected.input_seq`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from events import (
    ClockTicked,
    CycleCompleted,
    Event,
    GangAdmitted,
    GangCancelled,
    GangEnqueued,
    GangFinished,
    GangMovedToQueue,
    GangRequeued,
    GangTimedOut,
    InputRejected,
    PreemptionRequested,
    TaskSpec,
    TaskStateChanged,
    TreeConfigured,
    TreeOptions,
)
from projections import EventLogProjection, ProjectionStore
from projections.gangs import GangsProjection
from services.common.log import Stored
from tests.projections.make import T0, stored

POOL = "/ATG/AV"


class History:
    """A log being written: inputs, and the admission service's answers to them."""

    def __init__(self) -> None:
        self.messages: list[Stored] = []

    @property
    def seq(self) -> int:
        return len(self.messages)

    def add(self, event: Event, *, source: str = "sdk", basis: int | None = None) -> int:
        seq = self.seq + 1
        self.messages.append(stored(seq, event, source=source, basis=basis))
        return seq

    def decide(self, *events: Event, basis: int | None = None, source: str = "admission") -> int:
        """Decisions based on the log so far (or on `basis`); returns the position of the last one."""
        based_on = self.seq if basis is None else basis
        for event in events:
            self.add(event, source=source, basis=based_on)
        return self.seq

    def refuse(self, seq: int, rule: str, ref: str, reason: str = "no") -> int:
        """Admission refuses the input at `seq` (as its fold does: basis = that input)."""
        message = self.messages[seq - 1]
        from events import decode

        event = decode(message.data).event
        return self.decide(InputRejected(tree="default", ref=ref, input_type=event.type, rule=rule, reason=reason,
                                         input=event.model_dump_json(), input_seq=seq), basis=seq)

    def cycle(self, *decisions: Event) -> int:
        """A tick, and the admission cycle it starts: its decisions, then `CycleCompleted`."""
        tick = self.add(ClockTicked(), source="admission-clock")
        return self.decide(*decisions, CycleCompleted(tree="default", service="admission", trigger_seq=tick),
                           basis=tick)


def enqueue(gang: str, members: int = 2, *, size: int | None = None, first: int = 0, pool: str = POOL,
            **options: Any) -> GangEnqueued:
    return GangEnqueued(gang=gang, pool=pool, job=f"job-{gang}", user="alice", size=size or members,
                        tasks=[TaskSpec(id=f"{gang}/{first + i}", resources={"cpu": 2.0, "memory": 512.0})
                               for i in range(members)], **options)


def admitted(gang: str, attempt: int = 1, queue: str = "pending") -> GangAdmitted:
    return GangAdmitted(tree="default", gang=gang, pool=POOL, queue=queue, attempt=attempt, tasks=[])


def report(task: str, state: str) -> TaskStateChanged:
    return TaskStateChanged(gang=task.split("/")[0], task=task, state=state)  # type: ignore[arg-type]


def finished(gang: str, outcome: str, pool: str = POOL) -> GangFinished:
    return GangFinished(tree="default", gang=gang, pool=pool, outcome=outcome)  # type: ignore[arg-type]


def lifecycle() -> tuple[History, dict[str, int]]:
    """Enqueue, admit, run, succeed; move; requeue; timeout; cancel; refused inputs; preemption."""
    h = History()
    at: dict[str, int] = {}
    h.add(TreeConfigured(tree="default", options=TreeOptions()), source="tree")
    at["g1"] = h.add(enqueue("g1"))
    at["g2"] = h.add(enqueue("g2", 1, size=2))
    at["g3"] = h.add(enqueue("g3", preemptible=False))
    at["g4"] = h.add(enqueue("g4", 1, pool="/nowhere"))
    h.refuse(at["g4"], "pool_missing", "g4", "gang g4: pool /nowhere does not exist")
    h.decide(finished("g4", "rejected", "/nowhere"), basis=at["g4"])
    at["g5"] = h.add(enqueue("g5"))
    at["g6"] = h.add(enqueue("g6"))
    at["g7"] = h.add(enqueue("g7", 1, size=2))
    at["g7 more"] = h.add(enqueue("g7", 1, size=3, first=1))
    h.refuse(at["g7 more"], "size_mismatch", "g7")
    h.cycle(admitted("g1"), GangMovedToQueue(tree="default", gang="g3", pool=POOL, queue="non_preemptible",
                                             reason="reservation: needs cpu 4, 0 left"),
            admitted("g5"), admitted("g6"))
    h.add(report("g1/0", "running"))
    h.add(report("g1/1", "running"))
    at["g2 early"] = h.add(report("g2/0", "running"))  # g2 is waiting: refused
    h.refuse(at["g2 early"], "gang_not_admitted", "g2/0")
    h.add(report("g6/0", "running"))
    h.cycle(admitted("g3", queue="non_preemptible"))
    h.add(report("g1/0", "succeeded"))
    at["g1 done"] = h.add(report("g1/1", "succeeded"))
    h.decide(finished("g1", "done"), basis=at["g1 done"])
    at["g1 back"] = h.add(report("g1/0", "running"))  # refused: already succeeded
    h.refuse(at["g1 back"], "task_finished", "g1/0")
    at["g5 cancel"] = h.add(GangCancelled(gang="g5", reason="user asked"))
    h.decide(finished("g5", "cancelled"), basis=at["g5 cancel"])
    h.cycle()
    at["preempt"] = h.decide(PreemptionRequested(tree="default", pool=POOL, gang="g6", tasks=["g6/0", "g6/1"],
                                                 reason="over non-slack entitlement", excess={"cpu": 4.0}),
                             source="preemption")
    h.cycle()
    at["g6 stop"] = h.add(report("g6/0", "preempted"))
    h.decide(GangRequeued(tree="default", gang="g6", pool=POOL, cause="preempted",
                          reason="its tasks were preempted"), basis=at["g6 stop"])
    tick = at["tick"] = h.add(ClockTicked(), source="admission-clock")
    h.decide(GangTimedOut(tree="default", gang="g2", pool=POOL, members=1, size=2, deadline=40.0),
             GangRequeued(tree="default", gang="g3", pool=POOL, reason="1 of 2 tasks not placed within 30 s"),
             finished("g2", "timed_out"), basis=tick)
    h.decide(admitted("g3", attempt=1), CycleCompleted(tree="default", service="admission", trigger_seq=tick),
             basis=tick)  # stale: g3's next attempt is 2, this one changes nothing
    return h, at


def snapshot(store: ProjectionStore) -> dict[str, list[tuple[Any, ...]]]:
    return {
        "gangs": store.query("SELECT * FROM gangs ORDER BY tree, gang")[1],
        "tasks": store.query("SELECT * FROM tasks ORDER BY tree, task")[1],
        "held": store.query("SELECT seq, type, refused FROM gangs_held ORDER BY seq")[1],
    }


def gangs(store: ProjectionStore, *columns: str) -> dict[str, tuple[Any, ...]]:
    _, rows = store.query(f"SELECT gang, {', '.join(columns)} FROM gangs")
    return {row[0]: tuple(row[1:]) for row in rows}


def tasks(store: ProjectionStore, *columns: str) -> dict[str, tuple[Any, ...]]:
    _, rows = store.query(f"SELECT task, {', '.join(columns)} FROM tasks")
    return {row[0]: tuple(row[1:]) for row in rows}


def applied(messages: list[Stored], **options: Any) -> ProjectionStore:
    store = ProjectionStore(":memory:", [GangsProjection()], **options)
    store.apply(messages)
    return store


@pytest.fixture(scope="module")
def history() -> tuple[History, dict[str, int]]:
    return lifecycle()


@pytest.fixture
def store(history: tuple[History, dict[str, int]]) -> ProjectionStore:
    return applied(history[0].messages)


def test_every_gang_ends_in_the_state_admission_gave_it(store: ProjectionStore) -> None:
    assert gangs(store, "state", "queue", "members", "attempt", "requeues") == {
        "g1": ("done", None, 2, 1, 0),
        "g2": ("timed_out", None, 1, 0, 0),
        "g3": ("pending", "pending", 2, 1, 1),  # moved, admitted, requeued after a placement timeout
        "g4": ("rejected", None, 0, 0, 0),
        "g5": ("cancelled", None, 2, 1, 0),
        "g6": ("pending", "pending", 2, 1, 1),  # preempted: back to pending, counted once
        "g7": ("waiting", None, 1, 0, 0),  # the second member (size 3) was refused
    }
    reasons = gangs(store, "last_reason")
    assert reasons["g2"] == ("1 of 2 members at its deadline",)
    assert reasons["g3"] == ("1 of 2 tasks not placed within 30 s",)
    assert reasons["g4"] == ("pool_missing: gang g4: pool /nowhere does not exist",)
    assert reasons["g5"] == ("cancelled: user asked",)
    assert reasons["g6"] == ("its tasks were preempted",)


def test_gang_columns_come_from_the_first_members_and_the_decisions(
    store: ProjectionStore, history: tuple[History, dict[str, int]]
) -> None:
    _, at = history
    row = gangs(store, "tree", "pool", "requested_pool", "job", "user", "size", "resources", "priority",
                "preemptible", "revocable", "controller", "arrival")
    assert row["g1"] == ("default", POOL, POOL, "job-g1", "alice", 2, {"cpu": 4.0, "memory": 1024.0}, 0,
                         True, False, False, at["g1"])
    assert row["g3"][8] is False  # not preemptible
    assert row["g4"][1:3] == ("/nowhere", "/nowhere")
    assert row["g7"][-1] is None  # never complete: no arrival
    times = gangs(store, "enqueued_at", "admitted_at", "finished_at")
    assert times["g1"][0] == T0.replace(second=at["g1"])
    assert times["g1"][1] is not None and times["g1"][2] is not None
    assert times["g3"][1] is None  # requeued: not admitted now
    assert times["g7"][1:] == (None, None)


def test_tasks_follow_the_accepted_reports_and_the_decisions(store: ProjectionStore) -> None:
    assert tasks(store, "gang", "state", "preemption_requested") == {
        "g1/0": ("g1", "succeeded", False),  # its later `running` was refused
        "g1/1": ("g1", "succeeded", False),
        "g2/0": ("g2", "pending", False),  # the report while waiting was refused; timed out
        "g3/0": ("g3", "pending", False),
        "g3/1": ("g3", "pending", False),
        "g5/0": ("g5", "killed", False),  # cancelled while admitted
        "g5/1": ("g5", "killed", False),
        "g6/0": ("g6", "pending", False),  # requeued after the preemption
        "g6/1": ("g6", "pending", False),
        "g7/0": ("g7", "pending", False),
    }
    row = tasks(store, "pool", "member", "resources", "job")
    assert row["g1/1"] == (POOL, 1, {"cpu": 2.0, "memory": 512.0}, "job-g1")
    assert "g4/0" not in row and "g7/1" not in row  # refused members are no tasks


def test_a_preemption_takes_ready_tasks_at_once_and_flags_running_ones(
    history: tuple[History, dict[str, int]],
) -> None:
    h, at = history
    with applied(h.messages[: at["preempt"]]) as store:
        assert tasks(store, "state", "preemption_requested")["g6/0"] == ("running", True)
        assert tasks(store, "state", "preemption_requested")["g6/1"] == ("preempted", False)
        assert gangs(store, "state", "last_reason")["g6"] == ("admitted",
                                                              "preemption requested: over non-slack entitlement")
    with applied(h.messages[: at["g6 stop"] + 1]) as store:  # the last report, and admission's announcement
        # based on it: that does not tell the report was accepted (a refusal has that basis too)
        assert gangs(store, "state", "requeues")["g6"] == ("admitted", 0)
        store.apply(h.messages[: at["tick"] + 1])  # a decision based on a later position
        assert gangs(store, "state", "requeues")["g6"] == ("pending", 1)
        assert tasks(store, "state")["g6/0"] == ("pending",)


def test_a_refused_input_is_never_visible(history: tuple[History, dict[str, int]]) -> None:
    """Apply the log one message at a time: no prefix shows a refused report or member."""
    h, _ = history
    with ProjectionStore(":memory:", [GangsProjection()]) as store:
        seen: dict[str, list[str]] = {"g1/0": [], "g2/0": []}
        for message in h.messages:
            store.apply([message])
            for task, (state,) in tasks(store, "state").items():
                if task in seen and (not seen[task] or seen[task][-1] != state):
                    seen[task].append(state)
            assert "g7/1" not in tasks(store, "state")
            assert gangs(store, "members").get("g7", (1,)) == (1,)
        assert seen == {"g1/0": ["pending", "ready", "running", "succeeded"], "g2/0": ["pending"]}


def test_an_input_waits_until_admission_has_answered_it() -> None:
    h = History()
    h.add(enqueue("g"))
    h.cycle(admitted("g"))
    run = h.add(report("g/0", "running"))
    with applied(h.messages) as store:
        assert tasks(store, "state")["g/0"] == ("ready",)  # not answered yet
        assert snapshot(store)["held"] == [(run, "TaskStateChanged", None)]
        h.cycle()  # a decision based on a later position: the report was accepted
        store.apply(h.messages)
        assert tasks(store, "state")["g/0"] == ("running",)
        assert snapshot(store)["held"] == []


def test_a_refusal_answers_an_input_at_once() -> None:
    h = History()
    h.add(enqueue("g"))
    h.cycle(admitted("g"))
    back = h.add(report("g/0", "pending"))
    after = h.add(report("g/1", "running"))
    with applied(h.messages) as store:
        assert [row[0] for row in snapshot(store)["held"]] == [back, after]
        h.refuse(back, "backward_transition", "g/0")
        store.apply(h.messages)
        assert tasks(store, "state") == {"g/0": ("ready",), "g/1": ("ready",)}  # g/1 still waits
        assert snapshot(store)["held"] == [(after, "TaskStateChanged", None)]


def test_a_decision_never_overtakes_an_input_before_it() -> None:
    """A decision that lands after an input it was not based on takes effect after that input."""
    h = History()
    h.add(enqueue("g"))
    h.cycle(admitted("g"))
    cancel = h.add(GangCancelled(gang="g"))
    h.decide(PreemptionRequested(tree="default", pool=POOL, gang="g", tasks=["g/0"], reason="over"),
             basis=cancel - 1, source="preemption")
    with applied(h.messages) as store:
        assert gangs(store, "state") == {"g": ("admitted",)}
        assert tasks(store, "state") == {"g/0": ("ready",), "g/1": ("ready",)}  # the preemption waits too
        h.decide(finished("g", "cancelled"), basis=cancel)  # admission: the cancel came first
        h.cycle()  # and the cycle its tick started
        store.apply(h.messages)
        assert gangs(store, "state") == {"g": ("cancelled",)}
        assert tasks(store, "state") == {"g/0": ("killed",), "g/1": ("killed",)}


def test_a_cycles_decisions_take_effect_at_its_tick_even_when_they_land_after_later_inputs() -> None:
    """Admission admitted g at the tick; the cancel after the tick found it admitted (its tasks
    are killed), although the admission lands after the cancel."""
    h = History()
    h.add(enqueue("g"))
    tick = h.add(ClockTicked(), source="admission-clock")
    cancel = h.add(GangCancelled(gang="g"))
    with applied(h.messages) as store:
        assert gangs(store, "state") == {}  # the enqueue waits for its answer, the cancel behind it
        h.decide(admitted("g"), CycleCompleted(tree="default", service="admission", trigger_seq=tick), basis=tick)
        store.apply(h.messages)
        assert gangs(store, "state") == {"g": ("admitted",)}  # the cancel is not answered yet
        h.decide(finished("g", "cancelled"), basis=cancel)
        h.cycle()  # the next cycle answers the cancel
        store.apply(h.messages)
        assert gangs(store, "state", "attempt") == {"g": ("cancelled", 1)}
        assert tasks(store, "state") == {"g/0": ("killed",), "g/1": ("killed",)}
        assert snapshot(store)["held"] == []


def test_a_cycle_started_by_a_pack_of_enqueues_answers_the_pack() -> None:
    """A cycle based on the position of the input message that started it (a pack of enqueues
    that filled the tree) answers that message's inputs: they were folded whole before it."""
    h = History()
    pack = h.add(enqueue("g"))
    h.decide(admitted("g"), CycleCompleted(tree="default", service="admission", trigger_seq=pack), basis=pack)
    with applied(h.messages) as store:
        assert gangs(store, "state") == {"g": ("admitted",)}
        assert snapshot(store)["held"] == []


def test_a_stale_admission_changes_nothing() -> None:
    h = History()
    h.add(enqueue("g"))
    h.cycle(admitted("g"))
    h.cycle(admitted("g"))  # the same attempt again
    h.decide(admitted("nobody"))
    with applied(h.messages) as store:
        assert gangs(store, "state", "attempt") == {"g": ("admitted", 1)}


def test_members_arriving_in_several_enqueues_complete_the_gang() -> None:
    h = History()
    first = h.add(enqueue("g", 1, size=3))
    h.add(enqueue("g", 2, size=3, first=1))
    last = h.cycle()
    with applied(h.messages) as store:
        assert gangs(store, "state", "queue", "members", "arrival", "resources") == {
            "g": ("pending", "pending", 3, first + 1, {"cpu": 6.0, "memory": 1536.0})}
        assert list(tasks(store, "member")) == ["g/0", "g/1", "g/2"]
        assert gangs(store, "updated_seq") == {"g": (first + 1,)}
        assert last > first


def test_redelivery_changes_nothing(history: tuple[History, dict[str, int]]) -> None:
    h, _ = history
    with applied(h.messages) as store:
        before = snapshot(store)
        store.apply(h.messages)
        store.apply(h.messages[::-1])
        store.apply(h.messages[5:9] + h.messages[5:9])
        assert snapshot(store) == before


@pytest.mark.parametrize("chunk_size", [1, 3, 7, 4096])
def test_chunks_and_batches_give_the_same_tables(
    history: tuple[History, dict[str, int]], chunk_size: int
) -> None:
    h, _ = history
    with applied(h.messages) as whole:
        expected = snapshot(whole)
    with ProjectionStore(":memory:", [GangsProjection()], chunk_size=chunk_size) as store:
        for start in range(0, len(h.messages), 5):
            store.apply(h.messages[start : start + 5])
        assert snapshot(store) == expected
    with applied(h.messages, chunk_size=chunk_size) as store:
        assert snapshot(store) == expected


def test_resume_after_the_checkpoint(tmp_path: Path, history: tuple[History, dict[str, int]]) -> None:
    h, at = history
    path = tmp_path / "tree.duckdb"
    with applied(h.messages) as whole:
        expected = snapshot(whole)
    cut = at["g1 back"]  # held across the restart: the last reports, and the announcement between them
    with ProjectionStore(path, [GangsProjection()]) as store:
        store.apply(h.messages[:cut])
        assert [row[0] for row in snapshot(store)["held"]] == [at["g1 done"], at["g1 done"] + 1, cut]
    with ProjectionStore(path, [GangsProjection()]) as store:
        assert store.rebuilt == ()
        assert store.checkpoint("gangs") == cut
        store.apply(h.messages[cut - 10 :])  # the consumer redelivers from before the checkpoint
        assert snapshot(store) == expected


class GangsNext(GangsProjection):
    schema_version = GangsProjection.schema_version + 1


def test_a_schema_version_bump_rebuilds_from_the_log(tmp_path: Path, history: tuple[History, dict[str, int]]) -> None:
    h, _ = history
    path = tmp_path / "tree.duckdb"
    with ProjectionStore(path, [EventLogProjection(), GangsProjection()]) as store:
        store.apply(h.messages)
        expected = snapshot(store)
    with ProjectionStore(path, [EventLogProjection(), GangsNext()]) as store:
        assert store.rebuilt == ("gangs",)
        assert store.checkpoints() == {"event_log": h.seq, "gangs": 0}
        assert snapshot(store) == {"gangs": [], "tasks": [], "held": []}
        assert store.lowest_checkpoint == 0
        store.apply(h.messages)  # the service replays from the lowest checkpoint
        assert snapshot(store) == expected
        assert store.query("SELECT count(*) FROM event_log")[1] == [(h.seq,)]


def test_other_events_and_malformed_messages_are_ignored() -> None:
    h = History()
    h.add(TreeConfigured(tree="default", options=TreeOptions()), source="tree")
    h.add(InputRejected(tree="default", ref="/a", input_type="PoolUpsert", rule="bad", reason="no"), source="tree")
    junk = Stored(h.seq + 1, "poolwise.gang.default", b"{not json", "junk")
    with ProjectionStore(":memory:", [GangsProjection()]) as store:
        store.apply([*h.messages, junk])
        assert snapshot(store) == {"gangs": [], "tasks": [], "held": []}
        assert store.checkpoint("gangs") == junk.seq


def test_trees_are_kept_apart() -> None:
    h = History()
    h.add(enqueue("g"))
    h.add(GangEnqueued(tree="other", gang="g", pool="/x", job="j", size=1, tasks=[TaskSpec(id="g/0", resources={})]))
    h.cycle(admitted("g"))
    with applied(h.messages) as store:
        _, rows = store.query("SELECT tree, gang, state, members FROM gangs ORDER BY tree")
        assert rows == [("default", "g", "admitted", 2), ("other", "g", "pending", 1)]
        _, rows = store.query("SELECT tree, count(*) FROM tasks GROUP BY tree ORDER BY tree")
        assert rows == [("default", 2), ("other", 1)]


def test_timers_fire_before_the_input_that_advanced_time() -> None:
    """Admission's fold: the placement timer due at the cancel's time fires first (the gang goes
    back to pending, its tasks to pending), then the cancel. The requeue is announced after."""
    h = History()
    h.add(enqueue("g"))
    h.cycle(admitted("g"))
    cancel = h.add(GangCancelled(gang="g", reason="late"))
    h.decide(GangRequeued(tree="default", gang="g", pool=POOL, reason="not placed"), finished("g", "cancelled"),
             basis=cancel)
    h.cycle()
    with applied(h.messages) as store:
        assert gangs(store, "state", "requeues", "attempt", "last_reason") == {
            "g": ("cancelled", 1, 1, "cancelled: late")}
        assert tasks(store, "state") == {"g/0": ("pending",), "g/1": ("pending",)}  # not killed: not admitted


def test_a_timer_announced_after_later_inputs_still_comes_first() -> None:
    """A tick fires the timer; a cancel lands before admission announces what the timer did."""
    h = History()
    h.add(enqueue("g"))
    h.add(enqueue("w", 1, size=2))
    h.cycle(admitted("g"))
    tick = h.add(ClockTicked(), source="admission-clock")
    cancel = h.add(GangCancelled(gang="g"))
    late = h.add(enqueue("w", 1, size=2, first=1))
    h.decide(GangRequeued(tree="default", gang="g", pool=POOL, reason="not placed"),
             GangTimedOut(tree="default", gang="w", pool=POOL, members=1, size=2, deadline=1.0),
             finished("w", "timed_out"), CycleCompleted(tree="default", service="admission", trigger_seq=tick),
             basis=tick)
    h.decide(finished("g", "cancelled"), basis=cancel)
    h.refuse(late, "gang_closed", "w")
    with applied(h.messages) as store:
        assert gangs(store, "state", "requeues", "members") == {"g": ("cancelled", 1, 2), "w": ("timed_out", 0, 1)}
        assert tasks(store, "state") == {"g/0": ("pending",), "g/1": ("pending",), "w/0": ("pending",)}
        assert snapshot(store)["held"] == []
