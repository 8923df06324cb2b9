"""The preemption service's record of what it asked for and how each request ended, and its
answers to `poolwise.cmd.preemption.<op>` (built from that state, no NATS here)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from events import PreemptionRequested
from services.preemption.folder import PreemptionFolder
from services.preemption.service import answer
from services.tools.cli.main import app
from tests.preemption.harness import TREE, System, gang, gangs, host, pool, task, tree


def lent(state: str = "running") -> System:
    """/a holds a0..a9 (10 cpu, `state`) when /b asks for 2: a9 and a8 are asked to give back."""
    s = System()
    s.feed(tree(), host(cpu=10), pool("/a"), pool("/b"), pool("/c"), pool("/c/d"), at=0)
    s.feed(gangs("a", 10, "/a"), at=0)
    s.tick(0)
    if state != "ready":
        s.set_state(state, *[f"a{i}" for i in range(10)], at=1)
    s.feed(gang("b0", "/b", cpu=2), at=10)
    s.tick(10)
    return s


def test_running_victims_stay_requested_until_they_stop() -> None:
    s = lent()
    records = s.preemption.preemptions()
    assert [(r.gang, r.pool, r.state, r.outcome, r.time) for r in records] == [
        ("a9", "/a", "requested", None, 10.0), ("a8", "/a", "requested", None, 10.0)]
    assert records[0].reason.startswith("over non-slack entitlement since 10")
    s.ack(at=15)
    assert [(r.gang, r.state, r.outcome, r.completed_at) for r in s.preemption.preemptions()] == [
        ("a9", "completed", "preempted", 15.0), ("a8", "completed", "preempted", 15.0)]


def test_ready_victims_complete_at_once_and_finished_ones_say_so() -> None:
    s = lent("ready")
    assert [(r.gang, r.outcome) for r in s.preemption.preemptions()] == [("a9", "requeued"), ("a8", "requeued")]
    s2 = lent()
    s2.feed(task("a9/0", "succeeded"), task("a8/0", "preempted"), at=12)
    assert [(r.gang, r.outcome) for r in s2.preemption.preemptions()] == [("a9", "finished"), ("a8", "preempted")]


def test_a_request_for_a_gang_no_longer_admitted_is_stale() -> None:
    s = lent()
    s.feed(PreemptionRequested(tree=TREE, pool="/b", gang="nobody", tasks=["nobody/0"], reason="late"), at=20)
    (record,) = s.preemption.preemptions(pool="/b")
    assert (record.state, record.outcome) == ("completed", "stale")


def test_filters() -> None:
    s = lent()
    state = s.preemption
    assert [r.gang for r in state.preemptions(pool="/a")] == ["a9", "a8"]
    assert state.preemptions(pool="/b") == []
    assert len(state.preemptions(pool="/")) == 2
    assert state.preemptions(state="completed") == []
    assert state.preemptions(tree="other") == []


def test_answers_list_with_filters_and_starvation() -> None:
    s = lent()
    folder = PreemptionFolder(s.preemption)
    reply = answer(folder, "list", json.dumps({"op": "list", "pool": "/a", "limit": 1}).encode())
    assert reply.ok
    assert [p["gang"] for p in reply.data["preemptions"]] == ["a8"]  # the last one
    assert reply.data["preemptions"][0]["reason"].startswith("over non-slack entitlement since 10")
    assert reply.seq == s.preemption.admission.last_seq
    assert {st["pool"] for st in reply.data["starvation"]} == {"/a"}
    everything = answer(folder, "list", b"")
    assert len(everything.data["preemptions"]) == 2


def test_refuses_unknown_ops_and_bad_requests_naming_the_field() -> None:
    folder = PreemptionFolder()
    unknown = answer(folder, "drop_all", b"{}")
    assert not unknown.ok and unknown.error is not None and unknown.error.rule == "unknown_op"
    bad = answer(folder, "list", b'{"limit": 0}')
    assert not bad.ok and bad.error is not None
    assert (bad.error.rule, bad.error.field) == ("invalid_command", "limit")



def test_the_command_refuses_an_unknown_state_before_asking_anyone(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["preemptions", "--state", "bogus", "--data-dir", str(tmp_path)])
    assert result.exit_code == 2
    assert "requested or completed" in result.output
