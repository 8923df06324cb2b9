"""A step's report of admission's state (docs/scenarios.md: its pools, gangs and tasks, with the
step's expectations checked), and the tasks as the step's selectors see them. `scenario run`
reports the state it reads back from the log, the what-if's steps (`poolwise whatif` with
`steps`: services/tools/cli/whatif_steps.py) the state they run on: the same report either way."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from services.admission.domain.model import TERMINAL, Gang
from services.admission.domain.state import AdmissionState
from services.admission.domain.views import pool_numbers
from services.tools.scenario.expect import check
from services.tools.scenario.inputs import StepPlan
from services.tools.scenario.report import DecisionReport, GangReport, PoolReport, StepReport, TaskReport, resource_map

PoolKey = Callable[[str | None, str], str]  # (tree, path) -> the pool's key in the report (`Scenario.pool_key`)


@dataclass(frozen=True, slots=True)
class StateTask:
    """A task as a selector sees it (`inputs.TaskView`); `requested`: preemption asked for it and
    it has not ended (what `ack_preemptions` answers)."""

    tree: str
    gang: str
    task: str
    pool: str
    state: str
    requested: bool


def step_report(plan: StepPlan, state: AdmissionState, key: PoolKey,
                decisions: Sequence[DecisionReport]) -> StepReport:
    """The report of the step `plan` on `state` (after it), its expectations checked."""
    report = StepReport(at=plan.at, pools=pool_reports(state, key), gangs=gang_reports(state, key),
                        tasks=task_reports(state), decisions=list(decisions))
    return report.with_failures(check(plan.expect, report))


def all_gangs(state: AdmissionState) -> list[Gang]:
    """Every gang the state holds, tree after tree, each tree's in the order they came."""
    return [g for rt in state.trees.values() for g in rt.gangs.values()]


def state_tasks(state: AdmissionState) -> list[StateTask]:
    """Every task the state holds, gang after gang (`all_gangs`), as selectors see them."""
    return [StateTask(g.tree, g.id, t.id, g.pool, t.state, t.preemption_requested and t.state not in TERMINAL)
            for g in all_gangs(state) for t in g.tasks]


def gang_reports(state: AdmissionState, key: PoolKey) -> dict[str, GangReport]:
    return {g.id: GangReport(state=g.state, pool=key(g.tree, g.pool), queue=g.queue if g.state == "pending" else None)
            for g in all_gangs(state)}


def task_reports(state: AdmissionState) -> dict[str, TaskReport]:
    return {t.id: TaskReport(state=t.state) for g in all_gangs(state) for t in g.tasks}


def pool_reports(state: AdmissionState, key: PoolKey) -> dict[str, PoolReport]:
    """Each pool's numbers, every map with every kind of its tree (`resource_map`)."""
    out: dict[str, PoolReport] = {}
    for tree in state.config.tree_names():
        kinds = state.config.tree(tree).kinds
        for path, numbers in pool_numbers(state, tree).items():
            out[key(tree, path)] = PoolReport(**{k: resource_map(v, kinds) for k, v in numbers.items()})
    return out
