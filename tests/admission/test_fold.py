"""The fold and its ticks (docs/architecture.md, "Time, ticks and cycles"): a cycle takes effect at
its trigger (a tick, or the input message that makes a tree's `cycle_gangs`-th pending gang);
ticks name trees; the same events give the same decisions,
byte for byte, and a replay of the log re-derives every recorded decision."""

from __future__ import annotations

import json

from events import (
    ClockTicked,
    CycleCompleted,
    EntitlementsComputed,
    Event,
    GangAdmitted,
    GangMovedToQueue,
    TreeOptions,
)
from services.admission.domain.decide import run_cycles
from services.admission.domain.state import AdmissionState
from tests.admission.builders import (
    Log,
    admitted,
    cancel,
    cycles,
    gang,
    host,
    kinds,
    pool,
    preempt,
    snapshot,
    task,
    tree,
    world,
)


def test_a_cycle_takes_effect_at_its_tick_so_the_next_one_need_not_wait_for_it() -> None:
    log = world(pool("/a"))
    log.feed(gang("g1", "/a"))
    first = log.tick(0, land=False)  # its decisions are still on their way to the log
    assert admitted(first) == ["g1"] and log.gang("g1").state == "admitted"
    log.feed(gang("g2", "/a"))
    second = log.tick(1)  # decides on g1 admitted: admits g2 only
    assert admitted(second) == ["g2"]
    assert log.gang("g1").attempt == 1
    assert log.ledger("/a").allocation == {"cpu": 2.0}


def test_an_input_message_that_makes_the_trees_cycle_gangs_th_pending_gang_starts_a_cycle() -> None:
    log = world(pool("/a"), cycle_gangs=20)
    log.feed(*[gang(f"g{i}", "/a") for i in range(19)])
    assert log.state.take_due() == []
    log.feed(gang("w", "/a", tasks=1, size=2))  # waiting: not pending, not counted
    assert log.state.take_due() == []
    log.feed(gang("last", "/a"))
    assert log.state.take_due() == ["default"]
    assert log.rt.fresh == 20


def test_the_option_takes_effect_when_the_tree_is_configured_again() -> None:
    log = world(pool("/a"))
    assert log.rt.cycle_gangs == TreeOptions().cycle_gangs == 5000  # the default
    log.feed(*[gang(f"g{i}", "/a") for i in range(5)])
    log.feed(tree(cycle_gangs=3))  # below what is pending already: the next one starts a cycle
    assert log.state.take_due() == []
    log.feed(gang("g5", "/a"))
    assert log.state.take_due() == ["default"]


def test_a_cycle_starts_the_count_again() -> None:
    log = world(pool("/a"), capacity={"cpu": 5000})
    log.feed(*[gang(f"g{i}", "/a") for i in range(10)])
    assert log.rt.fresh == 10
    log.tick(0)
    assert log.rt.fresh == 0 and not log.rt.dirty


def test_a_tick_naming_a_tree_starts_only_that_trees_cycle() -> None:
    log = Log()
    log.feed(tree(), tree(name="gpu"), host(cpu=10), pool("/a"), pool("/g", tree_name="gpu"))
    log.feed(gang("g", "/a"))
    log.append(ClockTicked(tree="gpu"))
    assert log.state.take_due() == ["gpu"]
    log.append(ClockTicked())
    assert log.state.take_due() == ["default", "gpu"]


def test_every_tree_gets_its_own_cycle() -> None:
    log = Log()
    log.feed(tree(), tree(name="gpu"), host(cpu=10), pool("/a"), pool("/g", tree_name="gpu"))
    out = log.tick(0)
    assert [(c.tree, c.service) for c in cycles(out)] == [("default", "admission"), ("gpu", "admission")]


def _story() -> Log:
    """A bit of everything: pools, limits, moves, timeouts, preemption, cancels, several cycles."""
    log = world(pool("/org", reservation={"cpu": 60}, max_running_jobs=3), pool("/org/a", reservation={"cpu": 30}),
                pool("/org/b", reservation={"cpu": 20}, controller_limit=10, mode="fair_share"), pool("/c"))
    log.feed(*[gang(f"a{i}", "/org/a", cpu=7, job=f"ja{i % 2}") for i in range(5)],
             *[gang(f"b{i}", "/org/b", cpu=3, job=f"jb{i % 3}", controller=i == 0) for i in range(6)],
             gang("np", "/c", preemptible=False, cpu=4), gang("w", "/c", tasks=1, size=2, timeout=5),
             gang("big", "/c", cpu=90))
    log.tick(0)
    log.feed(task("a0/0", "running"), task("b1/0", "placed"), cancel("a4"), at=3)
    log.tick(3)
    log.feed(preempt("a0", "/org/a", "a0/0"), at=6)
    log.feed(task("a0/0", "preempted"), at=7)
    log.tick(40)
    log.feed(task("a1/0", "succeeded"), gang("late", "/org/a", cpu=1, priority=5), at=41)
    log.tick(41)
    return log


def _json(events: list[Event]) -> list[str]:
    return [e.model_dump_json() for e in events]


def test_the_same_events_give_the_same_decisions_byte_for_byte() -> None:
    one, two = _story(), _story()
    assert _json([e.event for e in one.entries]) == _json([e.event for e in two.entries])
    assert json.dumps(snapshot(one.state), sort_keys=True) == json.dumps(snapshot(two.state), sort_keys=True)
    decided = [e.event for e in one.entries if isinstance(e.event, GangAdmitted)]
    assert len(decided) >= 8  # the story decides something


def test_a_replay_of_the_log_re_derives_every_recorded_cycle() -> None:
    log = _story()
    replay = AdmissionState()
    cycles_checked = 0
    entries = log.entries
    for i, entry in enumerate(entries):
        if _cycle_decision(entry.event):
            continue  # applied at its tick, when re-derived
        replay.apply(entry.event, entry.seq, entry.time)
        derived = [o.event for o in run_cycles(replay, entry.seq)]
        if derived:
            start = next(j for j in range(i + 1, len(entries)) if entries[j].event.type == "EntitlementsComputed")
            recorded = [e.event for e in entries[start:start + len(derived)]]
            assert _json(recorded) == _json(derived)
            cycles_checked += 1
    assert cycles_checked == 4
    assert snapshot(replay) == snapshot(log.state)


def _cycle_decision(event: Event) -> bool:
    return isinstance(event, EntitlementsComputed | GangAdmitted | GangMovedToQueue) or (
        isinstance(event, CycleCompleted) and event.service == "admission")


def test_a_story_of_cycles_keeps_the_ledger_equal_to_what_admitted_tasks_hold() -> None:
    log = _story()
    for path, ledger in log.rt.ledgers.items():
        held: dict[str, float] = {}
        for g in log.rt.gangs.values():
            if g.pool == path and g.state == "admitted":
                for t in g.tasks:
                    if t.state not in ("succeeded", "failed", "killed", "lost", "preempted", "pending"):
                        for k, v in t.resources.items():
                            held[k] = held.get(k, 0.0) + v
        assert {k: v for k, v in ledger.allocation.items() if v} == {k: v for k, v in held.items() if v}, path
    assert kinds(cycles(e.event for e in log.entries)) == ["CycleCompleted"] * 4
