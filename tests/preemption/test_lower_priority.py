"""Preemption inside a pool (`preempt_lower_priority`, DOMAIN §6): a gang blocked at the head of
a queue takes the pool's lower-priority preemptible gangs, lowest first, if that makes it fit."""

from __future__ import annotations

from typing import Any

from tests.preemption.harness import System, admitted, gang, gangs, host, pool, preempted, requests, task, tree


def full_pool(priorities: list[int], *, option: bool = True, enabled: bool = True, state: str = "running",
              tasks: int = 1, **pool_config: Any) -> System:
    """10 cpu, one pool /a (the option on) full of one-cpu gangs l0, l1, ... of the given
    priorities (each `tasks` tasks), all `state`."""
    s = System()
    s.feed(tree(enabled=enabled), host(cpu=10), pool("/a", preempt_lower_priority=option, **pool_config), at=0)
    s.feed([gang(f"l{i}", "/a", priority=p, tasks=tasks) for i, p in enumerate(priorities)], at=0)
    assert len(admitted(s.tick(0))) == len(priorities)
    if state != "ready":
        s.set_state(state, *[f"l{i}" for i in range(len(priorities))], at=1)
    return s


def test_a_blocked_gang_takes_the_lowest_priorities_first() -> None:
    s = full_pool([3, 0, 4, 1, 2, 5, 6, 7, 8, 9])
    s.feed(gang("h", "/a", priority=5, cpu=3), at=10)
    decided = requests(s.tick(10))
    assert [r.gang for r in decided] == ["l1", "l3", "l4"]  # priorities 0, 1, 2
    assert all(r.pool == "/a" for r in decided)
    assert decided[0].reason.startswith("makes room for gang h (priority 5, blocked at the head of queue pending "
                                        "of /a: entitlement: needs cpu 3, 0 non-slack left)")
    assert decided[0].reason.endswith("takes priority 0 < 5")
    assert decided[0].excess == {"cpu": 3.0}


def test_never_equal_or_higher_priority() -> None:
    s = full_pool([5] * 8 + [9, 9])
    s.feed(gang("h", "/a", priority=5, cpu=1), at=10)
    assert preempted(s.tick(10)) == []
    # blocked in the non_preemptible queue (visited before pending: any victim would stay behind it)
    s = full_pool([5] * 8 + [9, 9], reservation={"cpu": 10})
    s.feed(gang("np", "/a", priority=5, cpu=1, preemptible=False), at=10)
    assert preempted(s.tick(10)) == []
    assert s.gang("np").queue == "non_preemptible"


def test_all_or_nothing_when_the_lower_priorities_cannot_make_it_fit() -> None:
    s = full_pool([0, 1] + [7] * 8)
    s.feed(gang("h", "/a", priority=5, cpu=3), at=10)
    assert preempted(s.tick(10)) == []  # only 2 cpu of lower priority


def test_whole_gangs_and_no_more_than_needed() -> None:
    s = System()
    s.feed(tree(), host(cpu=10), pool("/a", preempt_lower_priority=True), at=0)
    s.feed(gang("trio", "/a", tasks=3, priority=0), [gang(f"l{i}", "/a", priority=1) for i in range(7)], at=0)
    s.tick(0)
    s.set_state("running", "trio", *[f"l{i}" for i in range(7)], at=1)
    s.feed(gang("h", "/a", priority=5, cpu=2), at=10)
    decided = requests(s.tick(10))
    assert [(r.gang, r.tasks) for r in decided] == [("trio", ["trio/0", "trio/1", "trio/2"])]


def test_no_repeat_while_outstanding_then_the_blocked_gang_is_admitted_and_the_victims_wait() -> None:
    s = full_pool([0] * 10)
    s.feed(gang("h", "/a", priority=5, cpu=2), at=10)
    assert preempted(s.tick(10)) == ["l9", "l8"]
    assert preempted(s.tick(11)) == []  # requests outstanding: h fits once they are done
    assert s.state_of("h") == {"h": "pending"}
    s.ack(at=12)
    out = s.tick(12)
    assert admitted(out) == ["h"]
    assert preempted(out) == []
    assert s.state_of("l8", "l9") == {"l8": "pending", "l9": "pending"}
    assert preempted(s.tick(13)) == []  # and nothing more: no loop


def test_ready_victims_are_released_at_once() -> None:
    s = full_pool([0] * 10, state="ready")
    s.feed(gang("h", "/a", priority=5, cpu=2), at=10)
    assert preempted(s.tick(10)) == ["l9", "l8"]
    assert s.state_of("l8", "l9") == {"l8": "pending", "l9": "pending"}
    assert admitted(s.tick(11)) == ["h"]


def test_off_unless_the_pool_asks_for_it_and_preemption_is_on() -> None:
    for s in (full_pool([0] * 10, option=False), full_pool([0] * 10, enabled=False)):
        s.feed(gang("h", "/a", priority=5, cpu=2), at=10)
        assert preempted(s.tick(10)) == []


def test_a_victim_that_would_be_admitted_back_first_is_not_taken() -> None:
    """fifo_sort [arrival]: a requeued victim that arrived before the blocked gang would be at the
    head of pending again, admitted into the room: a loop. Only later arrivals may be taken."""
    s = System()
    s.feed(tree(), host(cpu=10), pool("/a", preempt_lower_priority=True, fifo_sort=["arrival"]), at=0)
    s.feed([gang(f"l{i}", "/a", priority=0) for i in range(8)], at=0)
    s.tick(0)
    s.feed(gang("h", "/a", priority=5, cpu=4), [gang(f"m{i}", "/a", priority=0) for i in range(2)], at=5)
    s.tick(5)  # h is blocked (needs 4, 2 left) and stops the queue: m0, m1 wait behind it
    s.set_state("running", *[f"l{i}" for i in range(8)], at=6)
    assert preempted(s.tick(10)) == []  # every victim arrived before h
    s2 = System()
    s2.feed(tree(), host(cpu=10), pool("/a", preempt_lower_priority=True, fifo_sort=["arrival"]), at=0)
    s2.feed(gang("h0", "/a", priority=5, cpu=1), [gang(f"l{i}", "/a", priority=0) for i in range(9)], at=0)
    s2.tick(0)
    s2.feed(gang("h", "/a", priority=5, cpu=2), at=5)
    assert preempted(s2.tick(5)) == []  # the l gangs arrived before h too
    assert s2.state_of("h") == {"h": "pending"}


def test_fair_share_a_victim_whose_job_would_then_use_less_is_not_taken() -> None:
    """fair_share: job J2's ready gangs rank first as victims, but once requeued J2 would use less
    than h's job J1 and be admitted back before h. J1's own gangs are taken instead."""
    s = System()
    s.feed(tree(), host(cpu=10), pool("/a", preempt_lower_priority=True, mode="fair_share"), at=0)
    s.feed([gang(f"j1g{i}", "/a", job="J1") for i in range(7)], [gang(f"j2g{i}", "/a", job="J2") for i in range(3)],
           at=0)
    s.tick(0)
    s.set_state("running", *[f"j1g{i}" for i in range(7)], at=1)
    s.feed(gang("h", "/a", priority=5, cpu=2, job="J1"), at=10)
    assert preempted(s.tick(10)) == ["j1g6", "j1g5"]


def test_fair_share_counts_what_the_jobs_gangs_ask_for_as_the_cycle_does_not_what_they_still_hold() -> None:
    """J1's gang j1a asks for 4 cpu, of which 3 tasks have ended: the cycle still counts J1 at 4 of 20
    cpu (0.2), while its live tasks hold 1. J2 holds 4 one-cpu gangs (0.2). Taking one of J2's for h
    (J1, 4 cpu, 3 left) would leave J2 at 0.15, below J1: the next cycle would admit it back before
    h, and the pass take it again, without end. So nothing is taken."""
    s = System()
    s.feed(tree(), host(cpu=20), pool("/a", preempt_lower_priority=True, mode="fair_share"), at=0)
    s.feed(gang("j1a", "/a", job="J1", tasks=4, priority=9), [gang(f"j2g{i}", "/a", job="J2") for i in range(4)],
           [gang(f"j3g{i}", "/a", job="J3", priority=9) for i in range(12)], at=0)
    assert len(admitted(s.tick(0))) == 17
    s.set_state("running", "j1a", *[f"j2g{i}" for i in range(4)], at=1)
    s.feed([task(f"j1a/{i}", "succeeded") for i in range(3)], at=2)
    s.feed(gang("h", "/a", job="J1", cpu=4, priority=5), at=10)
    assert preempted(s.tick(10)) == []
    assert preempted(s.tick(11)) == []


def test_no_room_is_made_for_a_gang_whose_job_the_next_cycle_gives_no_slot() -> None:
    """/p runs at most 2 jobs. w (J3) has waited for a slot at /p since J1 and J2 took both; when J2
    ends, the next cycle keeps the freed slot for w (it waits longest; it does not fit yet), so h
    (J4) finds /p full. Room made for h would go back to J1's gang at the next cycle, and the pass
    take it again at every tick: so nothing is taken, as the cycle will judge h."""
    s = System()
    s.feed(tree(), host(cpu=10), pool("/p", max_running_jobs=2),
           pool("/p/a", preempt_lower_priority=True, reservation={"cpu": 6}), pool("/p/b"), at=0)
    s.feed([gang(f"j1g{i}", "/p/a", job="J1", priority=0) for i in range(6)], gang("x", "/p/b", job="J2"), at=0)
    assert len(admitted(s.tick(0))) == 7
    s.feed(gang("w", "/p/b", job="J3", cpu=8), at=1)
    s.tick(1)
    assert s.gang("w").slot_wait == "/p"  # preemption's copy of the fold marks slot waiters too
    s.feed(task("x/0", "succeeded"), gang("h", "/p/a", job="J4", cpu=3, priority=5), at=2)
    for at in (3, 4, 5):
        out = s.tick(at)
        assert (preempted(out), admitted(out)) == ([], [])
    assert s.state_of("h", "w") == {"h": "pending", "w": "pending"}


def test_a_non_preemptible_gang_blocked_by_entitlement_may_take_preemptible_ones() -> None:
    s = full_pool([0] * 10, reservation={"cpu": 10})
    out = s.feed(gang("np", "/a", priority=5, cpu=2, preemptible=False), at=10)
    out += s.tick(10)
    decided = requests(out)
    assert [r.gang for r in decided] == ["l9", "l8"]
    assert "blocked at the head of queue non_preemptible of /a" in decided[0].reason


def test_a_revocable_gang_takes_revocable_gangs_only() -> None:
    s = System()
    s.feed(tree(), host(cpu=10, revocable={"cpu": 4}), pool("/a", preempt_lower_priority=True), at=0)
    s.feed([gang(f"r{i}", "/a", revocable=True, priority=0) for i in range(4)],
           [gang(f"n{i}", "/a", priority=0) for i in range(10)], at=0)
    s.tick(0)
    s.set_state("running", *[f"r{i}" for i in range(4)], *[f"n{i}" for i in range(10)], at=1)
    s.feed(gang("hr", "/a", priority=5, revocable=True, cpu=2), at=10)
    decided = requests(s.tick(10))
    assert [r.gang for r in decided] == ["r3", "r2"]
    assert "blocked at the head of queue revocable of /a" in decided[0].reason


def test_a_gang_held_by_a_job_limit_is_passed_over() -> None:
    """jl fits the entitlement but not the running-job limit: the cycle goes past it, and the gang
    behind it, h, is the blocked one, which gets room."""
    s = full_pool([0] * 9, max_running_jobs=9)
    s.feed(gang("jl", "/a", priority=9, cpu=1), gang("h", "/a", priority=5, cpu=2, job="l0"), at=10)
    decided = requests(s.tick(10))
    assert [r.gang for r in decided] == ["l8"]
    assert "makes room for gang h " in decided[0].reason


def test_a_gang_that_no_preemption_can_help_gets_nothing() -> None:
    """A gang that does not fit its entitlement and, once it would, hits a job limit: nothing."""
    s = full_pool([0] * 10, max_running_jobs=10)
    s.feed(gang("jl", "/a", priority=9, cpu=1), at=10)
    assert preempted(s.tick(10)) == []


def test_a_controller_gang_over_the_controller_limit_takes_controller_gangs_only() -> None:
    """controller_limit 20% of reservation 10: controller gangs may hold 2 cpu. hc (a controller
    gang) fits the entitlement but not the controller limit; only a controller gang gives it room."""
    s = System()
    s.feed(tree(), host(cpu=10), pool("/a", preempt_lower_priority=True, reservation={"cpu": 10}, controller_limit=20),
           at=0)
    s.feed(gang("c0", "/a", controller=True), gang("c1", "/a", controller=True), gangs("n", 4, "/a"), at=0)
    s.tick(0)
    s.feed(gang("hc", "/a", controller=True, priority=5), at=10)
    decided = requests(s.tick(10))
    assert [r.gang for r in decided] == ["c1"]  # n3..n0 come first in the order, but hold no controller share
    assert "blocked at the head of queue controller of /a: controller_limit" in decided[0].reason
