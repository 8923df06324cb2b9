"""`explain`: for each reason a gang waits, the exact text with the numbers of the state; for
each end, why; and explaining changes nothing."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from events import HostRegistered, HostRemoved
from events.config import GangTimeoutOptions
from services.admission.domain.explain import explain
from services.admission.domain.explain_history import History
from services.admission.domain.explain_text import clock_text
from services.admission.domain.gang_rows import gang_rows
from services.admission.domain.state import AdmissionState
from tests.explain.world import START, TREE, World, cancel, gang, pool, task, world


def at(offset: float) -> str:
    return clock_text(START + offset)


def messages(w: World, gang_id: str) -> list[str]:
    return [f.message for f in w.explain(gang_id).findings]


# --- time for people, without datetime ---------------------------------------------------------


@pytest.mark.parametrize("seconds", [0.0, 59.9, 951_782_400.0, 951_868_799.5, 1_700_000_000.0, 4_107_542_400.0,
                                     -86_400.0, -2_208_988_800.0])
def test_clock_text_agrees_with_datetime(seconds: float) -> None:
    expected = datetime.fromtimestamp(seconds // 1, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    assert clock_text(seconds) == expected


# --- why a gang waits -----------------------------------------------------------------------------


def test_waiting_gang_counts_members_and_says_when_it_times_out() -> None:
    w = world(pool("/ATG"))
    w.feed(gang("g", "/ATG", tasks=3, size=4), at=1)
    w.feed(pool("/other"), at=11)  # time moves on: 20 s left
    result = w.explain("g")
    assert result.state == "waiting"
    assert result.summary == (f"gang has 3 of 4 members; times out at {at(31)} (in 20 s) unless 1 more member "
                              f"arrives; until then it is not admissible and not demand")
    assert result.findings[0].numbers["members"] == 3
    assert result.findings[0].numbers["deadline"] == START + 31


def test_entitlement_shortfall_names_the_numbers() -> None:
    w = world(pool("/ATG", limit={"cpu": 10}), capacity={"cpu": 10})
    w.feed(gang("g1", "/ATG", tasks=2, cpu=2), at=1).tick(at=2)
    w.feed(gang("g2", "/ATG", tasks=4, cpu=2), at=3).tick(at=4)
    result = w.explain("g2")
    assert (result.state, result.queue, result.position, result.queue_length) == ("pending", "pending", 1, 1)
    assert result.summary == "entitlement: needs cpu 8, pool /ATG has 6 of 10 left"
    assert result.findings[0].numbers["cpu"] == {"need": 8.0, "left": 6.0, "of": 10.0, "held": 4.0, "short": 2.0}
    assert "queue pending of pool /ATG (position 1 of 1)" in result.text


def test_entitlement_shortfall_on_a_kind_no_host_has_any_more() -> None:
    w = world(pool("/ATG"), resources=("cpu", "gpu"), capacity={"cpu": 10})
    w.feed(HostRegistered(host="gpu-box", resources={"gpu": 1}), gang("g", "/ATG", resources={"cpu": 1, "gpu": 1}),
           HostRemoved(host="gpu-box"), at=1).tick(at=2)
    assert w.explain("g").summary == ("entitlement: needs gpu 1, pool /ATG has 0 of 0 left "
                                      "(tree default has no gpu: no host offers it)")


def test_head_of_line_names_the_gang_ahead_and_why_it_is_stuck() -> None:
    w = world(pool("/ATG/Simulation", limit={"cpu": 10}), capacity={"cpu": 10})
    w.feed(gang("g1", "/ATG/Simulation", tasks=2, cpu=3), at=1).tick(at=2)
    w.feed(gang("g17", "/ATG/Simulation", cpu=8), gang("g18", "/ATG/Simulation", cpu=1), at=3).tick(at=4)
    assert w.state_of("g18") == "pending"
    result = w.explain("g18")
    assert result.position == 2
    assert messages(w, "g18")[:2] == [
        "queue pending of /ATG/Simulation: behind gang g17 (head of line), which does not fit: "
        "entitlement: needs cpu 8, pool /ATG/Simulation has 4 of 10 left",
        "on its own it would fit: it waits for gang g17",
    ]
    assert result.findings[0].numbers["blocker"] == "g17"
    # ... and the gang ahead says it holds up one gang
    assert messages(w, "g17") == [
        "entitlement: needs cpu 8, pool /ATG/Simulation has 4 of 10 left",
        "it is the head of line of queue pending of /ATG/Simulation: 1 gang behind it waits for it",
    ]


def test_behind_a_blocker_and_too_big_on_its_own() -> None:
    w = world(pool("/P", limit={"cpu": 10}), capacity={"cpu": 10})
    w.feed(gang("g1", "/P", cpu=9), at=1).tick(at=2)
    w.feed(gang("g2", "/P", cpu=5), gang("g3", "/P", cpu=4), at=3).tick(at=4)
    assert messages(w, "g3")[1] == "and on its own: entitlement: needs cpu 4, pool /P has 1 of 10 left"


def test_full_pool_on_the_path() -> None:
    w = world(pool("/ATG", max_running_jobs=1), pool("/ATG/a"), pool("/ATG/b"))
    w.feed(gang("a1", "/ATG/a", job="j1"), at=1).tick(at=2)
    w.feed(gang("b1", "/ATG/b", job="j2"), at=3).tick(at=4)
    result = w.explain("b1")
    assert result.summary == "pool /ATG has 1 running jobs of 1; job j2 waits for a slot"
    assert result.findings[0].numbers == {"pool": "/ATG", "running": 1, "limit": 1, "kept": 0}
    assert any(f.check == "slot_wait" for f in result.findings)


def test_full_pool_is_reported_besides_the_failed_check() -> None:
    w = world(pool("/P", max_running_jobs=1, limit={"cpu": 10}), capacity={"cpu": 10})
    w.feed(gang("g1", "/P", cpu=6, job="j1"), at=1).tick(at=2)
    w.feed(gang("g2", "/P", cpu=6, job="j2"), at=3).tick(at=4)
    assert messages(w, "g2")[0] == "entitlement: needs cpu 6, pool /P has 4 of 10 left"
    assert "pool /P has 1 running jobs of 1" in messages(w, "g2")


def test_gangs_ahead_are_taken_in_the_cycles_order() -> None:
    # a (job j2) is held by the job limit and skipped, b (job j1, running) is admitted, c does not
    # fit after b: c is the head of line itself, not behind a.
    w = world(pool("/P", max_running_jobs=1, limit={"cpu": 10}), capacity={"cpu": 10})
    w.feed(gang("r", "/P", cpu=1, job="j1"), at=1).tick(at=2)
    w.feed(gang("a", "/P", cpu=5, job="j2"), gang("b", "/P", cpu=8, job="j1"), gang("c", "/P", cpu=2, job="j1"),
           at=3)
    assert messages(w, "c") == ["entitlement: needs cpu 2, pool /P has 1 of 10 left"]
    assert messages(w, "a")[0] == "pool /P has 1 running jobs of 1; job j2 waits for a slot"
    w.tick(at=4)
    assert w.states("a", "b", "c") == {"a": "pending", "b": "admitted", "c": "pending"}
    # now b holds cpu 8: the cycle's first check of a (entitlement) fails before its job limit is
    # looked at, so a stops the queue, as the cycle (`judge`) has it
    assert messages(w, "c") == ["queue pending of /P: behind gang a (head of line), which does not fit: "
                                "entitlement: needs cpu 5, pool /P has 1 of 10 left",
                                "and on its own: entitlement: needs cpu 2, pool /P has 1 of 10 left"]


def test_controller_limit() -> None:
    w = world(pool("/P", reservation={"cpu": 100}, controller_limit=10))
    w.feed(gang("c1", "/P", cpu=8, controller=True), at=1).tick(at=2)
    w.feed(gang("c2", "/P", cpu=8, controller=True), at=3).tick(at=4)
    result = w.explain("c2")
    assert result.queue == "controller"
    assert result.summary == ("controller limit: needs cpu 8, controller tasks of pool /P may hold 10 "
                              "(10% of reservation 100), 2 left")


def test_reservation_of_non_preemptible_work_and_the_move_it_makes() -> None:
    w = world(pool("/P", reservation={"cpu": 10}))
    w.feed(gang("n1", "/P", cpu=8, preemptible=False), at=1).tick(at=2)
    w.feed(gang("n2", "/P", cpu=8, preemptible=False), at=3)
    expected = ("reservation: non-preemptible work stays within it: needs cpu 8, pool /P has 2 of its reservation "
                "10 left")
    assert w.explain("n2").summary == f"{expected}; the next cycle moves it to queue non_preemptible"
    w.tick(at=4)
    result = w.explain("n2")
    assert (result.queue, result.summary) == ("non_preemptible", expected)


def test_slack_entitlement_of_a_revocable_gang() -> None:
    w = world(pool("/P"))
    w.feed(HostRegistered(host="cluster", resources={"cpu": 100}, revocable={"cpu": 4}), at=0)
    w.feed(gang("r", "/P", cpu=8, revocable=True), at=1).tick(at=2)
    result = w.explain("r")
    assert (result.queue, result.summary) == ("revocable", "slack entitlement: needs cpu 8, pool /P has 4 of 4 "
                                                           "slack left")


def test_no_cycle_yet() -> None:
    w = world(pool("/P"))
    w.feed(gang("x", "/P"), at=1)
    assert messages(w, "x") == ["entitlement: none computed for pool /P yet (no admission cycle has run since it "
                                "was created)", "no admission cycle has run in tree default yet"]


def test_fits_now_when_it_arrived_after_the_last_cycle() -> None:
    w = world(pool("/P"))
    w.feed(gang("a", "/P"), at=1).tick(at=2)
    w.feed(gang("b", "/P"), at=3)
    arrival = w.state.trees[TREE].gangs["b"].arrival
    cycle = w.state.trees[TREE].entitlement_seq
    assert w.explain("b").summary == (f"fits now: the next admission cycle admits it (it arrived at log position "
                                      f"{arrival}, after the last cycle (at {cycle}))")


def test_fits_now_when_resources_freed_since() -> None:
    w = world(pool("/P", limit={"cpu": 10}), capacity={"cpu": 10})
    w.feed(gang("a", "/P", cpu=8), at=1).tick(at=2)
    w.feed(gang("b", "/P", cpu=8), at=3).tick(at=4)
    assert w.explain("b").findings[0].check == "entitlement"
    w.feed(task("a/0", "succeeded"), at=5)
    assert w.explain("b").summary == ("fits now: the next admission cycle admits it (what held it back has freed "
                                      "since the last cycle)")


# --- what became of it ------------------------------------------------------------------------------


def test_admitted_when_from_which_queue_and_attempt() -> None:
    w = world(pool("/ATG"))
    w.feed(gang("g", "/ATG", tasks=2), at=1).tick(at=2)
    result = w.explain("g")
    assert (result.state, result.attempt) == ("admitted", 1)
    assert messages(w, "g") == [
        f"admitted at {at(2)} from queue pending of pool /ATG (attempt 1)",
        "tasks: 2 ready",
        f"0 of 2 tasks placed; all must be placed by {at(32)} or the gang is requeued",
    ]
    w.feed(task("g/0", "placed"), task("g/1", "running"), at=3)
    assert messages(w, "g")[1:] == ["tasks: 1 placed, 1 running"]


def test_admitted_from_the_controller_queue() -> None:
    w = world(pool("/P", reservation={"cpu": 100}, controller_limit=10))
    w.feed(gang("c1", "/P", cpu=8, controller=True), at=1).tick(at=2)
    w.feed(gang("c2", "/P", cpu=8, controller=True), at=3).tick(at=4)
    w.feed(task("c1/0", "succeeded"), at=5).tick(at=6)
    assert w.explain("c2").summary == f"admitted at {at(6)} from queue controller of pool /P (attempt 1)"


def test_requeued_after_placement_timeout_says_so() -> None:
    w = world(pool("/P"), timeout=GangTimeoutOptions(default=10, limit=100, jitter=0))
    w.feed(gang("g", "/P"), at=1).tick(at=2)
    w.tick(at=13)  # not placed within 10 s: requeued (noticed at 13), and admitted again by this tick's cycle
    result = w.explain("g")
    assert (result.state, result.attempt) == ("admitted", 2)
    assert messages(w, "g")[-1] == (f"attempt 1 ended: requeued at {at(13)} (placement timeout: 1 of 1 tasks not "
                                    f"placed within 10 s of admission)")


def test_done() -> None:
    w = world(pool("/P"))
    w.feed(gang("g", "/P", tasks=2), at=1).tick(at=2)
    w.feed(task("g/0", "succeeded"), at=3)
    w.feed(task("g/1", "failed"), at=4)
    assert w.explain("g").summary == f"done at {at(4)} after attempt 1: every task ended (1 failed, 1 succeeded)"


def test_timed_out() -> None:
    w = world(pool("/P"))
    w.feed(gang("g", "/P", tasks=1, size=3), at=1)
    w.tick(at=40)
    assert w.state_of("g") == "timed_out"
    assert w.explain("g").summary == f"timed out at {at(31)} with 1 of 3 members: the others did not arrive within 30 s"


def test_cancelled_before_and_after_admission() -> None:
    w = world(pool("/P", limit={"cpu": 10}), capacity={"cpu": 10})
    w.feed(gang("a", "/P", cpu=6), gang("b", "/P", cpu=6), at=1).tick(at=2)
    w.feed(cancel("b", reason="not needed"), at=3)
    w.feed(cancel("a"), at=4)
    assert w.explain("b").summary == f"cancelled at {at(3)} before it was admitted (reason: not needed)"
    assert w.explain("a").summary == f"cancelled at {at(4)} while admitted (attempt 1): its tasks were killed"


def test_rejected_at_enqueue_with_the_reason() -> None:
    w = world(pool("/P"))
    w.feed(gang("g", "/nope"), at=1)
    result = w.explain("g")
    assert result.state == "rejected"
    assert result.summary == "refused at enqueue: gang g: pool /nope does not exist [pool_missing]"
    assert result.headline == "gang g (job g, tree default) was rejected: it named pool /nope"
    # without the history, the state alone cannot say why
    assert explain(w.state, TREE, "g").summary == ("refused at enqueue: its reason is in the log's InputRejected "
                                                   "record for it")


def test_refused_later_members_are_reported_on_the_gang() -> None:
    w = world(pool("/P"))
    w.feed(gang("g", "/P", tasks=1, size=3), at=1)
    w.feed(gang("g", "/P", tasks=1, size=2, first=1), at=2)
    assert messages(w, "g")[-1] == "members refused: gang g: size 2 disagrees with the first members' size 3 " \
                                   "[size_mismatch]"
    assert w.explain("g").state == "waiting"


def test_unknown_gang() -> None:
    w = world(pool("/P"))
    result = w.explain("nope")
    assert result.state == "unknown"
    assert result.summary.startswith("no gang nope in tree default")
    assert explain(AdmissionState(), "other", "nope").state == "unknown"


# --- pure and plain ---------------------------------------------------------------------------------


def fingerprint(state: AdmissionState) -> str:
    trees = {}
    for name, rt in state.trees.items():
        trees[name] = {
            "gangs": {g.id: [g.state, g.queue, g.attempt, g.slot_wait, [t.state for t in g.tasks]]
                      for g in rt.gangs.values()},
            "queues": {p: {n: [g.id for g in q] for n, q in qs.items()} for p, qs in rt.queues.items()},
            "ledgers": {p: [lg.allocation, lg.demand, lg.controller, lg.non_preemptible]
                        for p, lg in rt.ledgers.items()},
            "running": rt.running, "jobs": rt.jobs, "fresh": rt.fresh, "dirty": rt.dirty,
        }
    return json.dumps({"trees": trees, "now": state.now, "seq": state.last_seq, "names": sorted(state.trees)},
                      sort_keys=True, default=str)


def test_explaining_changes_nothing_and_is_json() -> None:
    w = world(pool("/org", max_running_jobs=1), pool("/org/a", limit={"cpu": 10}), pool("/org/b"),
              capacity={"cpu": 10})
    w.feed(gang("a1", "/org/a", cpu=8, job="j1"), gang("a2", "/org/a", cpu=8, job="j1"),
           gang("a3", "/org/a", cpu=1, job="j3"), gang("b1", "/org/b", job="j2"),
           gang("w", "/org/a", tasks=1, size=2), at=1).tick(at=2)
    before = fingerprint(w.state)
    for gang_id in ("a1", "a2", "a3", "b1", "w", "missing"):
        json.dumps(w.explain(gang_id).to_dict())
        json.dumps(explain(w.state, "elsewhere", gang_id).to_dict())
    assert fingerprint(w.state) == before
    assert "elsewhere" not in w.state.trees


def test_gang_rows_filter_by_pool_subtree_and_state() -> None:
    w = world(pool("/org"), pool("/org/a"), pool("/org/ab"), pool("/x"))
    w.feed(gang("a", "/org/a"), gang("ab", "/org/ab"), gang("x", "/x"), gang("w", "/x", tasks=1, size=2), at=1)
    w.tick(at=2)
    assert [r["gang"] for r in gang_rows(w.state)] == ["a", "ab", "x", "w"]
    assert [r["gang"] for r in gang_rows(w.state, pool="/org/a")] == ["a"]
    assert [r["gang"] for r in gang_rows(w.state, pool="/org")] == ["a", "ab"]
    assert [r["gang"] for r in gang_rows(w.state, states=["waiting"])] == ["w"]
    assert gang_rows(w.state, tree="other") == []
    row = gang_rows(w.state, states=["waiting"])[0]
    assert (row["members"], row["size"], row["queue"], row["state"]) == (1, 2, None, "waiting")


def test_history_is_optional_and_separate_per_tree() -> None:
    history = History()
    assert history.get(TREE, "g").rejection is None
    assert history.notes == {}
