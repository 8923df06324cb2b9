"""The JSON report contract and its readable rendering."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from pydantic import ValidationError

from events import (
    EntitlementsComputed,
    GangAdmitted,
    GangFinished,
    GangMovedToQueue,
    GangRequeued,
    GangTimedOut,
    InputRejected,
    PreemptionRequested,
    TaskSpec,
)
from services.tools.scenario import (
    Expectations,
    ScenarioReport,
    StepReport,
    check,
    decisions_of,
    pool_key,
    print_text,
    render_summary,
    render_text,
    resource_map,
)

# The example of SCENARIOS.md, "The JSON report".
DOCUMENTED = """
{
  "name": "peloton-guide-example-1",
  "passed": true,
  "steps": [
    {
      "at": 0,
      "pools": {
        "/RP1": {
          "entitlement": {"cpu": 10.0},
          "non_slack_entitlement": {"cpu": 10.0},
          "slack_entitlement": {"cpu": 0.0},
          "allocation": {"cpu": 10.0},
          "slack_allocation": {"cpu": 0.0},
          "demand": {"cpu": 0.0},
          "slack_demand": {"cpu": 0.0},
          "reservation": {"cpu": 20.0},
          "limit": {"cpu": 100.0}
        }
      },
      "gangs": {"g1": {"pool": "/RP1", "state": "admitted", "queue": null}},
      "tasks": {"g1/0": {"state": "ready"}},
      "decisions": [
        {"kind": "admitted", "gang": "g1", "pool": "/RP1"},
        {"kind": "preempt", "task": "g2/3", "pool": "/RP2", "reason": "over entitlement"},
        {"kind": "rejected", "ref": "/RP9", "reason": "parent /X does not exist"}
      ],
      "failures": []
    }
  ]
}
"""


def test_the_documented_report_round_trips_exactly() -> None:
    report = ScenarioReport.from_json(DOCUMENTED)
    line = report.to_json()
    assert "\n" not in line
    assert json.loads(line) == json.loads(DOCUMENTED)
    assert ScenarioReport.from_json(line) == report


def test_the_shape_is_strict() -> None:
    doc: dict[str, Any] = json.loads(DOCUMENTED)
    doc["steps"][0]["pools"]["/RP1"].pop("limit")
    with pytest.raises(ValidationError):
        ScenarioReport.model_validate(doc)
    doc = json.loads(DOCUMENTED)
    doc["steps"][0]["gangs"]["g1"]["state"] = "running"
    with pytest.raises(ValidationError):
        ScenarioReport.model_validate(doc)
    doc = json.loads(DOCUMENTED)
    doc["steps"][0]["extra"] = 1
    with pytest.raises(ValidationError):
        ScenarioReport.model_validate(doc)


def test_passed_follows_the_failures_and_at_keeps_fractions() -> None:
    ok = StepReport(at=0)
    bad = StepReport(at=2.5).with_failures(["step at=2.5: gangs g: expected done, observed no such gang"])
    assert ScenarioReport.build("s", [ok]).passed
    report = ScenarioReport.build("s", [ok, bad])
    assert not report.passed
    steps = json.loads(report.to_json())["steps"]
    assert [s["at"] for s in steps] == [0, 2.5]
    assert steps[0] == {"at": 0, "pools": {}, "gangs": {}, "tasks": {}, "decisions": [], "failures": []}


def test_resource_maps_list_every_kind_in_play() -> None:
    assert resource_map({"cpu": 3}, ["cpu", "memory"]) == {"cpu": 3.0, "memory": 0.0}
    assert resource_map({"tpu": 1}, ["cpu"]) == {"cpu": 0.0, "tpu": 1.0}
    assert pool_key("t", "/a", multi_tree=False) == "/a"
    assert pool_key("t", "/a", multi_tree=True) == "t:/a"


def test_decision_events_become_report_entries() -> None:
    spec = TaskSpec(id="g/0", resources={"cpu": 1})
    events = [
        GangAdmitted(tree="t", gang="g", pool="/p", queue="pending", tasks=[spec]),
        PreemptionRequested(tree="t", pool="/p", gang="g", tasks=["g/0", "g/1"], reason="over entitlement"),
        InputRejected(
            tree="t",
            ref="/x",
            input_type="PoolConfigChanged",
            reason="parent /y does not exist",
            rule="parent",
        ),
        GangTimedOut(tree="t", gang="h", pool="/p", members=1, size=3, deadline=10),
        GangRequeued(tree="t", gang="g", pool="/p", reason="not placed in 30 s"),
        GangMovedToQueue(tree="t", gang="k", pool="/p", queue="controller", reason="controller limit"),
        GangFinished(tree="t", gang="g", pool="/p", outcome="done"),
        EntitlementsComputed(tree="t", capacity={"cpu": 1}, pools=[]),
    ]
    entries = [d.model_dump() for e in events for d in decisions_of(e, lambda tree, path: f"{tree}:{path}")]
    assert entries == [
        {"kind": "admitted", "gang": "g", "pool": "t:/p"},
        {"kind": "preempt", "task": "g/0", "pool": "t:/p", "reason": "over entitlement"},
        {"kind": "preempt", "task": "g/1", "pool": "t:/p", "reason": "over entitlement"},
        {"kind": "rejected", "ref": "/x", "reason": "parent /y does not exist"},
        {"kind": "timed_out", "gang": "h", "pool": "t:/p", "reason": "1 of 3 members at the deadline"},
        {"kind": "requeued", "gang": "g", "pool": "t:/p", "reason": "not placed in 30 s"},
        {"kind": "moved", "gang": "k", "pool": "t:/p", "reason": "to queue controller: controller limit"},
        {"kind": "finished", "gang": "g", "pool": "t:/p", "reason": "done"},
    ]
    assert decisions_of(events[0])[0].pool == "/p"  # by default pools are named by path


def _failing_report() -> ScenarioReport:
    step = StepReport.model_validate(
        {
            "at": 60,
            "pools": {
                "/RP2": {
                    name: {"cpu": 45.0}
                    for name in (
                        "entitlement",
                        "non_slack_entitlement",
                        "slack_entitlement",
                        "allocation",
                        "slack_allocation",
                        "demand",
                        "slack_demand",
                        "reservation",
                        "limit",
                    )
                }
            },
        }
    )
    failures = check(Expectations(entitlement={"/RP2": {"cpu": 33.33}}, preempted_count={"/RP2": 12}), step)
    return ScenarioReport.build("peloton", [StepReport(at=0), step.with_failures(failures)])


def test_text_shows_each_failure_under_its_step_and_a_summary() -> None:
    text = render_text(_failing_report())
    assert text.splitlines() == [
        "scenario peloton",
        "  step at=0: ok",
        "  step at=60: 2 failed expectations",
        "    entitlement /RP2 cpu: expected 33.33, observed 45.0",
        "    preempted_count /RP2: expected 12, observed 0",
        "FAILED peloton: 2 failed expectations in 1 of 2 steps",
    ]
    passing = render_text(ScenarioReport.build("ok", [StepReport(at=0)]))
    assert passing.splitlines()[-1] == "PASSED ok: 1 step, every expectation holds"


def test_printed_text_is_plain_when_not_a_terminal() -> None:
    out = io.StringIO()
    report = _failing_report()
    print_text([report, ScenarioReport.build("ok", [])], file=out)
    printed = out.getvalue()
    assert "\x1b[" not in printed
    assert printed.startswith(render_text(report))
    assert printed.splitlines()[-1] == render_summary([report, ScenarioReport.build("ok", [])])
    assert render_summary([report]) == "1 scenario: 0 passed, 1 failed"


def test_text_keeps_brackets_and_long_lines_as_they_are() -> None:
    failure = "step at=0: preempted: expected [], observed [" + ", ".join(f"g-{i}/0" for i in range(40)) + "]"
    report = ScenarioReport.build("s", [StepReport(at=0, failures=[failure])])
    out = io.StringIO()
    print_text([report], file=out)
    assert failure.removeprefix("step at=0: ") in out.getvalue()
