"""Tasks after admission (DOMAIN §5) and cancels: forward moves, release on terminal states, a gang
done, preemption back to pending, cancel of a waiting, pending or admitted gang."""

from __future__ import annotations

import pytest

from events import GangRequeued
from services.admission.domain.job_counts import running_jobs, total_jobs
from tests.admission.builders import (
    admitted,
    cancel,
    finished,
    gang,
    pool,
    preempt,
    rejected,
    requeued,
    task,
    world,
)


def test_a_task_may_skip_forward_states() -> None:
    log = world(pool("/a"))
    log.feed(gang("g", "/a", tasks=3))
    log.tick(0)
    out = log.feed(task("g/0", "running"), task("g/1", "launching"), task("g/2", "placing"), at=4)
    assert rejected(out) == []
    assert [t.state for t in log.gang("g").tasks] == ["running", "launching", "placing"]
    assert log.task("g/0").started_at == 4 and log.task("g/1").started_at is None
    assert rejected(log.feed(task("g/2", "succeeded"), at=5)) == []  # placing -> succeeded


@pytest.mark.parametrize("end", ["succeeded", "failed", "killed", "lost", "preempted"])
def test_a_terminal_state_releases_the_tasks_allocation(end: str) -> None:
    log = world(pool("/a", reservation={"cpu": 10}), preemption=True)
    log.feed(gang("g", "/a", tasks=2, cpu=3, preemptible=False, controller=True))
    log.tick(0)
    ledger = log.ledger("/a")
    assert ledger.allocation == ledger.non_preemptible == ledger.controller == {"cpu": 6.0}
    log.feed(task("g/0", "running"), at=1)
    log.feed(task("g/0", end), at=2)
    assert ledger.allocation == ledger.non_preemptible == ledger.controller == {"cpu": 3.0}
    assert log.gang("g").state == "admitted"  # g/1 still holds its part


def test_a_revocable_task_releases_its_slack() -> None:
    log = world(pool("/a", reservation={"cpu": 10, "memory": 100}), resources=("cpu", "memory"),
                capacity={"cpu": 100, "memory": 1000}, revocable={"cpu": 10})
    log.feed(gang("r", "/a", tasks=2, resources={"cpu": 2, "memory": 5}, revocable=True))
    assert admitted(log.tick(0)) == ["r"]
    assert log.ledger("/a").slack == {"cpu": 4.0, "memory": 10.0}
    log.feed(task("r/1", "failed"), at=1)
    assert log.ledger("/a").slack == {"cpu": 2.0, "memory": 5.0}
    assert log.ledger("/a").allocation == {"cpu": 2.0, "memory": 5.0}


def test_a_gang_whose_tasks_all_ended_is_done() -> None:
    log = world(pool("/a", max_running_jobs=1))
    log.feed(gang("g", "/a", tasks=2), gang("next", "/a"))
    assert admitted(log.tick(0)) == ["g"]
    assert running_jobs(log.rt, "/a") == 1 and total_jobs(log.rt, "/a") == 2
    assert finished(log.feed(task("g/0", "succeeded"), at=1)) == {}
    out = log.feed(task("g/1", "failed"), at=2)
    assert finished(out) == {"g": "done"}
    assert log.gang("g").state == "done"
    assert running_jobs(log.rt, "/a") == 0 and total_jobs(log.rt, "/a") == 1
    assert log.ledger("/a").allocation == {"cpu": 0.0}
    assert "g" not in log.state.config.tree().unfinished
    assert admitted(log.tick(3)) == ["next"]  # its running-job slot is free


def test_a_gang_with_a_preempted_task_goes_back_to_pending_as_a_new_attempt() -> None:
    log = world(pool("/a", limit={"cpu": 2}))
    log.feed(gang("g", "/a", tasks=2))
    log.tick(0)
    log.feed(task("g/0", "running"), task("g/1", "running"), at=1)
    log.feed(preempt("g", "/a", "g/0", "g/1"), at=2)
    assert [t.preemption_requested for t in log.gang("g").tasks] == [True, True]
    assert log.ledger("/a").allocation == {"cpu": 2.0}  # held until the tasks say they stopped
    log.feed(task("g/0", "preempted"), at=3)
    out = log.feed(task("g/1", "succeeded"), at=3)
    (event,) = [e for e in out if isinstance(e, GangRequeued)]
    assert event.cause == "preempted"
    g = log.gang("g")
    assert (g.state, g.queue, g.head_rank, g.attempt) == ("pending", "pending", 0, 1)
    assert [(t.state, t.preemption_requested, t.started_at) for t in g.tasks] == [("pending", False, None)] * 2
    assert log.ledger("/a").allocation == {"cpu": 0.0} and log.ledger("/a").demand == {"cpu": 2.0}
    assert admitted(log.tick(4)) == ["g"] and log.gang("g").attempt == 2


def test_preempting_a_gang_that_runs_nothing_yet_puts_it_straight_back_in_pending() -> None:
    log = world(pool("/a"))
    log.feed(gang("g", "/a", tasks=2, cpu=2))
    log.tick(0)
    log.feed(task("g/0", "placing"), at=1)
    out = log.feed(preempt("g", "/a", "g/0"), at=2)
    assert [(o.type, getattr(o, "cause", None)) for o in out] == [("GangRequeued", "preempted")]
    assert log.gang("g").state == "pending" and log.gang("g").head_rank == 0
    assert log.ledger("/a").allocation == {"cpu": 0.0}
    assert running_jobs(log.rt, "/a") == 0


# --- cancel ---------------------------------------------------------------------------------------------------


def test_cancel_of_a_pending_gang_takes_it_out_of_its_queue() -> None:
    log = world(pool("/a", reservation={"cpu": 1}))
    log.feed(gang("np0", "/a", preemptible=False), gang("np1", "/a", preemptible=False, cpu=2))
    log.tick(0)
    assert log.queue("/a", "non_preemptible") == ["np1"]
    assert log.ledger("/a").demand == {"cpu": 2.0}
    out = log.feed(cancel("np1"), at=1)
    assert finished(out) == {"np1": "cancelled"}
    assert log.queue("/a", "non_preemptible") == [] and log.ledger("/a").demand == {"cpu": 0.0}
    assert (log.gang("np1").state, log.gang("np1").queue) == ("cancelled", None)
    assert total_jobs(log.rt, "/a") == 1


def test_cancel_of_an_admitted_gang_kills_its_tasks_and_releases_everything() -> None:
    log = world(pool("/a", max_running_jobs=1))
    log.feed(gang("g", "/a", tasks=2, cpu=3), gang("next", "/a"))
    log.tick(0)
    log.feed(task("g/0", "succeeded"), at=1)
    out = log.feed(cancel("g"), at=2)
    assert finished(out) == {"g": "cancelled"}
    assert [t.state for t in log.gang("g").tasks] == ["succeeded", "killed"]
    assert log.ledger("/a").allocation == {"cpu": 0.0}
    assert running_jobs(log.rt, "/a") == 0
    assert admitted(log.tick(3)) == ["next"]
    # a task report after the cancel is refused: the gang is no longer admitted
    assert rejected(log.feed(task("g/1", "running"), at=4)) == [("g/1", "gang_not_admitted")]


def test_cancel_of_a_waiting_gang_stops_its_timer() -> None:
    log = world(pool("/a"))
    log.feed(gang("g", "/a", tasks=1, size=2, timeout=5))
    assert finished(log.feed(cancel("g"))) == {"g": "cancelled"}
    out = log.tick(10)
    assert [e.type for e in out if e.type in ("GangTimedOut", "GangFinished")] == []
    assert log.gang("g").state == "cancelled"


def test_a_gang_cancelled_before_its_admission_lands_is_admitted_then_cancelled() -> None:
    log = world(pool("/a"))
    log.feed(gang("g", "/a", cpu=5))
    decided = log.tick(0, land=False)  # admitted at the tick, its decision still on the way
    assert admitted(decided) == ["g"] and log.ledger("/a").allocation == {"cpu": 5.0}
    assert finished(log.feed(cancel("g"))) == {"g": "cancelled"}  # the cancel comes after the tick
    assert [t.state for t in log.gang("g").tasks] == ["killed"]
    log.land(decided)  # GangAdmitted read back after the cancel: it changes nothing
    assert log.gang("g").state == "cancelled"
    assert log.ledger("/a").allocation == {"cpu": 0.0} and running_jobs(log.rt, "/a") == 0


def test_an_admission_decided_twice_applies_once() -> None:
    log = world(pool("/a"))
    log.feed(gang("g", "/a", cpu=5))
    decided = log.tick(0)
    log.land(decided)  # the same decisions read again (a duplicate that slipped through)
    assert log.gang("g").attempt == 1
    assert log.ledger("/a").allocation == {"cpu": 5.0}
    assert requeued(log.tick(1)) == []


def test_a_stale_admission_of_an_earlier_attempt_does_not_admit_a_requeued_gang() -> None:
    log = world(pool("/a"))
    log.feed(gang("g", "/a", cpu=5, timeout=10))
    decided = log.tick(0)
    log.feed(task("g/0", "placing"), at=1)
    assert requeued(log.feed(task("g/0", "placing"), at=10)) == ["g"]  # back to pending, attempt 1 over
    log.land(decided)  # attempt 1's GangAdmitted read again
    assert (log.gang("g").state, log.gang("g").attempt) == ("pending", 1)
    assert log.ledger("/a").allocation == {"cpu": 0.0}
    assert admitted(log.tick(11)) == ["g"] and log.gang("g").attempt == 2


def test_finished_gangs_leave_the_live_gangs_a_cycle_looks_through_and_are_still_answered() -> None:
    log = world(pool("/a", mode="fair_share"))  # gang timeouts 30 s
    log.feed(gang("done", "/a", tasks=1), gang("cancelled", "/a"), gang("waits", "/a", tasks=1, size=2),
             gang("refused", "/nowhere"), gang("runs", "/a", tasks=1), at=0)
    assert admitted(log.tick(0)) == ["done", "cancelled", "runs"]
    log.feed(task("done/0", "succeeded"), cancel("cancelled"), at=1)
    log.tick(31)  # "waits" (1 of 2 members) times out
    assert {g: log.gang(g).state for g in ("done", "cancelled", "waits", "refused", "runs")} == {
        "done": "done", "cancelled": "cancelled", "waits": "timed_out", "refused": "rejected", "runs": "admitted"}
    assert list(log.rt.live) == ["runs"]
    assert {pool: list(gangs) for pool, gangs in log.rt.admitted.items()} == {"/a": ["runs"]}
    assert list(log.rt.gangs) == ["done", "cancelled", "waits", "refused", "runs"]
    # what comes later for a finished gang is refused by its state, as before
    out = log.feed(gang("done", "/a", tasks=1, first=1, size=1), cancel("waits"), task("done/0", "running"), at=32)
    assert [rule for _, rule in rejected(out)] == ["gang_closed", "cancel_finished", "gang_not_admitted"]


def test_the_admitted_gangs_of_a_pool_follow_admissions_requeues_and_ends() -> None:
    log = world(pool("/a", mode="fair_share"), pool("/b"))
    log.feed(gang("x", "/a", tasks=1), gang("y", "/a", tasks=1), gang("z", "/b", tasks=1), at=0)
    log.tick(0)
    assert {pool: list(gangs) for pool, gangs in log.rt.admitted.items()} == {"/a": ["x", "y"], "/b": ["z"]}
    assert [g.number for g in (log.gang("x"), log.gang("y"), log.gang("z"))] == [1, 2, 3]
    log.feed(preempt("x", "/a", "x/0"), at=1)  # not running yet: given back at once, x back to pending
    assert log.gang("x").state == "pending"
    log.feed(cancel("z"), task("y/0", "succeeded"), at=2)
    assert log.rt.admitted == {}
    log.tick(3)  # x admitted again
    assert {pool: list(gangs) for pool, gangs in log.rt.admitted.items()} == {"/a": ["x"]}
