"""Checking a step's `expect` against its report (SCENARIOS.md, "Expectations").

`check` returns one readable string per expectation that does not hold, e.g.
`step at=60: entitlement /RP2 cpu: expected 33.33, observed 45.0`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TypeVar

from services.tools.scenario.format import Expectations
from services.tools.scenario.report import (
    ADMITTED,
    EXPECTABLE_MAPS,
    PREEMPT,
    REJECTED,
    REQUEUED,
    TIMED_OUT,
    StepReport,
    format_at,
)

TOLERANCE = 0.01
_EPSILON = 1e-9  # so that 33.34 vs 33.33 (0.01000000000000156 apart) still holds

V = TypeVar("V")


def check(expect: Expectations | None, step: StepReport) -> list[str]:
    """Every expectation of `expect` that `step` does not meet, as `step at=<at>: ...` strings."""
    if expect is None:
        return []
    prefix = f"step at={format_at(step.at)}: "
    return [prefix + failure for failure in _failures(expect, step)]


def _failures(e: Expectations, step: StepReport) -> list[str]:
    out: list[str] = []
    for name in EXPECTABLE_MAPS:
        expected: dict[str, dict[str, float]] | None = getattr(e, name)
        if expected is not None:
            out += _resource_map(name, expected, step)
    if e.gangs is not None:
        out += _states("gangs", e.gangs, {g: r.state for g, r in step.gangs.items()}, "no such gang")
    if e.admitted is not None:
        out += _states("admitted", dict.fromkeys(e.admitted, "admitted"),
                       {g: r.state for g, r in step.gangs.items()}, "no such gang")
    if e.pending is not None:
        out += _states("pending", dict.fromkeys(e.pending, "pending"),
                       {g: r.state for g, r in step.gangs.items()}, "no such gang")
    if e.admitted_order is not None:
        out += _order("admitted_order", e.admitted_order, _named(step, ADMITTED, "gang"))
    if e.preempted is not None:
        out += _exactly("preempted", e.preempted, _named(step, PREEMPT, "task"))
    if e.preempted_count is not None:
        out += _preempted_count(e.preempted_count, step)
    if e.rejected is not None:
        out += _rejected(e.rejected, step)
    if e.timed_out is not None:
        out += _exactly("timed_out", e.timed_out, _named(step, TIMED_OUT, "gang"))
    if e.requeued is not None:
        out += _exactly("requeued", e.requeued, _named(step, REQUEUED, "gang"))
    if e.queues is not None:
        out += _queues(e.queues, step)
    if e.tasks is not None:
        out += _states("tasks", e.tasks, {t: r.state for t, r in step.tasks.items()}, "no such task")
    if e.absent is not None:
        out += [f"absent {pool}: expected no such pool, observed it exists"
                for pool in e.absent if _find_pool(step.pools, pool) is not None]
    return out


# --- state at the end of the step -------------------------------------------------------------


def _resource_map(name: str, expected: Mapping[str, Mapping[str, float]], step: StepReport) -> list[str]:
    out: list[str] = []
    for pool, kinds in expected.items():
        report = _find_pool(step.pools, pool)
        if report is None:
            out.append(f"{name} {pool}: expected a pool, observed no such pool")
            continue
        observed = report.get(name)
        for kind, value in kinds.items():
            got = observed.get(kind, 0.0)
            if abs(got - value) > TOLERANCE + _EPSILON:
                out.append(f"{name} {pool} {kind}: expected {_num(value)}, observed {_num(got)}")
    return out


def _states(key: str, expected: Mapping[str, str], observed: Mapping[str, str], missing: str) -> list[str]:
    out: list[str] = []
    for name, state in expected.items():
        got = observed.get(name)
        if got != state:
            out.append(f"{key} {name}: expected {state}, observed {got if got is not None else missing}")
    return out


def _queues(expected: Mapping[str, str], step: StepReport) -> list[str]:
    out: list[str] = []
    for gang, queue in expected.items():
        report = step.gangs.get(gang)
        if report is None:
            out.append(f"queues {gang}: expected pending in queue {queue}, observed no such gang")
        elif report.state != "pending":
            out.append(f"queues {gang}: expected pending in queue {queue}, observed {report.state}")
        elif report.queue != queue:
            out.append(f"queues {gang}: expected {queue}, observed {report.queue or 'no queue'}")
    return out


def _find_pool(pools: Mapping[str, V], key: str) -> V | None:
    """A pool by its report key; a bare path also finds `tree:path` when only one tree has it."""
    if key in pools:
        return pools[key]
    if key.startswith("/"):
        matches = [v for k, v in pools.items() if k.endswith(":" + key)]
        if len(matches) == 1:
            return matches[0]
    return None


def _same_pool(report_pool: str | None, key: str) -> bool:
    if report_pool is None:
        return False
    return report_pool == key or (key.startswith("/") and report_pool.endswith(":" + key))


# --- decisions of the step --------------------------------------------------------------------


def _named(step: StepReport, kind: str, attr: str) -> list[str]:
    names: list[str] = []
    for d in step.decisions:
        value = getattr(d, attr) if d.kind == kind else None
        if value is not None:
            names.append(value)
    return names


def _order(key: str, expected: list[str], observed: list[str]) -> list[str]:
    if expected == observed:
        return []
    position = next((i for i, (a, b) in enumerate(zip(expected, observed, strict=False)) if a != b),
                    min(len(expected), len(observed)))
    want = expected[position] if position < len(expected) else "nothing more"
    got = observed[position] if position < len(observed) else "nothing more"
    return [f"{key}: expected {_list(expected)}, observed {_list(observed)} "
            f"(first difference at position {position}: expected {want}, observed {got})"]


def _exactly(key: str, expected: list[str], observed: list[str]) -> list[str]:
    want, got = set(expected), set(observed)
    if want == got:
        return []
    details = []
    if want - got:
        details.append(f"missing: {', '.join(n for n in dict.fromkeys(expected) if n not in got)}")
    if got - want:
        details.append(f"unexpected: {', '.join(n for n in dict.fromkeys(observed) if n not in want)}")
    return [f"{key}: expected {_list(expected)}, observed {_list(list(dict.fromkeys(observed)))} "
            f"({'; '.join(details)})"]


def _preempted_count(expected: Mapping[str, int], step: StepReport) -> list[str]:
    out: list[str] = []
    for pool, count in expected.items():
        got = sum(1 for d in step.decisions if d.kind == PREEMPT and _same_pool(d.pool, pool))
        if got != count:
            out.append(f"preempted_count {pool}: expected {count}, observed {got}")
    return out


def _rejected(expected: list[str], step: StepReport) -> list[str]:
    decisions = [d for d in step.decisions if d.kind == REJECTED and d.ref is not None]
    out = _exactly("rejected", expected, [d.ref for d in decisions if d.ref is not None])
    wanted = set(expected)
    out += [f"rejected {d.ref}: expected a reason, observed none"
            for d in decisions if d.ref in wanted and not (d.reason or "").strip()]
    return out


# --- formatting -------------------------------------------------------------------------------


def _num(value: float) -> str:
    return str(round(float(value), 2) + 0.0)  # no "-0.0"


def _list(names: Iterable[str]) -> str:
    return "[" + ", ".join(names) + "]"
