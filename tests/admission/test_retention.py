"""Retention of finished gangs (tree option `gang_retention`, seconds of log time): a gang that
finished (done, cancelled, timed out, rejected) is forgotten that long after it finished, at the
first event at or after that time; what comes for it later is refused with rule `gang_forgotten`, and
its ids (the gang's and its tasks') are not used again."""

from __future__ import annotations

import pytest

from services.admission.domain.explain import explain
from services.admission.folder import AdmissionFolder
from services.admission.queries import ExplainingFolder
from tests.admission.builders import admitted, cancel, finished, gang, pool, refusal, rejected, task, tree, world


def done_gang(retention: float | None = 60.0):  # type: ignore[no-untyped-def]
    """`g` admitted at 0 and done at 10; the tree remembers finished gangs `retention` seconds."""
    log = world(pool("/a", reservation={"cpu": 10}), gang_retention=retention)
    log.feed(gang("g", "/a", tasks=2))
    assert admitted(log.tick(0)) == ["g"]
    out = log.feed(task("g/0", "succeeded"), task("g/1", "succeeded"), at=10)
    assert finished(out) == {"g": "done"}
    return log


def test_a_done_gang_is_remembered_until_its_retention_ends() -> None:
    log = done_gang(60)
    log.tick(69.9)
    assert log.gang("g").state == "done"
    assert rejected(log.feed(cancel("g"))) == [("g", "cancel_finished")]  # answered by its state
    log.tick(70)  # forgotten at the first event at or after 10 + 60, as timers fire
    assert "g" not in log.rt.gangs and "g/0" not in log.rt.tasks and "g/1" not in log.rt.tasks
    assert "g" in log.state.config.tree().seen_gangs and log.rt.forgotten_tasks == {"g/0", "g/1"}


@pytest.mark.parametrize(("late", "ref"), [
    (cancel("g"), "g"),
    (gang("g", "/a", tasks=1), "g"),  # the gang id is used for good
    (task("g/1", "running", "g"), "g/1"),
])
def test_what_comes_for_a_forgotten_gang_is_refused_with_its_own_rule(late, ref) -> None:  # type: ignore[no-untyped-def]
    log = done_gang(60)
    log.tick(100)
    found = refusal(log.feed(late))
    assert (found.ref, found.rule) == (ref, "gang_forgotten")
    assert "forgotten 60 s of log time later" in found.reason
    assert "g" not in log.rt.gangs  # and nothing of it comes back


def test_a_forgotten_gangs_task_ids_stay_used() -> None:
    log = done_gang(60)
    log.tick(100)
    assert rejected(log.feed(gang("other", "/a", tasks=1))) == []
    reuse = gang("h", "/a", tasks=1)
    reuse = reuse.model_copy(update={"tasks": [reuse.tasks[0].model_copy(update={"id": "g/0"})]})
    assert rejected(log.feed(reuse)) == [("h", "duplicate_task")]


def test_every_way_to_finish_is_forgotten() -> None:
    log = world(pool("/a", reservation={"cpu": 10}), gang_retention=5)
    log.feed(gang("timed", "/a", tasks=1, size=2, timeout=1),  # times out at 1
             gang("cancelled", "/a", tasks=1),
             gang("refused", "/nowhere", tasks=1))
    log.feed(cancel("cancelled"))
    log.tick(2)
    assert {g: log.gang(g).state for g in ("timed", "cancelled", "refused")} == {
        "timed": "timed_out", "cancelled": "cancelled", "refused": "rejected"}
    log.tick(5.5)  # cancelled and refused at 0: forgotten from 5 on; timed out at 1: not yet
    assert set(log.rt.gangs) == {"timed"}
    log.tick(6)
    assert log.rt.gangs == {}
    assert all(g in log.state.config.tree().seen_gangs for g in ("timed", "cancelled", "refused"))


def test_forgetting_moves_no_tick_and_decides_nothing() -> None:
    """Forgetting is not a timer the clock ticks for: nothing is announced, nothing published."""
    log = done_gang(60)
    assert log.state.next_deadline() is None or log.state.next_deadline() < 70  # only placement timers
    out = log.tick(1000)
    assert out == [e for e in out if type(e).__name__ in ("EntitlementsComputed", "CycleCompleted")]


def test_none_keeps_finished_gangs_for_ever() -> None:
    log = done_gang(None)
    log.tick(10_000_000)
    assert log.gang("g").state == "done" and not log.rt.forgotten_tasks


def test_a_live_gang_is_never_forgotten() -> None:
    log = world(pool("/a", reservation={"cpu": 10}), gang_retention=1)
    log.feed(gang("g", "/a", tasks=1))
    log.tick(0)
    log.tick(1000)
    assert log.gang("g").state == "admitted"


def test_explain_says_a_gang_was_forgotten_and_drops_its_notes() -> None:
    log = world(pool("/a", reservation={"cpu": 10}), gang_retention=60)
    folder = ExplainingFolder(AdmissionFolder(log.state))  # wires the history to the state's forgetting
    log.feed(gang("g", "/a", tasks=1), cancel("g"))
    folder.history.observe(cancel("g").model_copy(update={"reason": "no longer needed"}), 0.0)
    assert ("default", "g") in folder.history.notes
    log.tick(100)
    assert ("default", "g") not in folder.history.notes
    text = explain(log.state, "default", "g", folder.history).findings[0].message
    assert "finished and was forgotten" in text


def test_gangs_are_forgotten_by_deadline_ties_by_gang_id() -> None:
    """In deadline order, ties by gang id, as the timers fire; a retention made shorter forgets
    the gangs that finish after it first."""
    log = world(pool("/a", reservation={"cpu": 10}), gang_retention=60)
    forgotten: list[str] = []
    log.state.on_forget = lambda tree_name, gang_id: forgotten.append(gang_id)
    log.feed(*(gang(g, "/a", tasks=1) for g in ("c", "a", "b", "d")))
    log.feed(cancel("c"), cancel("a"), cancel("b"), at=1)  # forgotten at 61, in the order a, b, c
    log.feed(tree(gang_retention=5), at=10)
    log.feed(cancel("d"), at=10)  # forgotten at 15, before them
    log.tick(20)
    assert forgotten == ["d"]
    log.tick(61)
    assert forgotten == ["d", "a", "b", "c"] and set(log.rt.gangs) == set()
