"""A scenario's `steps` run on a copy of the live state, in this process (`poolwise whatif -f FILE`
with steps; issue 21): the services' own code, nothing appended.

Each step at `at` seconds after the fold's time (the log's time now), as `scenario run` runs it
(docs/scenarios.md, "How a run goes"), but on the state rather than through a log:

1. its inputs, each as the service that takes it would: a command (`pool`, `host`, ...) is
   decided by the tree service's `decide` on the state's configuration and its events folded,
   or reported `rejected` with its rule; gang and task inputs are folded by admission's folder
   (`AdmissionFolder.step`: what it refuses is reported `rejected`); task selectors and
   `ack_preemptions` are resolved against the state first, as the runner resolves them;
2. a tick at `at`: admission's cycles (`run_cycles`, in the folder's step), then a preemption
   pass in each tree cycled (`preemption_pass`, with a memory of the passes before: a pool
   over its entitlement gives back once `grace` has passed since it went over), its requests
   folded;
3. the step's report (the `scenario run` report's shape: pools, gangs, tasks, decisions) and
   its expectations checked with the runner's own `expect.check`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from events import ClockTicked, CycleCompleted, Envelope, Event, at_seconds, derived_id
from services.admission.domain.state import AdmissionState
from services.scenario.format import Scenario
from services.scenario.report import DecisionReport, ScenarioReport, StepReport


@dataclass(frozen=True, slots=True)
class _Task:
    """A task as a selector sees it; `requested`: preemption asked for it and it has not ended."""

    tree: str
    gang: str
    task: str
    pool: str
    state: str
    requested: bool


class StepRun:
    """The steps of `scenario` on `state` (changed as they run: give a copy)."""

    def __init__(self, state: AdmissionState, scenario: Scenario) -> None:
        from services.admission.folder import AdmissionFolder
        from services.preemption.domain.model import TreeMemory

        self.state = state
        self.folder = AdmissionFolder(state)
        self.scenario = scenario
        self.base = state.now
        self.memory: dict[str, TreeMemory] = {}

    def run(self) -> ScenarioReport:
        from services.scenario.inputs import Expander

        expander = Expander(self.scenario, run="whatif")
        return ScenarioReport.build(self.scenario.name, [self.step(plan) for plan in expander.plans()])

    def step(self, plan: Any) -> StepReport:
        from services.scenario.expect import check
        from services.scenario.report import decisions_of

        time = self.base + plan.at
        decided: list[Event | DecisionReport] = []
        for item in plan.inputs:
            decided += self._input(item.id, item.body, time)
        made = self._fold(derived_id("whatif", "tick", plan.index), [ClockTicked()], time, "whatif:clock")
        decided += made
        for tree in sorted({e.tree for e in made if isinstance(e, CycleCompleted)}):
            decided += self._pass(tree)
        reports: list[DecisionReport] = []
        for found in decided:
            reports += [found] if isinstance(found, DecisionReport) else decisions_of(found, self._key)
        report = StepReport(at=plan.at, pools=self._pools(), gangs=self._gangs(), tasks=self._tasks_report(),
                            decisions=reports)
        return report.with_failures(check(plan.expect, report))

    # --- inputs ------------------------------------------------------------------------------------

    def _input(self, ident: str, body: Any, time: float) -> list[Event | DecisionReport]:
        from pydantic import ValidationError

        from events.commands import HostAdd, HostRemove, PoolDelete, PoolUpsert, TreeConfigure
        from services.scenario.inputs import AckPreemptions, EnqueueInput, TaskSelector
        from services.scenario.runner import can_move

        if isinstance(body, PoolUpsert | PoolDelete | HostAdd | HostRemove | TreeConfigure):
            return self._command(ident, body, time)
        if isinstance(body, EnqueueInput):
            try:
                events: list[Event] = [body.event()]
            except ValidationError as exc:
                return [DecisionReport(kind="rejected", ref=ident, reason=f"not a valid GangEnqueued: "
                                                                          f"{exc.errors()[0]['msg']}")]
        elif isinstance(body, TaskSelector):
            events = list(body.resolve(self._tasks(), can_move))
        elif isinstance(body, AckPreemptions):
            events = list(body.resolve(t for t in self._tasks() if t.requested))
        else:
            events = [body]
        return list(self._fold(ident, events, time, "scenario"))

    def _command(self, ident: str, command: Any, time: float) -> list[Event | DecisionReport]:
        from services.tree.domain.decide import Accepted, decide

        decision = decide(self.state.config, command)
        if not isinstance(decision, Accepted):
            return [DecisionReport(kind="rejected", ref=decision.ref, reason=f"{decision.message} [{decision.rule}]")]
        return list(self._fold(ident, list(decision.events), time, "tree"))

    def _fold(self, ident: str, events: Iterable[Event], time: float, source: str) -> list[Event]:
        """Each event in a message of its own, folded by admission's folder: what it decides."""
        out: list[Event] = []
        for n, event in enumerate(events):
            envelope = Envelope(id=derived_id(ident, n), time=at_seconds(max(time, self.state.now)), source=source,
                                event=event)
            out += [d.event for d in self.folder.step(envelope, self.state.last_seq + 1)]
        return out

    def _pass(self, tree: str) -> list[Event | DecisionReport]:
        from services.preemption.domain.model import TreeMemory
        from services.preemption.domain.passes import preemption_pass

        state = self.state
        result = preemption_pass(state, tree, state.now, self.memory.setdefault(tree, TreeMemory()))
        out: list[Event | DecisionReport] = []
        for preemption in result.preemptions:
            out.append(preemption.event)
            out += [o.event for o in state.apply(preemption.event, state.last_seq + 1, state.now)]
        return out

    # --- the report ----------------------------------------------------------------------------------

    def _key(self, tree: str | None, path: str) -> str:
        return self.scenario.pool_key(tree, path)

    def _gang_list(self) -> list[Any]:
        return [g for rt in self.state.trees.values() for g in rt.gangs.values()]

    def _tasks(self) -> list[Any]:
        from services.admission.domain.model import TERMINAL

        return [_Task(g.tree, g.id, t.id, g.pool, t.state, t.preemption_requested and t.state not in TERMINAL)
                for g in self._gang_list() for t in g.tasks]

    def _gangs(self) -> dict[str, Any]:
        from services.scenario.report import GangReport

        return {g.id: GangReport(state=g.state, pool=self._key(g.tree, g.pool),
                                 queue=g.queue if g.state == "pending" else None) for g in self._gang_list()}

    def _tasks_report(self) -> dict[str, Any]:
        from services.scenario.report import TaskReport

        return {t.id: TaskReport(state=t.state) for g in self._gang_list() for t in g.tasks}

    def _pools(self) -> dict[str, Any]:
        from services.admission.domain.views import pool_numbers
        from services.scenario.report import PoolReport, resource_map

        out: dict[str, Any] = {}
        for tree in self.state.config.tree_names():
            kinds = self.state.config.tree(tree).kinds
            for path, numbers in pool_numbers(self.state, tree).items():
                out[self._key(tree, path)] = PoolReport(**{k: resource_map(v, kinds) for k, v in numbers.items()})
        return out
