"""Preemption between pools (DOMAIN §6): given events, when a tick (cycle + pass), then decisions."""

from __future__ import annotations

from typing import Any

import pytest

from services.preemption.domain.holdings import Holdings
from services.preemption.domain.model import TreeMemory
from services.preemption.domain.passes import preemption_pass
from tests.preemption.harness import (
    System,
    admitted,
    gang,
    gangs,
    host,
    pool,
    preempted,
    requests,
    task,
    tree,
)


def lender(*, grace: float = 0.0, enabled: bool = True, count: int = 10, **gang_flags: Any) -> System:
    """10 cpu, pools /a and /b (no reservations). /a holds 10 one-cpu gangs a0..a9 (admitted at 0:
    /b wants nothing, so /a is entitled to everything)."""
    s = System()
    s.feed(tree(grace=grace, enabled=enabled), host(cpu=10), pool("/a"), pool("/b"), at=0)
    s.feed(gangs("a", count, "/a", **gang_flags), at=0)
    assert admitted(s.tick(0)) == [f"a{i}" for i in range(count)]
    return s


def borrow_back(s: System, cpu: float = 1.0, at: float = 10.0) -> list[Any]:
    """/b asks for `cpu`: /a's entitlement drops by as much; the tick's decisions."""
    s.feed(gang("b0", "/b", cpu=cpu), at=at)
    return s.tick(at)


# --- ranking ---------------------------------------------------------------------------------------


def test_state_order_ready_then_placing_then_running() -> None:
    s = lender()
    s.set_state("placed", *[f"a{i}" for i in range(7)])
    s.set_state("running", "a7")
    s.set_state("placing", "a8")
    assert preempted(borrow_back(s, cpu=1)) == ["a9"]  # a9 is still ready
    s2 = lender()
    s2.set_state("placed", *[f"a{i}" for i in range(7)])
    s2.set_state("running", "a7", "a9")
    s2.set_state("placing", "a8")
    assert preempted(borrow_back(s2, cpu=2)) == ["a8", "a9"]  # placing first, then the running with the highest id


def test_placed_and_launching_tasks_are_never_taken() -> None:
    s = lender()
    s.set_state("placed", *[f"a{i}" for i in range(5)])
    s.set_state("launching", *[f"a{i}" for i in range(5, 10)])
    assert preempted(borrow_back(s, cpu=3)) == []


def test_lowest_priority_first_within_a_state() -> None:
    s = System()
    s.feed(tree(), host(cpu=10), pool("/a"), pool("/b"), at=0)
    s.feed([gang(f"a{i}", "/a", priority=p) for i, p in enumerate([5, 1, 3, 0, 2, 4, 6, 7, 8, 9])], at=0)
    s.tick(0)
    s.set_state("running", *[f"a{i}" for i in range(10)], at=1)
    assert preempted(borrow_back(s, cpu=3)) == ["a3", "a1", "a4"]  # priorities 0, 1, 2


def test_most_recently_started_first_then_highest_task_id() -> None:
    s = lender()
    for i in range(10):  # a0 starts at 1, a1 at 2, ...; a8 and a9 start together at 9
        s.set_state("running", f"a{i}", at=1 + min(i, 8))
    assert preempted(borrow_back(s, cpu=3, at=20)) == ["a9", "a8", "a7"]


# --- slack and non-slack ----------------------------------------------------------------------------


def slack_pool() -> System:
    """One pool /a: reservation cpu 10, hosts offer 6 revocable cpu; /a holds 6 revocable one-cpu
    gangs r0..r5 (ready) and 4 non-revocable n0..n3 (running)."""
    s = System()
    s.feed(tree(), host(cpu=10, revocable={"cpu": 6}), pool("/a", reservation={"cpu": 10}), pool("/b"), at=0)
    s.feed(gangs("r", 6, "/a", revocable=True), gangs("n", 4, "/a"), at=0)
    assert sorted(admitted(s.tick(0))) == sorted([f"r{i}" for i in range(6)] + [f"n{i}" for i in range(4)])
    s.set_state("running", "n0", "n1", "n2", "n3", at=1)
    return s


def test_slack_excess_takes_revocable_tasks_only() -> None:
    s = slack_pool()
    out = s.feed(host(cpu=10, revocable={"cpu": 4}), at=5)  # slack shrinks to 4
    out += s.tick(5)
    decided = requests(out)
    assert [r.gang for r in decided] == ["r5", "r4"]
    assert all("over slack entitlement" in r.reason for r in decided)
    assert s.ledger("/a").slack == {"cpu": 4.0}  # ready tasks go straight back to pending


def test_non_slack_excess_takes_non_revocable_tasks_only() -> None:
    s = System()
    s.feed(tree(), host(cpu=10, revocable={"cpu": 6}), pool("/a"), pool("/b"), at=0)
    s.feed(gangs("r", 6, "/a", revocable=True), gangs("n", 10, "/a"), at=0)
    s.tick(0)
    s.set_state("running", *[f"n{i}" for i in range(10)], at=1)
    decided = requests(borrow_back(s, cpu=2))  # ready revocable tasks rank first, but hold only slack
    assert [r.gang for r in decided] == ["n9", "n8"]
    assert all("over non-slack entitlement" in r.reason for r in decided)


def test_a_task_counts_only_if_it_holds_a_kind_in_excess() -> None:
    s = System()
    s.feed(tree(resources=("cpu", "memory")), host(cpu=10, memory=100), pool("/a"), pool("/b"), at=0)
    s.feed(gang("m0", "/a", resources={"memory": 10}), gangs("c", 9, "/a", resources={"cpu": 1, "memory": 1}), at=0)
    s.tick(0)
    s.set_state("running", *[f"c{i}" for i in range(9)], at=1)
    # b needs cpu only: /a is over on cpu; m0 (ready, ranked first) holds no cpu
    s.feed(gang("b0", "/b", resources={"cpu": 9}), at=10)
    assert preempted(s.tick(10)) == ["c8", "c7", "c6", "c5"]  # cpu 9 held, 5 entitled


# --- grace ---------------------------------------------------------------------------------------


def test_grace_counts_from_the_first_pass_that_found_the_pool_over() -> None:
    s = lender(grace=30)
    s.set_state("running", *[f"a{i}" for i in range(10)], at=1)
    assert preempted(borrow_back(s, cpu=1, at=10)) == []  # over since 10
    assert preempted(s.tick(39.5)) == []
    assert preempted(s.tick(40)) == ["a9"]  # 40 - 10 >= 30


def test_leaving_excess_resets_the_grace() -> None:
    s = lender(grace=30)
    s.set_state("running", *[f"a{i}" for i in range(10)], at=1)
    assert preempted(borrow_back(s, cpu=1, at=10)) == []  # over since 10
    s.feed(task("b0/0", "succeeded"), at=20)
    assert preempted(s.tick(20)) == []  # /b wants nothing now: /a is entitled to all again
    s.feed(gang("b1", "/b"), at=30)
    assert preempted(s.tick(30)) == []  # over again, since 30
    assert preempted(s.tick(45)) == []  # 45 - 10 >= 30, but 45 - 30 < 30
    assert preempted(s.tick(60)) == ["a9"]


def test_disabled_preemption_takes_nothing() -> None:
    s = lender(enabled=False)
    s.set_state("running", *[f"a{i}" for i in range(10)], at=1)
    assert preempted(borrow_back(s, cpu=5)) == []
    assert preempted(s.tick(100)) == []


# --- whole gangs, outstanding requests -------------------------------------------------------------


def test_taking_a_task_takes_its_whole_gang_and_counts_all_of_it() -> None:
    s = System()
    s.feed(tree(), host(cpu=10), pool("/a"), pool("/b"), at=0)
    s.feed(gangs("s", 7, "/a"), gang("big", "/a", tasks=3), at=0)
    s.tick(0)
    s.set_state("running", *[f"s{i}" for i in range(7)], at=1)
    s.set_state("running", "big", at=2)  # started last: first in the victim order
    s.feed(task("big/2", "placed"), at=2)  # a placed member is no candidate, but goes with its gang
    decided = requests(borrow_back(s, cpu=2))
    assert [(r.gang, r.tasks) for r in decided] == [("big", ["big/0", "big/1", "big/2"])]  # 3 cover 2: no more


def test_outstanding_requests_count_as_given_back() -> None:
    s = lender()
    s.set_state("running", *[f"a{i}" for i in range(10)], at=1)
    assert preempted(borrow_back(s, cpu=2)) == ["a9", "a8"]
    assert [t.id for t in s.requested()] == ["a8/0", "a9/0"]
    assert preempted(s.tick(11)) == []  # not acknowledged yet: no repeat
    assert preempted(s.tick(12)) == []
    s.ack(at=13)
    assert preempted(s.tick(13)) == []  # given back: /a is at its entitlement
    assert s.ledger("/a").allocation == {"cpu": 8.0}
    assert s.state_of("a8", "a9") == {"a8": "pending", "a9": "pending"}


def test_peloton_worked_example_gives_back_twelve_tasks_each() -> None:
    s = System()
    s.feed(tree(), host(cpu=100), *[pool(f"/RP{i}", reservation={"cpu": 20}, limit={"cpu": 100}) for i in (1, 2, 3)],
           at=0)
    s.feed(gangs("a", 10, "/RP1"), gangs("b", 80, "/RP2"), gangs("c", 80, "/RP3"), at=0)
    s.tick(0)
    s.set_state("running", *[g.id for g in s.rt.gangs.values() if g.state == "admitted"], at=1)
    s.feed(gangs("d", 40, "/RP1"), at=60)
    decided = requests(s.tick(60))
    by_pool = {p: [r for r in decided if r.pool == p] for p in ("/RP1", "/RP2", "/RP3")}
    assert [len(v) for v in by_pool.values()] == [0, 12, 12]
    assert by_pool["/RP2"][0].reason == "over non-slack entitlement since 60: cpu 45 held, 33.3333 entitled"
    assert by_pool["/RP2"][0].excess == pytest.approx({"cpu": 11.666666667})


def test_the_overshoot_never_eats_into_the_guarantee() -> None:
    """/a reserves 9 of 10 cpu, /b 1; /a holds 9.5 (gangs of 1.5 and one of 2) when /b asks for
    its 1: /a is entitled to 9 and over by 0.5, but every gang it could give back would take it
    below 9, its guarantee. It keeps them (over by less than one gang)."""
    s = System()
    s.feed(tree(), host(cpu=10), pool("/a", reservation={"cpu": 9}), pool("/b", reservation={"cpu": 1}), at=0)
    s.feed(gangs("a", 5, "/a", cpu=1.5), gangs("x", 1, "/a", cpu=2), at=0)
    s.tick(0)
    s.set_state("running", *[g.id for g in s.rt.gangs.values() if g.state == "admitted"], at=1)
    assert s.ledger("/a").allocation == {"cpu": 9.5}
    out = borrow_back(s, cpu=1)
    assert s.preemption.memory["default"].over == {("/a", "non_slack"): 10.0}  # over, and would give back now
    assert preempted(out) == []


def test_the_pass_is_pure_given_the_same_state() -> None:
    s = lender()
    s.set_state("running", *[f"a{i}" for i in range(10)], at=1)
    s.feed(gang("b0", "/b", cpu=3), at=10)
    s.tick(10)
    # the state after the pass's requests landed: two fresh passes on it decide the same (nothing)
    first = preemption_pass(s.preemption.admission, "default", 10, TreeMemory())
    second = preemption_pass(s.preemption.admission, "default", 10, TreeMemory())
    assert first == second
    assert first.preemptions == []
    assert [g.id for g in Holdings.of(s.rt).of_pool("/a")] == [f"a{i}" for i in range(10)]


def test_two_kinds_the_guarantee_gives_way_to_the_excess() -> None:
    """The law "never below min(requirement, reservation)" read on every kind conflicts with giving
    back the excess. /a reserves memory 4 and holds cpu 8, memory 4.5 in gangs of (cpu 2, memory
    1.125) when /b, reserving memory 6, asks for cpu 6 and memory 6: /a is entitled to cpu 5 and
    memory 4 (its guarantee), over by cpu 3 and memory 0.5. Every gang takes memory below 4. Taking
    none would leave /a 3 cpu over for good; so a gang needed in full for a kind in excess (cpu 2 of
    3) is taken even though memory then drops below the guarantee; only a gang that would merely
    overshoot is held to the guarantee (here a2 overshoots cpu, whose guarantee is 0)."""
    s = System()
    s.feed(tree(resources=("cpu", "memory")), host(cpu=10, memory=10), pool("/a", reservation={"memory": 4}),
           pool("/b", reservation={"memory": 6}), at=0)
    s.feed(gangs("a", 4, "/a", resources={"cpu": 2, "memory": 1.125}), at=0)
    s.tick(0)
    s.set_state("running", "a0", "a1", "a2", "a3", at=1)
    s.feed(gang("b0", "/b", resources={"cpu": 6, "memory": 6}), at=10)
    assert preempted(s.tick(10)) == ["a3", "a2"]
    s.ack(at=11)
    s.tick(11)
    assert s.ledger("/a").allocation == {"cpu": 4.0, "memory": 2.25}
