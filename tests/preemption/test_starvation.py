"""Starvation (DOMAIN §6, YTsaurus): below fair share when, on a kind it demands, a pool's usage is
below min(entitlement * tolerance, demand); starving after `starvation_timeout`; an event on
every change of status, with time from the log."""

from __future__ import annotations

import pytest

from events import PoolDeleted
from tests.preemption.harness import System, cancel, gang, gangs, host, pool, starvation, task, tree


def squeezed(*, tolerance: float = 0.8, timeout: float = 30.0, parent: bool = False) -> System:
    """10 cpu, pools /b and /a (or /org/a). At 0 /b takes 8 (nobody else wants any), at 1 /a takes
    the 2 left; preemption is off, so /b keeps its 8. Nothing is below its fair share yet."""
    a = "/org/a" if parent else "/a"
    s = System()
    s.feed(tree(enabled=False, starvation_tolerance=tolerance, starvation_timeout=timeout), host(cpu=10), pool("/b"),
           *([pool("/org")] if parent else []), pool(a), at=0)
    s.feed(gangs("b", 8, "/b"), at=0)
    s.tick(0)
    s.set_state("running", *[f"b{i}" for i in range(8)], at=0)
    s.feed(gangs("a", 2, a), at=1)
    assert starvation(s.tick(1)) == []
    return s


def test_below_fair_share_then_starving_then_ok() -> None:
    s = squeezed()
    s.feed(gang("big", "/a", cpu=6), at=10)  # /a is entitled to 5 now: big cannot fit
    (first,) = starvation(s.tick(10))
    assert first.model_dump(exclude={"type", "version"}) == {
        "tree": "default", "pool": "/a", "status": "below_fair_share", "previous": "ok", "since": 10.0,
        "below_since": 10.0, "kinds": ["cpu"], "usage": {"cpu": 2.0}, "entitlement": {"cpu": 5.0},
        "demand": {"cpu": 6.0}}  # 2 < min(5 * 0.8, 6)
    assert starvation(s.tick(20)) == []  # no change, no event
    assert starvation(s.tick(39.9)) == []
    (second,) = starvation(s.tick(45))
    assert (second.status, second.previous, second.since, second.below_since) == ("starving", "below_fair_share",
                                                                                    40.0, 10.0)
    assert starvation(s.tick(50)) == []
    s.feed(cancel("big"), at=60)
    (third,) = starvation(s.tick(60))
    assert (third.status, third.previous, third.since, third.below_since) == ("ok", "starving", 60.0, None)
    status = s.preemption.memory["default"].starvation["/a"]
    assert (status.status, status.since) == ("ok", 60.0)


def test_getting_back_to_fair_share_before_the_timeout_starts_the_clock_again() -> None:
    s = squeezed()
    s.feed(gang("big", "/a", cpu=6), at=10)
    assert [e.status for e in starvation(s.tick(10))] == ["below_fair_share"]
    s.feed(cancel("big"), at=20)
    assert [e.status for e in starvation(s.tick(20))] == ["ok"]
    s.feed(gang("big2", "/a", cpu=6), at=30)
    (again,) = starvation(s.tick(30))
    assert (again.status, again.since) == ("below_fair_share", 30.0)
    assert starvation(s.tick(55)) == []  # 55 - 10 >= 30, but 55 - 30 < 30
    assert [e.status for e in starvation(s.tick(60))] == ["starving"]


@pytest.mark.parametrize(("tolerance", "below"), [(0.5, True), (0.4, False), (0.0, False)])
def test_tolerance(tolerance: float, below: bool) -> None:
    s = squeezed(tolerance=tolerance)  # usage 2, entitlement 5 once big waits
    s.feed(gang("big", "/a", cpu=6), at=10)
    assert bool(starvation(s.tick(10))) is below


def test_capped_by_demand_a_pool_holding_what_it_waits_for_is_ok() -> None:
    """usage 2 of entitlement 3, 1 more wanted (held back by a job limit): min(3 * 0.8, 1) <= 2."""
    s = squeezed()
    s.feed(pool("/a", max_running_jobs=2), at=5)
    s.feed(gang("one", "/a", cpu=1), at=10)
    s.tick(10)
    assert s.gang("one").state == "pending"
    assert starvation(s.entries[i].event for i in range(len(s.entries))) == []


def test_a_timeout_of_zero_makes_a_pool_starve_at_once() -> None:
    s = squeezed(timeout=0)
    s.feed(gang("big", "/a", cpu=6), at=10)
    (event,) = starvation(s.tick(10))
    assert (event.status, event.previous, event.since) == ("starving", "ok", 10.0)


def test_parents_are_judged_on_the_sums_of_their_leaves() -> None:
    s = squeezed(parent=True)
    s.feed(gang("big", "/org/a", cpu=6), at=10)
    assert [(e.pool, e.status) for e in starvation(s.tick(10))] == [("/org", "below_fair_share"),
                                                                     ("/org/a", "below_fair_share")]


def test_revocable_work_does_not_count() -> None:
    s = System()
    s.feed(tree(enabled=False), host(cpu=10, revocable={"cpu": 2}), pool("/a"), at=0)
    s.feed(gang("r", "/a", revocable=True, cpu=5), at=0)  # more than the slack: waits, but is best effort
    s.tick(0)
    assert s.gang("r").state == "pending"
    assert starvation(s.entries[i].event for i in range(len(s.entries))) == []


def test_a_deleted_pool_is_forgotten() -> None:
    s = squeezed()
    s.feed(gang("big", "/a", cpu=6), at=10)
    s.tick(10)
    s.feed(cancel("big"), *[task(f"a{i}/0", "succeeded") for i in range(2)], at=20)
    s.feed(PoolDeleted(tree="default", path="/a"), at=20)
    s.tick(20)
    assert "/a" not in s.preemption.memory["default"].starvation
