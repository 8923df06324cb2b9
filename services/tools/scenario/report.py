"""The JSON report of `poolwise scenario run` (SCENARIOS.md, "The JSON report"): a stable
contract that outside suites read. One document per scenario file, on one line.

The runner fills a `StepReport` per step from the system's state and decisions, then
`expect.check` fills its `failures`; `ScenarioReport.build` sets `passed`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, TextIO

from pydantic import BaseModel, ConfigDict, field_serializer, model_serializer

from events import (
    Event,
    GangAdmitted,
    GangFinished,
    GangMovedToQueue,
    GangRequeued,
    GangTimedOut,
    InputRejected,
    PreemptionRequested,
    TaskState,
)

GangState = Literal["waiting", "pending", "admitted", "done", "timed_out", "rejected", "cancelled"]
QueueName = Literal["pending", "controller", "non_preemptible", "revocable"]

# Decision kinds the expectations look at (more kinds may appear in reports).
ADMITTED = "admitted"
PREEMPT = "preempt"
REJECTED = "rejected"
TIMED_OUT = "timed_out"
REQUEUED = "requeued"
MOVED = "moved"
FINISHED = "finished"

# The resource maps of a pool in the report, in report order; the first seven can be expected.
EXPECTABLE_MAPS: tuple[str, ...] = (
    "entitlement",
    "non_slack_entitlement",
    "slack_entitlement",
    "allocation",
    "slack_allocation",
    "demand",
    "slack_demand",
)
RESOURCE_MAPS: tuple[str, ...] = (*EXPECTABLE_MAPS, "reservation", "limit")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PoolReport(_Model):
    """One pool after a step: each map lists every kind in play (see `resource_map`)."""

    entitlement: dict[str, float]
    non_slack_entitlement: dict[str, float]
    slack_entitlement: dict[str, float]
    allocation: dict[str, float]
    slack_allocation: dict[str, float]
    demand: dict[str, float]
    slack_demand: dict[str, float]
    reservation: dict[str, float]
    limit: dict[str, float]

    def get(self, name: str) -> dict[str, float]:
        """The map named `name` (one of RESOURCE_MAPS)."""
        if name not in RESOURCE_MAPS:
            raise KeyError(name)
        value: dict[str, float] = getattr(self, name)
        return value


class GangReport(_Model):
    state: GangState
    pool: str | None = None
    queue: QueueName | None = None


class TaskReport(_Model):
    state: TaskState


class DecisionReport(_Model):
    """One decision of the step. `gang`, `task` or `ref` names what it is about; absent fields
    are left out of the JSON."""

    kind: str
    gang: str | None = None
    task: str | None = None
    ref: str | None = None
    pool: str | None = None
    reason: str | None = None

    @model_serializer(mode="wrap")
    def _drop_none(self, handler: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
        return {k: v for k, v in handler(self).items() if v is not None}


class StepReport(_Model):
    at: float
    pools: dict[str, PoolReport] = {}
    gangs: dict[str, GangReport] = {}
    tasks: dict[str, TaskReport] = {}
    decisions: list[DecisionReport] = []
    failures: list[str] = []

    @field_serializer("at")
    def _at(self, at: float) -> int | float:
        return int(at) if float(at).is_integer() else at

    def with_failures(self, failures: list[str]) -> StepReport:
        return self.model_copy(update={"failures": list(failures)})


class ScenarioReport(_Model):
    name: str
    passed: bool
    steps: list[StepReport]

    @classmethod
    def build(cls, name: str, steps: Iterable[StepReport]) -> ScenarioReport:
        """The report of a run; `passed` when no step has a failure."""
        steps = list(steps)
        return cls(name=name, passed=not any(s.failures for s in steps), steps=steps)

    def to_json(self) -> str:
        """The report as one line of JSON (what `--json` prints per file)."""
        return self.model_dump_json()

    @classmethod
    def from_json(cls, text: str | bytes) -> ScenarioReport:
        return cls.model_validate_json(text)


def pool_key(tree: str, path: str, multi_tree: bool) -> str:
    """How the report names a pool: its path, or `tree:path` when the run has several trees."""
    return f"{tree}:{path}" if multi_tree else path


def resource_map(values: Mapping[str, float], kinds: Iterable[str]) -> dict[str, float]:
    """`values` listing every kind in play (0.0 for the missing ones), then any other kind it has."""
    out = {kind: float(values.get(kind, 0.0)) for kind in kinds}
    for kind, amount in values.items():
        out.setdefault(kind, float(amount))
    return out


def format_at(at: float) -> str:
    return str(int(at)) if float(at).is_integer() else str(at)


def decisions_of(event: Event, key: Callable[[str | None, str], str] | None = None) -> list[DecisionReport]:
    """The report entries for one decision event, in order (`key(tree, path)` names pools;
    by default the path). Events that are not decisions of interest give none."""
    name: Callable[[str | None, str], str] = key or (lambda _tree, path: path)
    if isinstance(event, GangAdmitted):
        return [DecisionReport(kind=ADMITTED, gang=event.gang, pool=name(event.tree, event.pool))]
    if isinstance(event, PreemptionRequested):
        pool = name(event.tree, event.pool)
        return [DecisionReport(kind=PREEMPT, task=t, pool=pool, reason=event.reason)
                for t in event.tasks]
    if isinstance(event, InputRejected):
        return [DecisionReport(kind=REJECTED, ref=event.ref, reason=event.reason)]
    if isinstance(event, GangTimedOut):
        return [DecisionReport(kind=TIMED_OUT, gang=event.gang, pool=name(event.tree, event.pool),
                               reason=f"{event.members} of {event.size} members at the deadline")]
    if isinstance(event, GangRequeued):
        return [DecisionReport(kind=REQUEUED, gang=event.gang, pool=name(event.tree, event.pool),
                               reason=event.reason)]
    if isinstance(event, GangMovedToQueue):
        return [DecisionReport(kind=MOVED, gang=event.gang, pool=name(event.tree, event.pool),
                               reason=f"to queue {event.queue}: {event.reason}")]
    if isinstance(event, GangFinished):
        return [DecisionReport(kind=FINISHED, gang=event.gang, pool=name(event.tree, event.pool),
                               reason=event.outcome)]
    return []


# --- the readable report ----------------------------------------------------------------------


def render_text(report: ScenarioReport) -> str:
    """The report for people: one line per step, each failed expectation under its step, and a
    summary line. Plain text (no colour, no markup)."""
    return "\n".join(line for line, _style in _lines(report)) + "\n"


def render_summary(reports: Iterable[ScenarioReport]) -> str:
    """One line over several files: `3 scenarios: 2 passed, 1 failed`."""
    reports = list(reports)
    failed = sum(1 for r in reports if not r.passed)
    noun = "scenario" if len(reports) == 1 else "scenarios"
    return f"{len(reports)} {noun}: {len(reports) - failed} passed, {failed} failed"


def print_text(reports: Iterable[ScenarioReport], file: TextIO | None = None) -> None:
    """Print `render_text` of each report (and a summary when there are several), in colour on a
    terminal and as plain text anywhere else (rich decides by `file.isatty()`, NO_COLOR...)."""
    from rich.console import Console
    from rich.text import Text

    console = Console(file=file or sys.stdout, highlight=False, markup=False, emoji=False, soft_wrap=True)
    reports = list(reports)
    for report in reports:
        for line, style in _lines(report):
            console.print(Text(line, style=style or ""))
    if len(reports) > 1:
        console.print(Text(render_summary(reports), style="bold"))


def _lines(report: ScenarioReport) -> list[tuple[str, str | None]]:
    lines: list[tuple[str, str | None]] = [(f"scenario {report.name}", "bold")]
    for step in report.steps:
        at = format_at(step.at)
        if not step.failures:
            lines.append((f"  step at={at}: ok", "green"))
            continue
        count = len(step.failures)
        lines.append((f"  step at={at}: {count} failed expectation{'s' if count > 1 else ''}", "red"))
        prefix = f"step at={at}: "
        lines += [(f"    {failure.removeprefix(prefix)}", "red") for failure in step.failures]
    failures = sum(len(s.failures) for s in report.steps)
    failed_steps = sum(1 for s in report.steps if s.failures)
    steps = len(report.steps)
    if report.passed:
        plural = "s" if steps != 1 else ""
        lines.append((f"PASSED {report.name}: {steps} step{plural}, every expectation holds", "bold green"))
    else:
        lines.append((f"FAILED {report.name}: {failures} failed expectation{'s' if failures != 1 else ''} "
                      f"in {failed_steps} of {steps} step{'s' if steps != 1 else ''}", "bold red"))
    return lines
