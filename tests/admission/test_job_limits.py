"""Running-job limits (DOMAIN §4 check 4, YTsaurus `max_running_operation_count`): a job that would
break one waits, queued by arrival in the first pool whose limit is full, and its gangs are taken
first when a slot there frees, even before a later job in a leaf the cycle visits earlier.

Which pool a gang waits at is fold-derived: when admission's `CycleCompleted` is read back, every
queued gang of a job that still needs a slot is marked with the first full pool on its way up
(`Gang.slot_wait`); the next cycle tries the marked gangs first, by their job's arrival."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.admission.domain.job_counts import running_jobs
from tests.admission.builders import Log, admitted, cancel, gang, moved, pool, task, world


def _org(limit: int = 1, **leaf: Any) -> Log:
    """/org (max_running_jobs `limit`) over leaves /org/x and /org/y; job r runs in /org/x."""
    log = world(pool("/org", max_running_jobs=limit), pool("/org/x", **leaf), pool("/org/y", **leaf))
    log.feed(gang("r", "/org/x", job="R"))
    assert admitted(log.tick(0)) == ["r"]
    return log


def test_the_earliest_waiting_job_gets_the_freed_slot_even_in_a_leaf_visited_later() -> None:
    log = _org()
    log.feed(gang("y1", "/org/y", job="Y"), at=1)
    assert admitted(log.tick(1)) == []
    log.feed(gang("x1", "/org/x", job="X"), at=2)
    assert admitted(log.tick(2)) == []
    assert (log.gang("y1").slot_wait, log.gang("x1").slot_wait) == ("/org", "/org")
    log.feed(task("r/0", "succeeded"), at=3)
    # /org/x comes first in path order, but Y has waited at /org since before X arrived
    assert admitted(log.tick(3)) == ["y1"]
    assert log.gang("x1").state == "pending" and log.gang("x1").slot_wait == "/org"
    assert log.gang("y1").slot_wait is None


def test_a_waiting_job_goes_before_a_job_arriving_as_the_slot_frees() -> None:
    log = _org()
    log.feed(gang("y1", "/org/y", job="Y"), at=1)
    log.tick(1)
    log.feed(task("r/0", "succeeded"), gang("x1", "/org/x", job="X", priority=100), at=2)
    assert admitted(log.tick(2)) == ["y1"]


def test_waiting_jobs_are_queued_by_arrival_not_priority() -> None:
    log = world(pool("/a", max_running_jobs=1))
    log.feed(gang("r", "/a", job="R"))
    log.tick(0)
    log.feed(gang("low", "/a", job="L", priority=0), at=1)
    log.tick(1)
    log.feed(gang("high", "/a", job="H", priority=9), at=2)
    log.tick(2)
    assert log.queue("/a") == ["high", "low"]  # the pool's own order is by priority
    log.feed(task("r/0", "succeeded"), at=3)
    assert admitted(log.tick(3)) == ["low"]  # the slot goes by arrival
    log.feed(task("low/0", "succeeded"), at=4)
    assert admitted(log.tick(4)) == ["high"]


def test_newcomers_of_one_cycle_are_taken_in_the_pools_order() -> None:
    # nobody waited before: when jobs arrive together, the cycle's order decides who breaks the limit
    log = world(pool("/a", max_running_jobs=1))
    log.feed(gang("low", "/a", job="L", priority=0), gang("high", "/a", job="H", priority=9))
    assert admitted(log.tick(0)) == ["high"]
    assert log.gang("low").slot_wait == "/a"


def test_every_gang_of_the_waiting_job_is_taken_with_it() -> None:
    log = _org()
    log.feed(gang("y1", "/org/y", job="Y"), gang("y2", "/org/x", job="Y"), at=1)
    log.tick(1)
    log.feed(gang("x1", "/org/x", job="X"), at=2)
    log.tick(2)
    log.feed(task("r/0", "succeeded"), at=3)
    assert admitted(log.tick(3)) == ["y1", "y2"]  # Y's gangs by arrival; X still waits
    assert running_jobs(log.rt, "/org") == 1


def test_a_job_waits_at_the_first_pool_whose_limit_is_full() -> None:
    # /org allows 2 running jobs, /org/x only 1
    log = world(pool("/org", max_running_jobs=2), pool("/org/x", max_running_jobs=1), pool("/org/y"))
    log.feed(gang("a", "/org/x", job="A"))
    log.tick(0)
    log.feed(gang("b", "/org/x", job="B"), at=1)  # /org/x is full (1 of 1); /org is not (1 of 2)
    log.tick(1)
    assert log.gang("b").slot_wait == "/org/x"
    log.feed(gang("c", "/org/y", job="C"), at=2)  # /org has a free slot: C takes it, B cannot use it
    assert admitted(log.tick(2)) == ["c"]
    log.feed(gang("d", "/org/y", job="D"), at=3)
    log.tick(3)
    assert log.gang("d").slot_wait == "/org"  # /org is full now (A, C)
    assert log.gang("b").slot_wait == "/org/x"  # the first full pool on b's way up is still /org/x
    # A ends: /org/x and /org both free a slot; B (waiting since 1) goes before D (since 3)
    log.feed(task("a/0", "succeeded"), at=4)
    assert admitted(log.tick(4)) == ["b"]
    assert log.gang("d").state == "pending"


def test_a_slot_freed_below_a_full_ancestor_does_not_let_the_job_in() -> None:
    log = world(pool("/org", max_running_jobs=2), pool("/org/x", max_running_jobs=1), pool("/org/y"))
    log.feed(gang("a", "/org/x", job="A"), gang("c", "/org/y", job="C"))
    log.tick(0)
    log.feed(gang("b", "/org/x", job="B"), gang("d", "/org/y", job="D"), at=1)
    log.tick(1)
    log.feed(task("a/0", "succeeded"), gang("e", "/org/y", job="E"), at=2)
    # the freed slot is at /org/x and at /org: B, the earliest waiter, takes both
    assert admitted(log.tick(2)) == ["b"]
    log.feed(task("c/0", "succeeded"), at=3)
    assert admitted(log.tick(3)) == ["d"]  # then D, before E


def test_the_first_waiting_job_keeps_the_slot_while_it_waits_for_resources() -> None:
    # /org/y is full of R2's work: Y, first in line at /org, cannot use the freed slot yet, and X,
    # behind it, does not take it either (the slot is Y's, as a running job's would be in YTsaurus)
    log = world(pool("/org", max_running_jobs=2), pool("/org/x"), pool("/org/y", limit={"cpu": 10}))
    log.feed(gang("r1", "/org/x", job="R1"), gang("r2", "/org/y", job="R2", cpu=10))
    assert admitted(log.tick(0)) == ["r1", "r2"]
    log.feed(gang("y1", "/org/y", job="Y", cpu=5), at=1)
    log.tick(1)
    log.feed(gang("x1", "/org/x", job="X"), at=2)
    log.tick(2)
    log.feed(task("r1/0", "succeeded"), at=3)
    out = log.tick(3)
    assert admitted(out) == [] and moved(out) == {}
    assert log.gang("x1").state == "pending"
    log.feed(task("r2/0", "succeeded"), at=4)
    assert admitted(log.tick(4)) == ["y1", "x1"]


def test_a_waiting_job_that_leaves_frees_its_place_in_line() -> None:
    log = _org()
    log.feed(gang("y1", "/org/y", job="Y"), at=1)
    log.tick(1)
    log.feed(gang("x1", "/org/x", job="X"), at=2)
    log.tick(2)
    log.feed(cancel("y1"), task("r/0", "succeeded"), at=3)
    assert admitted(log.tick(3)) == ["x1"]


def test_gangs_held_by_a_job_limit_are_demand() -> None:
    log = _org()
    log.feed(gang("y1", "/org/y", job="Y", cpu=4), at=1)
    log.tick(1)
    assert log.ledger("/org/y").demand == {"cpu": 4.0}
    assert log.gang("y1").queue == "pending"


def test_a_job_that_needs_no_new_slot_is_not_marked() -> None:
    log = world(pool("/a", max_running_jobs=1, limit={"cpu": 2}))
    log.feed(gang("r1", "/a", job="R", cpu=2), gang("r2", "/a", job="R", cpu=2), gang("o", "/a", job="O"))
    assert admitted(log.tick(0)) == ["r1"]
    assert log.gang("r2").slot_wait is None  # R runs: r2 waits for room, not for a slot
    assert log.gang("o").slot_wait == "/a"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_running_jobs_never_exceed_a_limit_whatever_the_order_of_events(data: st.DataObject) -> None:
    limits = data.draw(st.tuples(*[st.one_of(st.none(), st.integers(1, 3)) for _ in range(4)]), "limits")
    paths = ["/o", "/o/x", "/o/y", "/p"]
    log = world(*[pool(p, **({} if n is None else {"max_running_jobs": n}))
                  for p, n in zip(paths, limits, strict=True)], capacity={"cpu": 20})
    leaves = ["/o/x", "/o/y", "/p"]
    for step in range(6):
        for i in range(data.draw(st.integers(0, 4), f"arrivals {step}")):
            log.feed(gang(f"g{step}-{i}", data.draw(st.sampled_from(leaves)), cpu=data.draw(st.integers(1, 6)),
                          job=f"j{data.draw(st.integers(0, 5))}"), at=step)
        live = [t.id for g in log.rt.gangs.values() if g.state == "admitted" for t in g.tasks
                if t.state not in ("succeeded", "failed", "killed", "lost", "preempted")]
        for task_id in data.draw(st.lists(st.sampled_from(live), unique=True), f"ends {step}") if live else []:
            log.feed(task(task_id, "succeeded"), at=step)
        log.tick(step)
        for path, n in zip(paths, limits, strict=True):
            if n is not None:
                assert running_jobs(log.rt, path) <= n, (path, log.rt.running.get(path))
        for leaf in leaves:  # nothing is admitted beyond what the pool may hold
            assert log.ledger(leaf).allocation.get("cpu", 0.0) <= 20.0 + 1e-6
