"""Gang timeouts (waiting for members) and placement timeouts (DOMAIN §4, §5): the instants, the
jitter derived from the gang id, the requeue at the head and the re-admission."""

from __future__ import annotations

import pytest

from events import GangRequeued, GangTimedOut
from events.config import GangTimeoutOptions
from services.admission.domain.job_counts import total_jobs
from services.admission.domain.timing import gang_timeout, jitter_fraction
from tests.admission.builders import (
    admitted,
    finished,
    gang,
    pool,
    rejected,
    requeued,
    task,
    timed_out,
    world,
)

# --- waiting for members -------------------------------------------------------------------------------


@pytest.mark.parametrize(("own", "fires_at"), [(10.0, 10.0), (None, 30.0), (500.0, 100.0), (0.5, 0.5)])
def test_a_waiting_gang_times_out_after_its_own_timeout_or_the_default_capped_at_the_limit(
        own: float | None, fires_at: float) -> None:
    log = world(pool("/a"))  # gang_timeout default 30, limit 100, jitter 0
    log.feed(gang("g", "/a", tasks=1, size=2, timeout=own), at=0.25)
    deadline = 0.25 + fires_at
    assert timed_out(log.tick(deadline - 0.01)) == []
    out = log.tick(deadline)
    assert timed_out(out) == ["g"]
    (event,) = [e for e in out if isinstance(e, GangTimedOut)]
    assert (event.members, event.size, event.deadline) == (1, 2, deadline)
    assert finished(out) == {"g": "timed_out"}
    assert log.gang("g").state == "timed_out"
    assert total_jobs(log.rt, "/a") == 0  # its members are dropped: the job no longer counts
    assert "g" not in log.state.config.tree().unfinished


def test_the_timer_fires_before_the_input_that_moves_time_past_it() -> None:
    log = world(pool("/a"))
    log.feed(gang("g", "/a", tasks=1, size=2, timeout=10))
    out = log.feed(gang("g", "/a", tasks=1, size=2, first=1), at=10)  # at the deadline: too late
    assert timed_out(out) == ["g"]
    assert rejected(out) == [("g", "gang_closed")]
    assert out.index(next(e for e in out if isinstance(e, GangTimedOut))) == 0


def test_a_gang_completed_before_its_deadline_does_not_time_out() -> None:
    log = world(pool("/a"))
    log.feed(gang("g", "/a", tasks=1, size=2, timeout=10))
    log.feed(gang("g", "/a", tasks=1, size=2, first=1), at=9.99)
    assert log.gang("g").state == "pending"
    assert admitted(log.tick(9.99)) == ["g"]
    log.feed(task("g/0", "placed"), task("g/1", "placed"))
    assert timed_out(log.tick(50)) == []


def test_timers_due_together_fire_in_deadline_order_then_by_gang_id() -> None:
    log = world(pool("/a"))
    log.feed(gang("b", "/a", tasks=1, size=2, timeout=5), gang("a", "/a", tasks=1, size=2, timeout=5),
             gang("c", "/a", tasks=1, size=2, timeout=4))
    assert timed_out(log.tick(20)) == ["c", "a", "b"]


def test_jitter_is_derived_from_the_gang_id_and_lies_in_0_to_jitter() -> None:
    options = GangTimeoutOptions(default=30, limit=100, jitter=30)
    values = {g: gang_timeout(None, options, g) for g in (f"g{i}" for i in range(200))}
    assert values == {g: gang_timeout(None, options, g) for g in values}  # the same every time
    assert all(30 <= v < 60 for v in values.values())
    assert len(set(values.values())) == len(values)  # spread, not one constant
    assert min(values.values()) < 35 and max(values.values()) > 55
    assert gang_timeout(None, options, "g7") == 30 + 30 * jitter_fraction("g7")
    assert gang_timeout(500, options, "g7") == 100 + 30 * jitter_fraction("g7")  # cap, then jitter
    assert gang_timeout(5, GangTimeoutOptions(jitter=0), "g7") == 5


def test_jitter_moves_the_instant_a_gang_times_out() -> None:
    jitter = GangTimeoutOptions(default=30, limit=100, jitter=30)
    log = world(pool("/a"), gang_timeout=jitter)
    log.feed(gang("g", "/a", tasks=1, size=2, timeout=10))
    deadline = 10 + 30 * jitter_fraction("g")
    assert 10 < deadline < 40
    assert log.gang("g").timeout == deadline
    assert timed_out(log.tick(deadline - 0.001)) == []
    assert timed_out(log.tick(deadline)) == ["g"]


# --- placement ---------------------------------------------------------------------------------------------


def test_an_admitted_gang_not_placed_in_time_is_requeued_at_the_head_and_readmitted() -> None:
    log = world(pool("/a", limit={"cpu": 4}))
    log.feed(gang("g", "/a", tasks=2, cpu=2, timeout=10))
    assert admitted(log.tick(0)) == ["g"]
    log.feed(gang("other", "/a", priority=9), at=1)  # no room: pending behind nothing, priority 9
    log.feed(task("g/0", "placed"), task("g/1", "placing"), at=2)
    assert requeued(log.tick(9.99)) == []
    # at 10 the timer fires first: requeued whole, its allocation released (a partly placed gang
    # holds nothing), at the head of pending; the cycle that follows admits it again first
    out = log.tick(10)
    (event,) = [e for e in out if isinstance(e, GangRequeued)]
    assert event.cause == "placement_timeout"
    assert event.reason == "1 of 2 tasks not placed within 10 s of admission"
    assert admitted(out) == ["g"]
    g = log.gang("g")
    assert (g.state, g.attempt, g.admitted_at) == ("admitted", 2, 10)
    assert [t.state for t in g.tasks] == ["ready", "ready"]
    assert log.ledger("/a").allocation == {"cpu": 4.0}
    assert log.gang("other").state == "pending"
    # the timeout counts from the re-admission
    log.feed(task("g/0", "placed"), at=15)
    assert requeued(log.tick(19.99)) == []
    assert requeued(log.tick(20)) == ["g"]


def test_a_requeue_releases_the_allocation_and_the_running_job() -> None:
    log = world(pool("/a", limit={"cpu": 4}))
    log.feed(gang("g", "/a", tasks=2, cpu=2, timeout=10), gang("blocker", "/a", cpu=4, priority=9))
    assert admitted(log.tick(0)) == ["blocker"]
    log.feed(task("blocker/0", "succeeded"), at=1)
    assert admitted(log.tick(1)) == ["g"]
    log.feed(gang("next", "/a", cpu=4, priority=99), at=2)
    log.feed(task("g/0", "running"), at=3)  # running counts as placed; g/1 never is
    out = log.feed(task("g/0", "running"), at=11)
    assert requeued(out) == ["g"]
    assert log.ledger("/a").allocation == {"cpu": 0.0}
    assert log.ledger("/a").demand == {"cpu": 8.0}
    assert log.rt.running.get("/a", {}) == {}
    assert [t.state for t in log.gang("g").tasks] == ["pending", "pending"]
    assert log.task("g/0").started_at is None
    assert log.queue("/a") == ["g", "next"]  # at the head, ahead of priority 99


def test_a_gang_placed_in_time_is_not_requeued() -> None:
    log = world(pool("/a"))
    log.feed(gang("g", "/a", tasks=2, timeout=10))
    log.tick(0)
    log.feed(task("g/0", "launching"), task("g/1", "succeeded"), at=9)
    assert requeued(log.tick(100)) == []
    assert log.gang("g").state == "admitted"


def test_the_timer_of_an_earlier_attempt_does_not_requeue_a_later_one() -> None:
    log = world(pool("/a"))
    log.feed(gang("g", "/a", timeout=10))
    log.tick(0)
    assert requeued(log.tick(10)) == ["g"]  # readmitted at 10: its timer is now 20
    # stale entries in the timer heap (attempt 1) must not fire for attempt 2
    assert requeued(log.tick(15)) == []
    assert log.gang("g").attempt == 2


def test_a_gang_takes_the_timeouts_and_size_limit_of_the_tree_as_configured_when_it_comes() -> None:
    """The fold reads the tree's gang options once per configuration (`facts`): a new
    configuration is what the next gang gets."""
    from tests.admission.builders import tree

    log = world(pool("/a"))  # default 30, limit 100, no jitter
    log.feed(gang("a", "/a", tasks=1, size=2), gang("b", "/a", tasks=1, size=3))
    log.feed(tree(gang_timeout=GangTimeoutOptions(default=50, limit=60, jitter=0), max_tasks_per_gang=2), at=1)
    log.feed(gang("c", "/a", tasks=1, size=2), gang("d", "/a", tasks=1, size=2, timeout=90),
             gang("e", "/a", tasks=1, size=3), at=1)
    assert (log.gang("a").timeout, log.gang("c").timeout, log.gang("d").timeout) == (30, 50, 60)
    assert log.gang("b").state == "waiting" and log.gang("e").state == "rejected"
