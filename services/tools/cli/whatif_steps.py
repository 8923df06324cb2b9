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
   its expectations checked with the runner's own `expect.check`, built by the runner's own
   `state_report.step_report`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from events import ClockTicked, CycleCompleted, Envelope, Event, at_seconds, derived_id
from services.admission.domain.state import AdmissionState
from services.tools.scenario.format import Scenario
from services.tools.scenario.report import DecisionReport, ScenarioReport, StepReport
from services.tools.scenario.state_report import state_tasks, step_report


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
        from services.tools.scenario.inputs import Expander

        expander = Expander(self.scenario, run="whatif")
        return ScenarioReport.build(self.scenario.name, [self.step(plan) for plan in expander.plans()])

    def step(self, plan: Any) -> StepReport:
        from services.tools.scenario.report import decisions_of

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
        return step_report(plan, self.state, self._key, reports)

    # --- inputs ------------------------------------------------------------------------------------

    def _input(self, ident: str, body: Any, time: float) -> list[Event | DecisionReport]:
        from pydantic import ValidationError

        from events.commands import HostAdd, HostRemove, PoolDelete, PoolUpsert, TreeConfigure
        from services.tools.scenario.inputs import AckPreemptions, EnqueueInput, TaskSelector
        from services.tools.scenario.runner import can_move

        if isinstance(body, PoolUpsert | PoolDelete | HostAdd | HostRemove | TreeConfigure):
            return self._command(ident, body, time)
        if isinstance(body, EnqueueInput):
            try:
                events: list[Event] = [body.event()]
            except ValidationError as exc:
                return [DecisionReport(kind="rejected", ref=ident, reason=f"not a valid GangEnqueued: "
                                                                          f"{exc.errors()[0]['msg']}")]
        elif isinstance(body, TaskSelector):
            events = list(body.resolve(state_tasks(self.state), can_move))
        elif isinstance(body, AckPreemptions):
            events = list(body.resolve(t for t in state_tasks(self.state) if t.requested))
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
