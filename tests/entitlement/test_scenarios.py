"""Every entitlement number of the shared scenarios (`shared/scenarios/*.yaml`), reproduced from
direct inputs: what each pool holds and needs at the moment the step recomputes entitlement
(after the step's inputs, before its admission cycle). Gangs admitted earlier are allocation;
queued gangs are demand, those held back only by job limits included (DOMAIN §3).

`test_numbers_are_the_scenario_files` checks that the numbers below are the ones the files
expect, when the files are there (they live beside the repository, in `shared/`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from services.entitlement import JobDemand, LeafUsage, PoolInput, TreeInput, compute_entitlements
from tests.entitlement.helpers import check, leaf

SCENARIO_TOLERANCE = 0.01  # SCENARIOS.md: "each listed number matches within 0.01"
Expect = dict[str, dict[str, dict[str, float]]]  # field -> pool -> kind -> number


def _peloton(at: int) -> tuple[TreeInput, Expect]:
    # 100 cpu, RP1..3 reservation 20, limit 100, share 1.
    # at 0: a-0..9 (10 x 1 cpu), b-0..79, c-0..79 all queued: demands 10 / 80 / 80.
    # at 60: a, b-0..44, c-0..44 admitted at 0 (allocation 10 / 45 / 45), d-0..39 queued in RP1 (40),
    #        b-45..79 and c-45..79 still queued (35 each): requirements 50 / 80 / 80.
    by_step: dict[int, list[tuple[dict[str, float], dict[str, float]]]] = {
        0: [({}, {"cpu": 10}), ({}, {"cpu": 80}), ({}, {"cpu": 80})],
        60: [({"cpu": 10}, {"cpu": 40}), ({"cpu": 45}, {"cpu": 35}), ({"cpu": 45}, {"cpu": 35})],
    }
    usage = by_step[at]
    pools = tuple(
        leaf(f"/RP{i + 1}", reservation={"cpu": 20}, limit={"cpu": 100}, allocation=a, demand=d)
        for i, (a, d) in enumerate(usage)
    )
    wants: dict[int, dict[str, dict[str, float]]] = {
        0: {"/RP1": {"cpu": 10}, "/RP2": {"cpu": 45}, "/RP3": {"cpu": 45}},
        60: {"/RP1": {"cpu": 33.33}, "/RP2": {"cpu": 33.33}, "/RP3": {"cpu": 33.33}},
    }
    want = wants[at]
    return TreeInput(kinds=("cpu",), capacity={"cpu": 100}, pools=pools, policy="per_resource"), {"entitlement": want}


def _yt(at: int) -> tuple[TreeInput, Expect]:
    # /project-root (reservation 100) with adhoc (80, weight 1), batch (0, weight 10, 4 running jobs),
    # backup (20, weight 1, 2 running jobs).
    # at 0: a1 (30), k1 (20), b1..b5 (5 each) all queued; b5 will wait for batch's 4-job limit but,
    #       held back only by a job limit, it is demand: adhoc 30, batch 25, backup 20.
    #       Reservations 30 + 0 + 20; batch water-filled to 25; the 25 left by weight 1:10:1.
    # at 10: b1 done; a1, k1, b2..b4 hold 30 / 15 / 20; b5 still queued (5): batch 20.
    # at 20: a2 (50) queued in adhoc: 30 + 50 = 80 = its reservation; batch (b2..b5, 20) gets nothing.
    steps: dict[int, tuple[dict[str, float], dict[str, float]]] = {
        0: ({"a": 0, "b": 0, "k": 0}, {"a": 30, "b": 25, "k": 20}),
        10: ({"a": 30, "b": 15, "k": 20}, {"a": 0, "b": 5, "k": 0}),
        20: ({"a": 30, "b": 20, "k": 20}, {"a": 50, "b": 0, "k": 0}),
    }
    alloc, demand = steps[at]
    pools = (
        leaf("/project-root", reservation={"cpu": 100}, limit={"cpu": 100}),
        leaf(
            "/project-root/adhoc",
            reservation={"cpu": 80},
            limit={"cpu": 100},
            share=1,
            allocation={"cpu": alloc["a"]},
            demand={"cpu": demand["a"]},
        ),
        leaf(
            "/project-root/batch",
            reservation={"cpu": 0},
            limit={"cpu": 100},
            share=10,
            allocation={"cpu": alloc["b"]},
            demand={"cpu": demand["b"]},
        ),
        leaf(
            "/project-root/backup",
            reservation={"cpu": 20},
            limit={"cpu": 100},
            share=1,
            allocation={"cpu": alloc["k"]},
            demand={"cpu": demand["k"]},
        ),
    )
    wants: dict[int, dict[str, dict[str, float]]] = {
        0: {
            "/project-root": {"cpu": 100},
            "/project-root/adhoc": {"cpu": 32.08},
            "/project-root/batch": {"cpu": 45.83},
            "/project-root/backup": {"cpu": 22.08},
        },
        10: {
            "/project-root/adhoc": {"cpu": 32.5},
            "/project-root/batch": {"cpu": 45},
            "/project-root/backup": {"cpu": 22.5},
        },
        20: {
            "/project-root/adhoc": {"cpu": 80},
            "/project-root/batch": {"cpu": 0},
            "/project-root/backup": {"cpu": 20},
        },
    }
    want = wants[at]
    return TreeInput(kinds=("cpu",), capacity={"cpu": 100}, pools=pools), {"entitlement": want}


def _revocable(at: int) -> tuple[TreeInput, Expect]:
    # h1: cpu 100, memory 1000, revocable cpu 45. /a and /b reserve (50, 500); /a limit (100, 600),
    # /b (100, 1000); slack_limit 20.
    # at 0: r-0..4 (revocable, 10 cpu / 20 memory each) queued: /a revocable demand (50, 100).
    #       slack cpu: all 45 to /a (it wants 50). Memory: /a requires min(20% of 500, 100) = 100,
    #       is entitled to 100 + 900 / 2 = 550; slack memory min(550 - 0, 100, 100) = 100.
    # at 10: r-0..3 hold (40, 80) revocable, r-4 still queued (10, 20); n (11 x (5, 50)) queued: (55, 550).
    #       cpu: 50 reserved + 5 by share + 45 left by share 1:1: 77.5 / 22.5.
    #       memory: /a requires min(600, 550 + min(100, 100)) = 600: 500 + 100; 400 left by share,
    #       /a capped at its limit 600 (not redistributed), /b 200.
    #       slack memory /a: min(600 - 550, 100, 100) = 50, non-slack 550; slack cpu still 45.
    steps: dict[int, tuple[dict[str, float], dict[str, float], dict[str, float]]] = {
        0: ({}, {}, {"cpu": 50, "memory": 100}),
        10: ({"cpu": 55, "memory": 550}, {"cpu": 40, "memory": 80}, {"cpu": 10, "memory": 20}),
    }
    demand, revocable_allocation, revocable_demand = steps[at]
    pools = (
        leaf(
            "/a",
            reservation={"cpu": 50, "memory": 500},
            limit={"cpu": 100, "memory": 600},
            slack_limit=20,
            demand=demand,
            revocable_allocation=revocable_allocation,
            revocable_demand=revocable_demand,
        ),
        leaf("/b", reservation={"cpu": 50, "memory": 500}, limit={"cpu": 100, "memory": 1000}),
    )
    wants: dict[int, Expect] = {
        0: {"slack_entitlement": {"/a": {"cpu": 45, "memory": 100}}},
        10: {
            "entitlement": {"/a": {"cpu": 77.5, "memory": 600}, "/b": {"cpu": 22.5, "memory": 200}},
            "non_slack_entitlement": {"/a": {"cpu": 77.5, "memory": 550}},
            "slack_entitlement": {"/a": {"cpu": 45, "memory": 50}},
        },
    }
    want = wants[at]
    tree = TreeInput(
        kinds=("cpu", "memory"), capacity={"cpu": 100, "memory": 1000}, revocable_capacity={"cpu": 45}, pools=pools
    )
    return tree, want


def _respool(at: int) -> tuple[TreeInput, Expect]:
    # /batch reserves (100, 1000, 1000, 10), limit (200, 2000, 2000, 20), slack_limit 30.
    # at 0: np-0..11, ctl-0..1, b-0..4 queued: 19 x (10, 100, 100, 1). Reserved 100; the rest up to
    # 190 by share; the last 10 to its only child /batch, capped at its limit 200.
    pools = (
        leaf(
            "/batch",
            reservation={"cpu": 100, "memory": 1000, "disk": 1000, "gpu": 10},
            limit={"cpu": 200, "memory": 2000, "disk": 2000, "gpu": 20},
            slack_limit=30,
            demand={"cpu": 190, "memory": 1900, "disk": 1900, "gpu": 19},
        ),
    )
    tree = TreeInput(
        kinds=("cpu", "memory", "disk", "gpu"),
        capacity={"cpu": 200, "memory": 2000, "disk": 2000, "gpu": 20},
        pools=pools,
    )
    return tree, {"entitlement": {"/batch": {"cpu": 200, "memory": 2000, "disk": 2000, "gpu": 20}}}


def _dominant(at: int) -> tuple[TreeInput, Expect]:
    # capacity (100 cpu, 1000 memory); /A reserves 60 cpu, /B 20 cpu (cpu alone: memory implied in
    # proportion to the capacity, 60% and 20%); /X, /Y nothing.
    # at 0: job a (10 gangs of (10, 100)) queued in /A, job b alike in /B: both want everything.
    #       (0.6 + y) + (0.2 + y) = 1: y = 0.1: 70% and 30%.
    # at 10: /A and /B empty; job x (10 x (10, 200)) in /X, job y (10 x (20, 100)) in /Y:
    #       directions (0.5, 1) and (1, 0.5): 1.5 y = 1 in both kinds.
    by_step: dict[int, dict[str, tuple[JobDemand, ...]]] = {
        0: {
            "/A": (JobDemand("a", {"cpu": 100, "memory": 1000}),),
            "/B": (JobDemand("b", {"cpu": 100, "memory": 1000}),),
        },
        10: {
            "/X": (JobDemand("x", {"cpu": 100, "memory": 2000}),),
            "/Y": (JobDemand("y", {"cpu": 200, "memory": 1000}),),
        },
    }
    jobs = by_step[at]
    res: dict[str, dict[str, float]] = {"/A": {"cpu": 60.0}, "/B": {"cpu": 20.0}, "/X": {}, "/Y": {}}
    pools = tuple(PoolInput(path=p, reservation=r, usage=LeafUsage(jobs=jobs.get(p, ()))) for p, r in res.items())
    wants: dict[int, dict[str, dict[str, float]]] = {
        0: {"/A": {"cpu": 70, "memory": 700}, "/B": {"cpu": 30, "memory": 300}, "/X": {"cpu": 0, "memory": 0}},
        10: {"/X": {"cpu": 33.33, "memory": 666.67}, "/Y": {"cpu": 66.67, "memory": 333.33}, "/A": {"cpu": 0}},
    }
    want = wants[at]
    tree = TreeInput(kinds=("cpu", "memory"), capacity={"cpu": 100, "memory": 1000}, pools=pools, policy="dominant")
    return tree, {"entitlement": want}


STEPS: dict[tuple[str, int], Any] = {
    ("peloton-guide-sharing", 0): _peloton,
    ("peloton-guide-sharing", 60): _peloton,
    ("yt-project-pools", 0): _yt,
    ("yt-project-pools", 10): _yt,
    ("yt-project-pools", 20): _yt,
    ("revocable-slack", 0): _revocable,
    ("revocable-slack", 10): _revocable,
    ("respool-admission-queues", 0): _respool,
    ("dominant-fair-share", 0): _dominant,
    ("dominant-fair-share", 10): _dominant,
}
FIELDS = ("entitlement", "non_slack_entitlement", "slack_entitlement")


@pytest.mark.parametrize(("name", "at"), list(STEPS))
def test_scenario_step(name: str, at: int) -> None:
    tree, expect = STEPS[name, at](at)
    result = compute_entitlements(tree)
    for field, pools in expect.items():
        check(result, field, pools, tol=SCENARIO_TOLERANCE)


def test_yt_step_zero_exactly() -> None:
    # 25 left after reservations and batch's share: by weight 1:10:1.
    tree, _ = _yt(0)
    r = compute_entitlements(tree)
    check(
        r,
        "entitlement",
        {
            "/project-root/adhoc": {"cpu": 30 + 25 / 12},
            "/project-root/batch": {"cpu": 25 + 250 / 12},
            "/project-root/backup": {"cpu": 20 + 25 / 12},
        },
        tol=1e-9,
    )


SCENARIO_DIR = Path(__file__).resolve().parents[3] / "shared" / "scenarios"


@pytest.mark.skipif(not SCENARIO_DIR.is_dir(), reason="shared/scenarios is not beside the repository")
def test_numbers_are_the_scenario_files() -> None:
    seen: set[tuple[str, int]] = set()
    for file in sorted(SCENARIO_DIR.glob("*.yaml")):
        doc = yaml.safe_load(file.read_text())
        for step in doc.get("steps", []):
            expect = step.get("expect") or {}
            wanted = {f: expect[f] for f in FIELDS if f in expect}
            if not wanted:
                continue
            key = (doc["name"], int(step["at"]))
            assert key in STEPS, f"{file.name} at {key[1]}: entitlement expectations not reproduced here"
            _, mine = STEPS[key](key[1])
            for field, pools in wanted.items():
                for pool, kinds in pools.items():
                    for kind, value in kinds.items():
                        assert mine[field][pool][kind] == pytest.approx(float(value), abs=1e-9), (
                            file.name,
                            key,
                            field,
                            pool,
                            kind,
                        )
            seen.add(key)
    assert seen, "no scenario with entitlement expectations found"
