"""Every expectation key, holding and failing, on hand-built step reports."""

from __future__ import annotations

from typing import Any

import pytest

from services.tools.scenario import Expectations, StepReport, check

EMPTY = {"cpu": 0.0}


def _pool(**maps: dict[str, float]) -> dict[str, Any]:
    names = (
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
    return {name: maps.get(name, EMPTY) for name in names}


STEP = StepReport.model_validate(
    {
        "at": 60,
        "pools": {
            "/RP1": _pool(entitlement={"cpu": 33.3333}, allocation={"cpu": 33.0}, demand={"cpu": 17.0}),
            "/RP2": _pool(
                entitlement={"cpu": 45.0},
                non_slack_entitlement={"cpu": 45.0},
                slack_entitlement={"cpu": 2.0},
                slack_allocation={"cpu": 1.0},
                slack_demand={"cpu": 3.0},
            ),
        },
        "gangs": {
            "g1": {"state": "admitted", "pool": "/RP1", "queue": None},
            "g2": {"state": "pending", "pool": "/RP1", "queue": "non_preemptible"},
            "g3": {"state": "waiting", "pool": "/RP2", "queue": None},
            "g4": {"state": "timed_out", "pool": "/RP2", "queue": None},
        },
        "tasks": {"g1/0": {"state": "ready"}, "g1/1": {"state": "running"}},
        "decisions": [
            {"kind": "admitted", "gang": "g1", "pool": "/RP1"},
            {"kind": "admitted", "gang": "g5", "pool": "/RP1"},
            {"kind": "preempt", "task": "b/0", "pool": "/RP2", "reason": "over entitlement"},
            {"kind": "preempt", "task": "b/1", "pool": "/RP2", "reason": "over entitlement"},
            {"kind": "rejected", "ref": "/RP9", "reason": "parent /X does not exist"},
            {"kind": "rejected", "ref": "g9", "reason": "pool /org is not a leaf"},
            {"kind": "timed_out", "gang": "g4", "pool": "/RP2"},
            {"kind": "requeued", "gang": "g6", "pool": "/RP1", "reason": "placement timeout"},
        ],
    }
)


def _check(**expect: Any) -> list[str]:
    return check(Expectations.model_validate(expect), STEP)


HOLDING: list[dict[str, Any]] = [
    {"entitlement": {"/RP1": {"cpu": 33.33}, "/RP2": {"cpu": 45}}},
    {"entitlement": {"/RP1": {"cpu": 33.34}}},  # within 0.01
    {"entitlement": {"/RP1": {"memory": 0}}},  # a kind the report leaves out reads as 0
    {"non_slack_entitlement": {"/RP2": {"cpu": 45}}},
    {"slack_entitlement": {"/RP2": {"cpu": 2}}},
    {"allocation": {"/RP1": {"cpu": 33}}},
    {"slack_allocation": {"/RP2": {"cpu": 1}}},
    {"demand": {"/RP1": {"cpu": 17}}},
    {"slack_demand": {"/RP2": {"cpu": 3}}},
    {"gangs": {"g1": "admitted", "g3": "waiting"}},
    {"admitted": ["g1"]},
    {"pending": ["g2"]},
    {"admitted_order": ["g1", "g5"]},
    {"preempted": ["b/1", "b/0"]},
    {"preempted_count": {"/RP2": 2, "/RP1": 0}},
    {"rejected": ["g9", "/RP9"]},
    {"timed_out": ["g4"]},
    {"requeued": ["g6"]},
    {"queues": {"g2": "non_preemptible"}},
    {"tasks": {"g1/0": "ready", "g1/1": "running"}},
    {"absent": ["/RP3", "/nope/x"]},
    {},
]


@pytest.mark.parametrize("expect", HOLDING, ids=lambda e: ",".join(e) or "nothing")
def test_expectations_that_hold(expect: dict[str, Any]) -> None:
    assert _check(**expect) == []


FAILING: list[tuple[dict[str, Any], list[str]]] = [
    (
        {"entitlement": {"/RP2": {"cpu": 33.33}}},
        ["step at=60: entitlement /RP2 cpu: expected 33.33, observed 45.0"],
    ),
    (
        {"entitlement": {"/RP1": {"cpu": 33.32}}},
        ["step at=60: entitlement /RP1 cpu: expected 33.32, observed 33.33"],
    ),
    (
        {"entitlement": {"/RP1": {"memory": 5}}},
        ["step at=60: entitlement /RP1 memory: expected 5.0, observed 0.0"],
    ),
    (
        {"entitlement": {"/RP7": {"cpu": 1}}},
        ["step at=60: entitlement /RP7: expected a pool, observed no such pool"],
    ),
    (
        {"non_slack_entitlement": {"/RP2": {"cpu": 40}}},
        ["step at=60: non_slack_entitlement /RP2 cpu: expected 40.0, observed 45.0"],
    ),
    (
        {"slack_entitlement": {"/RP2": {"cpu": 0}}},
        ["step at=60: slack_entitlement /RP2 cpu: expected 0.0, observed 2.0"],
    ),
    (
        {"allocation": {"/RP1": {"cpu": 45}}},
        ["step at=60: allocation /RP1 cpu: expected 45.0, observed 33.0"],
    ),
    (
        {"slack_allocation": {"/RP2": {"cpu": 0}}},
        ["step at=60: slack_allocation /RP2 cpu: expected 0.0, observed 1.0"],
    ),
    ({"demand": {"/RP1": {"cpu": 0}}}, ["step at=60: demand /RP1 cpu: expected 0.0, observed 17.0"]),
    (
        {"slack_demand": {"/RP2": {"cpu": 0}}},
        ["step at=60: slack_demand /RP2 cpu: expected 0.0, observed 3.0"],
    ),
    (
        {"gangs": {"g1": "done", "zz": "pending"}},
        [
            "step at=60: gangs g1: expected done, observed admitted",
            "step at=60: gangs zz: expected pending, observed no such gang",
        ],
    ),
    ({"admitted": ["g1", "g2"]}, ["step at=60: admitted g2: expected admitted, observed pending"]),
    ({"pending": ["g3"]}, ["step at=60: pending g3: expected pending, observed waiting"]),
    (
        {"admitted_order": ["g5", "g1"]},
        [
            "step at=60: admitted_order: expected [g5, g1], observed [g1, g5] "
            "(first difference at position 0: expected g5, observed g1)"
        ],
    ),
    (
        {"admitted_order": ["g1"]},
        [
            "step at=60: admitted_order: expected [g1], observed [g1, g5] "
            "(first difference at position 1: expected nothing more, observed g5)"
        ],
    ),
    ({"preempted": []}, ["step at=60: preempted: expected [], observed [b/0, b/1] (unexpected: b/0, b/1)"]),
    (
        {"preempted": ["b/0", "c/0"]},
        ["step at=60: preempted: expected [b/0, c/0], observed [b/0, b/1] (missing: c/0; unexpected: b/1)"],
    ),
    ({"preempted_count": {"/RP2": 12}}, ["step at=60: preempted_count /RP2: expected 12, observed 2"]),
    ({"preempted_count": {"/RP1": 1}}, ["step at=60: preempted_count /RP1: expected 1, observed 0"]),
    ({"rejected": ["/RP9"]}, ["step at=60: rejected: expected [/RP9], observed [/RP9, g9] (unexpected: g9)"]),
    (
        {"rejected": ["/RP9", "g9", "/X"]},
        ["step at=60: rejected: expected [/RP9, g9, /X], observed [/RP9, g9] (missing: /X)"],
    ),
    ({"timed_out": []}, ["step at=60: timed_out: expected [], observed [g4] (unexpected: g4)"]),
    (
        {"requeued": ["g1"]},
        ["step at=60: requeued: expected [g1], observed [g6] (missing: g1; unexpected: g6)"],
    ),
    (
        {"queues": {"g2": "controller"}},
        ["step at=60: queues g2: expected controller, observed non_preemptible"],
    ),
    (
        {"queues": {"g1": "pending"}},
        ["step at=60: queues g1: expected pending in queue pending, observed admitted"],
    ),
    (
        {"queues": {"zz": "pending"}},
        ["step at=60: queues zz: expected pending in queue pending, observed no such gang"],
    ),
    (
        {"tasks": {"g1/0": "running", "g9/0": "ready"}},
        [
            "step at=60: tasks g1/0: expected running, observed ready",
            "step at=60: tasks g9/0: expected ready, observed no such task",
        ],
    ),
    ({"absent": ["/RP1", "/RP3"]}, ["step at=60: absent /RP1: expected no such pool, observed it exists"]),
]


@pytest.mark.parametrize(
    ("expect", "failures"), FAILING, ids=lambda v: ",".join(v) if isinstance(v, dict) else ""
)
def test_expectations_that_fail(expect: dict[str, Any], failures: list[str]) -> None:
    assert _check(**expect) == failures


def test_failures_come_in_table_order_and_none_expect_checks_nothing() -> None:
    failures = _check(absent=["/RP1"], entitlement={"/RP2": {"cpu": 1}}, gangs={"g1": "done"})
    assert [f.split(": ")[1].split(" ")[0] for f in failures] == ["entitlement", "gangs", "absent"]
    assert check(None, STEP) == []


def test_the_step_time_prints_as_given() -> None:
    step = StepReport(at=2.5)
    assert check(Expectations(absent=[]), step) == []
    assert check(Expectations(gangs={"g": "done"}), step) == [
        "step at=2.5: gangs g: expected done, observed no such gang"
    ]


def test_several_trees_name_pools_tree_colon_path() -> None:
    step = StepReport.model_validate(
        {
            "at": 0,
            "pools": {"batch:/a": _pool(entitlement={"cpu": 5}), "gpu:/g": _pool(), "gpu:/a": _pool()},
            "decisions": [{"kind": "preempt", "task": "t/0", "pool": "gpu:/g"}],
        }
    )
    assert check(Expectations(entitlement={"batch:/a": {"cpu": 5}}), step) == []
    assert check(Expectations(entitlement={"/g": {"cpu": 0}}), step) == []  # a path one tree has
    assert check(Expectations(preempted_count={"gpu:/g": 1, "/g": 1}), step) == []
    assert check(Expectations(entitlement={"/a": {"cpu": 5}}), step) == [
        "step at=0: entitlement /a: expected a pool, observed no such pool"
    ]  # two trees have /a


def test_a_rejection_must_carry_a_reason() -> None:
    step = StepReport.model_validate(
        {
            "at": 1,
            "decisions": [
                {"kind": "rejected", "ref": "/a", "reason": " "},
                {"kind": "rejected", "ref": "/b", "reason": "bad"},
            ],
        }
    )
    assert check(Expectations(rejected=["/a", "/b"]), step) == [
        "step at=1: rejected /a: expected a reason, observed none"
    ]
