"""The admission cycle (DOMAIN §4): each check with numbers, the moves, head of line, queue orders.

Given events folded into an `AdmissionState`, when a tick starts a cycle (`decide_tree`), then
these decisions; they are read back as the log would, so the next cycle sees them."""

from __future__ import annotations

from typing import Any

import pytest

from events import GangMovedToQueue
from tests.admission.builders import (
    admitted,
    entitlements,
    gang,
    kinds,
    moved,
    pool,
    slack_entitlements,
    task,
    tree,
    world,
)

MEMORY = ("cpu", "memory")

# --- a. entitlement ------------------------------------------------------------------------------


def test_entitlement_non_slack_admits_up_to_the_pools_share_then_blocks_the_queue() -> None:
    # capacity 10 shared by /a (demand 7) and /b (demand 10): 5 each
    log = world(pool("/a"), pool("/b"), capacity={"cpu": 10})
    log.feed(gang("a1", "/a", cpu=3), gang("a2", "/a", cpu=3), gang("a3", "/a", cpu=1), gang("b1", "/b", cpu=10))
    out = log.tick(0)
    assert entitlements(out)["/a"] == {"cpu": 5.0}
    assert entitlements(out)["/b"] == {"cpu": 5.0}
    # a1 (3 <= 5) in; a2 (3 + 3 > 5) stops /a's pending queue, so a3 (1) waits behind it
    assert admitted(out) == ["a1"]
    assert moved(out) == {}
    assert log.queue("/a") == ["a2", "a3"]
    assert log.ledger("/a").allocation == {"cpu": 3.0}
    assert log.ledger("/a").demand == {"cpu": 4.0}


def test_entitlement_counts_what_the_pool_already_holds() -> None:
    log = world(pool("/a", limit={"cpu": 10}))
    log.feed(gang("a1", "/a", cpu=6))
    assert admitted(log.tick(0)) == ["a1"]
    log.feed(gang("a2", "/a", cpu=5), gang("a3", "/a", cpu=4))
    out = log.tick(1)
    assert entitlements(out)["/a"] == {"cpu": 10.0}
    assert admitted(out) == []  # 6 held + 5 > 10: head of line
    log.feed(task("a1/0", "succeeded"), at=2)
    assert admitted(log.tick(2)) == ["a2", "a3"]  # 5 + 4 <= 10


def test_entitlement_check_has_a_tolerance_of_0_0009() -> None:
    for per_task, fits in ((1.0002, True), (1.0005, False)):  # 1 + 2.0004 ~ 3; 1 + 2.001 > 3
        log = world(pool("/a", limit={"cpu": 3}))
        log.feed(gang("fill", "/a"), gang("g", "/a", tasks=2, cpu=per_task))
        assert admitted(log.tick(0)) == (["fill", "g"] if fits else ["fill"])


def test_entitlement_slack_admits_revocable_gangs_on_slack_only() -> None:
    # slack cpu 4 (the host's revocable cpu); slack memory = 20% of the reservation 100 = 20
    log = world(pool("/a", reservation={"cpu": 50, "memory": 100}, slack_limit=20), resources=MEMORY,
                capacity={"cpu": 100, "memory": 1000}, revocable={"cpu": 4})
    log.feed(*[gang(f"r{i}", "/a", resources={"cpu": 1, "memory": 8}, revocable=True) for i in range(4)])
    out = log.tick(0)
    assert slack_entitlements(out)["/a"] == {"cpu": 4.0, "memory": 20.0}
    assert entitlements(out)["/a"] == {"cpu": 100.0, "memory": 980.0}
    assert admitted(out) == ["r0", "r1"]  # memory 8, 16; a third would make 24 > 20
    assert moved(out) == {"r2": "revocable", "r3": "revocable"}
    ledger = log.ledger("/a")
    assert ledger.slack == {"cpu": 2.0, "memory": 16.0}
    assert ledger.non_slack == {"cpu": 0.0, "memory": 0.0}


def test_revocable_cpu_is_bounded_by_the_hosts_revocable_cpu() -> None:
    log = world(pool("/a", reservation={"cpu": 50, "memory": 500}), resources=MEMORY,
                capacity={"cpu": 100, "memory": 1000}, revocable={"cpu": 3})
    log.feed(*[gang(f"r{i}", "/a", resources={"cpu": 1, "memory": 1}, revocable=True) for i in range(5)])
    out = log.tick(0)
    assert slack_entitlements(out)["/a"]["cpu"] == 3.0
    assert admitted(out) == ["r0", "r1", "r2"]
    assert list(moved(out)) == ["r3", "r4"]


def test_non_revocable_gangs_do_not_use_slack() -> None:
    log = world(pool("/a", limit={"cpu": 2}), capacity={"cpu": 100}, revocable={"cpu": 50})
    log.feed(gang("n1", "/a", cpu=2), gang("n2", "/a", cpu=1))
    out = log.tick(0)
    assert admitted(out) == ["n1"]  # n2 would need non-slack 3 > 2; the 50 slack cpu are not for it


# --- b. controller limit -------------------------------------------------------------------------


def test_controller_gangs_are_held_to_controller_limit_percent_of_the_reservation() -> None:
    log = world(pool("/a", reservation={"cpu": 10}, controller_limit=30))  # 3 cpu for controllers
    log.feed(*[gang(f"c{i}", "/a", controller=True, job="ctl") for i in range(5)], gang("b", "/a"))
    out = log.tick(0)
    assert entitlements(out)["/a"] == {"cpu": 100.0}  # the entitlement is not what stops them
    assert admitted(out) == ["c0", "c1", "c2", "b"]
    assert moved(out) == {"c3": "controller", "c4": "controller"}
    assert log.ledger("/a").controller == {"cpu": 3.0}
    # next cycle: c3 heads the controller queue and still does not fit: it stops that queue
    out = log.tick(1)
    assert admitted(out) == [] and moved(out) == {}
    log.feed(task("c0/0", "succeeded"), at=2)
    assert admitted(log.tick(2)) == ["c3"]


def test_without_controller_limit_controllers_use_the_entitlement() -> None:
    log = world(pool("/a", reservation={"cpu": 10}))
    log.feed(*[gang(f"c{i}", "/a", controller=True, job="ctl") for i in range(5)])
    assert admitted(log.tick(0)) == [f"c{i}" for i in range(5)]


def test_controller_limit_of_the_peloton_respool_docs() -> None:
    # reservation cpu 100, mem 1000, disk 1000, gpu 10; controller_limit 10: cpu 10, mem 100, ...
    kinds_ = ("cpu", "memory", "disk", "gpu")
    need = {"cpu": 10.0, "memory": 100.0, "disk": 100.0, "gpu": 1.0}
    log = world(pool("/batch", reservation={"cpu": 100, "memory": 1000, "disk": 1000, "gpu": 10},
                     controller_limit=10), resources=kinds_,
                capacity={"cpu": 200, "memory": 2000, "disk": 2000, "gpu": 20})
    log.feed(*[gang(f"np{i}", "/batch", resources=need, preemptible=False, job="np") for i in range(11)],
             *[gang(f"ctl{i}", "/batch", resources=need, controller=True, job="ctl") for i in range(2)])
    out = log.tick(0)
    assert admitted(out) == [*(f"np{i}" for i in range(10)), "ctl0"]
    assert moved(out) == {"np10": "non_preemptible", "ctl1": "controller"}
    assert log.ledger("/batch").non_preemptible == {"cpu": 100.0, "memory": 1000.0, "disk": 1000.0, "gpu": 10.0}


# --- c. reservation, for non-preemptible gangs -----------------------------------------------------


def test_non_preemptible_gangs_stay_within_the_reservation_when_preemption_is_on() -> None:
    log = world(pool("/a", reservation={"cpu": 3}))
    log.feed(*[gang(f"np{i}", "/a", preemptible=False, job="np") for i in range(5)], gang("p", "/a", cpu=10))
    out = log.tick(0)
    assert admitted(out) == ["np0", "np1", "np2", "p"]  # p is preemptible: elastic resources are its
    assert moved(out) == {"np3": "non_preemptible", "np4": "non_preemptible"}
    assert log.ledger("/a").non_preemptible == {"cpu": 3.0}
    assert log.queue("/a", "non_preemptible") == ["np3", "np4"]


def test_non_preemptible_gangs_use_the_entitlement_when_preemption_is_off() -> None:
    log = world(pool("/a", reservation={"cpu": 3}), preemption=False)
    log.feed(*[gang(f"np{i}", "/a", preemptible=False, job="np") for i in range(5)])
    out = log.tick(0)
    assert admitted(out) == [f"np{i}" for i in range(5)]
    assert moved(out) == {}


def test_non_preemptible_that_misses_the_entitlement_with_preemption_off_blocks_pending() -> None:
    log = world(pool("/a", limit={"cpu": 4}), preemption=False)
    log.feed(gang("fill", "/a", cpu=2), gang("np", "/a", cpu=3, preemptible=False), gang("small", "/a", cpu=1))
    out = log.tick(0)
    assert admitted(out) == ["fill"] and moved(out) == {}  # no queue to move to: head of line


# --- d. job limits -----------------------------------------------------------------------------------


def test_max_running_jobs_at_the_pool_holds_new_jobs_without_blocking_the_queue() -> None:
    log = world(pool("/a", max_running_jobs=2))
    log.feed(gang("j1-a", "/a", job="j1"), gang("j2-a", "/a", job="j2"), gang("j3-a", "/a", job="j3"),
             gang("j1-b", "/a", job="j1"))
    out = log.tick(0)
    # j3 would be a third running job: it waits (not moved); j1's second gang needs no new slot
    assert admitted(out) == ["j1-a", "j2-a", "j1-b"]
    assert moved(out) == {}
    assert log.gang("j3-a").state == "pending" and log.gang("j3-a").queue == "pending"
    # a job keeps its slot while any of its gangs is admitted
    log.feed(task("j1-a/0", "succeeded"), at=1)
    assert admitted(log.tick(1)) == []
    log.feed(task("j1-b/0", "succeeded"), at=2)
    assert admitted(log.tick(2)) == ["j3-a"]


def test_max_running_jobs_at_an_ancestor_counts_jobs_of_every_leaf_below() -> None:
    log = world(pool("/org", max_running_jobs=2), pool("/org/a"), pool("/org/b"))
    log.feed(gang("x", "/org/a", job="x"), gang("y", "/org/b", job="y"), gang("z", "/org/b", job="z"),
             gang("x2", "/org/b", job="x"))
    out = log.tick(0)
    assert admitted(out) == ["x", "y", "x2"]  # x2: job x already runs under /org
    assert log.gang("z").state == "pending"
    assert log.rt.running["/org"] == {"x": 2, "y": 1}


def test_tree_default_max_running_jobs_per_pool_applies_to_pools_that_set_none() -> None:
    log = world(pool("/a"), max_running_jobs_per_pool=1)
    log.feed(gang("g1", "/a"), gang("g2", "/a"))
    assert admitted(log.tick(0)) == ["g1"]


# --- the queues: moves, head of line, visit order ------------------------------------------------


@pytest.mark.parametrize(("flags", "preemption", "queue"), [
    ({"preemptible": False}, True, "non_preemptible"),
    ({"preemptible": False, "controller": True}, True, "non_preemptible"),
    ({"controller": True}, True, "controller"),
    ({"controller": True, "revocable": True}, True, "controller"),
    ({"revocable": True}, True, "revocable"),
    ({"preemptible": False, "controller": True}, False, "controller"),
    ({"preemptible": False, "revocable": True}, False, "revocable"),
    ({"preemptible": False}, False, None),
    ({}, True, None),
])
def test_a_pending_gang_that_does_not_fit_moves_to_its_queue(flags: dict[str, Any], preemption: bool,
                                                             queue: str | None) -> None:
    # limit 4, 2 held, no slack and no reservation: a gang of 3 fits nowhere
    log = world(pool("/a", limit={"cpu": 4}), preemption=preemption)
    log.feed(gang("fill", "/a", cpu=2))
    log.tick(0)
    log.feed(gang("big", "/a", cpu=3, **flags), gang("small", "/a", cpu=1), at=1)
    out = log.tick(1)
    if queue is None:
        assert moved(out) == {} and admitted(out) == []  # head of line: small waits behind big
        assert log.queue("/a") == ["big", "small"]
    else:
        assert moved(out) == {"big": queue}
        assert admitted(out) == ["small"]  # the cycle goes on behind a moved gang
        assert log.gang("big").queue == queue
        assert log.queue("/a", queue) == ["big"]


def test_a_move_names_the_check_and_the_numbers() -> None:
    # reservation 3 (non-preemptible np2 would make 4), controller 50% of 3 = 1.5, slack cpu 1
    log = world(pool("/a", reservation={"cpu": 3}, controller_limit=50, limit={"cpu": 10}), revocable={"cpu": 1})
    log.feed(gang("np", "/a", cpu=2, preemptible=False), gang("np2", "/a", cpu=2, preemptible=False),
             gang("ctl", "/a", cpu=2, controller=True), gang("rev", "/a", cpu=2, revocable=True))
    out = log.tick(0)
    assert admitted(out) == ["np"]
    assert {e.gang: e.reason for e in out if isinstance(e, GangMovedToQueue)} == {
        "np2": "reservation: needs cpu 2, 1 non-preemptible reservation left",
        "ctl": "controller_limit: needs cpu 2, 1.5 controller left",
        "rev": "entitlement: needs cpu 2, 1 slack left",
    }


def test_head_of_line_in_pending_protects_a_big_gang_from_small_ones_behind_it() -> None:
    log = world(pool("/a", limit={"cpu": 10}))
    log.feed(gang("first", "/a", cpu=6))
    assert admitted(log.tick(0)) == ["first"]
    log.feed(gang("big", "/a", cpu=8), *[gang(f"s{i}", "/a", cpu=1) for i in range(3)], at=1)
    assert admitted(log.tick(1)) == []  # 4 cpu free, but big is ahead
    log.feed(task("first/0", "succeeded"), at=2)
    assert admitted(log.tick(2)) == ["big", "s0", "s1"]  # 8 + 1 + 1 = 10


def test_head_of_line_in_the_non_preemptible_queue() -> None:
    log = world(pool("/a", reservation={"cpu": 4}))
    log.feed(gang("np-big", "/a", cpu=5, preemptible=False), gang("np-small", "/a", cpu=1, preemptible=False))
    out = log.tick(0)
    # in pending, np-big moves and np-small is admitted behind it
    assert moved(out) == {"np-big": "non_preemptible"} and admitted(out) == ["np-small"]
    log.feed(gang("np2", "/a", cpu=3, preemptible=False), gang("np3", "/a", cpu=2, preemptible=False), at=1)
    out = log.tick(1)
    # np2 (1 + 3 <= 4) in from pending; np3 (4 + 2 > 4) moves behind np-big
    assert admitted(out) == ["np2"] and moved(out) == {"np3": "non_preemptible"}
    log.feed(task("np2/0", "succeeded"), at=2)
    out = log.tick(2)
    # 3 free: np-big (5) heads the non_preemptible queue and does not fit: np3 (2) waits behind it
    assert admitted(out) == [] and moved(out) == {}
    assert log.queue("/a", "non_preemptible") == ["np-big", "np3"]


def test_queues_are_visited_non_preemptible_controller_revocable_pending() -> None:
    log = world(pool("/a", reservation={"cpu": 1}, controller_limit=100, limit={"cpu": 3}),
                capacity={"cpu": 100}, revocable={"cpu": 1})
    # the first cycle fills the pool and moves one gang into each special queue
    log.feed(gang("fill", "/a", cpu=3), gang("np", "/a", preemptible=False), gang("ctl", "/a", controller=True),
             gang("rev", "/a", revocable=True, cpu=2), gang("late", "/a"))
    out = log.tick(0)
    assert admitted(out) == ["fill"]
    assert moved(out) == {"np": "non_preemptible", "ctl": "controller", "rev": "revocable"}
    log.feed(task("fill/0", "succeeded"), at=1)
    log.feed(gang("rev-ok", "/a", revocable=True, cpu=1), at=1)
    out = log.tick(1)
    assert admitted(out) == ["np", "ctl", "late", "rev-ok"]


def test_leaf_pools_are_visited_in_path_order() -> None:
    log = world(pool("/b"), pool("/a"), pool("/a/z"), pool("/a/y"))
    log.feed(gang("gb", "/b"), gang("gz", "/a/z"), gang("gy", "/a/y"))
    assert admitted(log.tick(0)) == ["gy", "gz", "gb"]


def test_a_cycle_is_entitlements_then_decisions_then_completed() -> None:
    log = world(pool("/a"))
    log.feed(gang("g", "/a"))
    assert kinds(log.tick(0)) == ["EntitlementsComputed", "GangAdmitted", "CycleCompleted"]


# --- fifo orders ------------------------------------------------------------------------------------


def _order(fifo_sort: list[str] | None, *gangs: tuple[str, int, int]) -> list[str]:
    """Admission order of gangs (id, priority, tasks) enqueued in this order, all admitted at once."""
    options: dict[str, Any] = {} if fifo_sort is None else {"fifo_sort": fifo_sort}
    log = world(pool("/a", **options))
    log.feed(*[gang(g, "/a", priority=p, tasks=n) for g, p, n in gangs])
    return admitted(log.tick(0))


def test_fifo_default_is_priority_then_arrival() -> None:
    assert _order(None, ("p0", 0, 1), ("p5", 5, 1), ("p1", 1, 1), ("p5b", 5, 1)) == ["p5", "p5b", "p1", "p0"]


def test_fifo_by_arrival_ignores_priority() -> None:
    assert _order(["arrival"], ("p0", 0, 1), ("p5", 5, 1), ("p1", 1, 1)) == ["p0", "p5", "p1"]


def test_fifo_by_pending_tasks_takes_smaller_gangs_first_then_arrival() -> None:
    assert _order(["pending_tasks"], ("t3", 9, 3), ("t1", 0, 1), ("t2", 5, 2), ("t1b", 9, 1)) == \
        ["t1", "t1b", "t2", "t3"]


def test_fifo_keys_apply_in_the_order_given() -> None:
    assert _order(["pending_tasks", "priority"], ("a", 0, 2), ("b", 1, 2), ("c", 0, 1)) == ["c", "b", "a"]


def test_arrival_is_when_the_gang_completed_not_when_it_began() -> None:
    log = world(pool("/a", fifo_sort=["arrival"]))
    log.feed(gang("early", "/a", tasks=1, size=2), gang("late", "/a"))
    log.feed(gang("early", "/a", tasks=1, size=2, first=1))
    assert admitted(log.tick(0)) == ["late", "early"]


def test_a_pool_config_change_reorders_its_queues() -> None:
    log = world(pool("/a", limit={"cpu": 1}))
    log.feed(gang("blocker", "/a"))
    log.tick(0)
    log.feed(gang("p0", "/a"), gang("p9", "/a", priority=9), at=1)
    assert log.queue("/a") == ["p9", "p0"]
    log.feed(pool("/a", limit={"cpu": 1}, fifo_sort=["arrival"]), at=2)
    assert log.queue("/a") == ["p0", "p9"]


def test_a_gang_requeued_after_a_placement_timeout_goes_to_the_head_of_pending() -> None:
    log = world(pool("/a", limit={"cpu": 2}))
    log.feed(gang("old", "/a", cpu=2, priority=0, timeout=10))
    assert admitted(log.tick(0)) == ["old"]
    log.feed(gang("vip", "/a", cpu=2, priority=100), at=1)
    out = log.tick(11)  # old's tasks were not placed within 10 s: requeued at the head
    assert [e.type for e in out][:2] == ["GangRequeued", "EntitlementsComputed"]
    assert admitted(out) == ["old"]  # ahead of vip despite priority 0


def test_gangs_requeued_at_the_head_most_recent_first() -> None:
    log = world(pool("/a", limit={"cpu": 3}))
    log.feed(gang("a", "/a", timeout=10), gang("b", "/a", timeout=5), gang("fill", "/a"))
    assert admitted(log.tick(0)) == ["a", "b", "fill"]
    log.feed(gang("c", "/a", priority=5), at=1)
    assert log.queue("/a") == ["c"]
    # time jumps to 12: b's placement timer (5) fires, then a's (10); a, requeued last, heads the queue
    log.feed(task("fill/0", "placed"), at=12)
    assert log.queue("/a") == ["a", "b", "c"]
    assert [g.head_rank for g in (log.gang("a"), log.gang("b"), log.gang("c"))] == [2, 1, 0]


def test_a_preset_change_reorders_the_queues_of_the_pools_using_it() -> None:
    log = world(pool("/a", config_presets=["slow"], limit={"cpu": 1}),
                pool_config_presets={"slow": {"fifo_sort": ["arrival"]}})
    log.feed(gang("fill", "/a"))
    log.tick(0)
    log.feed(gang("p0", "/a"), gang("p9", "/a", priority=9), at=1)
    assert log.queue("/a") == ["p0", "p9"]
    log.feed(tree(pool_config_presets={"slow": {"fifo_sort": ["priority"]}}), at=2)
    assert log.queue("/a") == ["p9", "p0"]


# --- fair_share ------------------------------------------------------------------------------------


def test_fair_share_alternates_jobs_by_dominant_share() -> None:
    log = world(pool("/a", mode="fair_share"))
    log.feed(*[gang(f"a{i}", "/a", job="A") for i in range(3)], *[gang(f"b{i}", "/a", job="B") for i in range(3)])
    assert admitted(log.tick(0)) == ["a0", "b0", "a1", "b1", "a2", "b2"]


def test_fair_share_puts_the_job_using_least_first() -> None:
    log = world(pool("/a", mode="fair_share", limit={"cpu": 12}), resources=MEMORY,
                capacity={"cpu": 100, "memory": 100})
    log.feed(gang("a0", "/a", job="A", resources={"cpu": 10, "memory": 1}))
    assert admitted(log.tick(0)) == ["a0"]  # A uses 10% (cpu dominant)
    log.feed(gang("a1", "/a", job="A", resources={"cpu": 1, "memory": 1}),
             gang("b0", "/a", job="B", resources={"cpu": 2, "memory": 5}),
             gang("c0", "/a", job="C", resources={"cpu": 1, "memory": 1}), at=1)
    # B and C use nothing: C's first by arrival? no: B arrived first (tie on usage 0); B takes cpu 12
    out = log.tick(1)
    assert admitted(out) == ["b0"]  # 10 + 2 = 12: then C (1) does not fit and stops the queue
    assert log.queue("/a") == ["a1", "c0"]


def test_fair_share_ties_break_by_priority() -> None:
    log = world(pool("/a", mode="fair_share"))
    log.feed(gang("a", "/a", job="A"), gang("b", "/a", job="B", priority=3))
    assert admitted(log.tick(0)) == ["b", "a"]
