"""`poolwise scenario run`: drive the real services with a scenario and report what they decided.

Both buses run the one system: the tree, admission and preemption services, in this process, on
a log: `memory` (the in-memory twin of the log) or `nats` (JetStream on a private embedded
server). Per step (SCENARIOS.md):

    1. publish the step's inputs, stamped `at` (the first input whose time is later fires the
       timers due first, in every service's fold); task selectors and `ack_preemptions` are
       resolved against the state read back from the log so far;
    2. publish a clock tick at `at`: admission runs one cycle (entitlement, then admission) and
       closes it with `CycleCompleted`; preemption then runs one pass and closes it too;
    3. read the log back until preemption's `CycleCompleted` for that chain is there: the step
       has settled; build the step's report from the state folded from the log (the services'
       own decisions), and check the expectations.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio

from events import (
    ClockTicked,
    CycleCompleted,
    DecodeError,
    Envelope,
    Event,
    decode_all,
    derived_id,
    subjects,
)
from events.commands import HostAdd, HostRemove, PoolDelete, PoolUpsert, TreeConfigure
from services.admission.domain.model import RANK, TERMINAL
from services.admission.domain.state import trees_ticked
from services.admission.service import serve_admission
from services.common.log import EventLog
from services.preemption.domain.state import PreemptionState
from services.preemption.folder import PreemptionFolder
from services.preemption.service import serve_preemption
from services.tools.scenario.errors import ScenarioError
from services.tools.scenario.format import Scenario
from services.tools.scenario.inputs import AckPreemptions, EnqueueInput, Expander, StepInput, StepPlan, TaskSelector
from services.tools.scenario.report import ScenarioReport, StepReport, decisions_of
from services.tools.scenario.state_report import state_tasks, step_report
from services.tree.service import TreeService, serve_tree

SETTLE_TIMEOUT = 30.0


class ScenarioRunError(Exception):
    """The system did not settle, or a service failed: the run cannot say pass or fail."""


def can_move(current: str, new: str) -> bool:
    """The task state machine (DOMAIN §5): forward only, from `ready` on, never out of a terminal state."""
    if current in TERMINAL or current == "pending" or current == new:
        return False
    if new in TERMINAL:
        return True
    return new in RANK and RANK[new] > RANK[current]


class Run:
    """One scenario on one log, with the services running in the caller's task group."""

    def __init__(self, scenario: Scenario, log: EventLog, tree: TreeService, run_id: str) -> None:
        self.scenario = scenario
        self.log = log
        self.tree = tree
        self.view = PreemptionState()
        self.reader = PreemptionFolder(self.view)  # admission's fold as read from the log (cycles at their triggers)
        self.read_to = 0
        self.seen: list[tuple[int, Envelope]] = []  # everything read back during the current step
        self.run_id = run_id
        self.multi = scenario.multi_tree

    # --- reading back ---------------------------------------------------------------------

    async def catch_up(self) -> list[tuple[int, Envelope]]:
        batch = await self.log.read(self.read_to + 1)
        read: list[tuple[int, Envelope]] = []
        for stored in batch:
            self.read_to = stored.seq
            try:
                envelopes = decode_all(stored.data)  # one event, or a pack of decisions
            except DecodeError:
                continue
            end = len(envelopes) - 1
            for part, envelope in enumerate(envelopes):
                self.reader.step(envelope, stored.seq, part, part == end)
                read.append((stored.seq, envelope))
        self.seen.extend(read)
        return read

    async def settle(self, tick_seq: int) -> list[tuple[int, Envelope]]:
        """Read until, for every tree, preemption closed the pass that follows our tick's cycle."""
        done: set[str] = set()
        read: list[tuple[int, Envelope]] = []
        with anyio.fail_after(SETTLE_TIMEOUT):
            while True:
                for seq, envelope in await self.catch_up():
                    read.append((seq, envelope))
                    event = envelope.event
                    # the pass after our tick's cycle is based on the cycle's trigger, our tick
                    if (isinstance(event, CycleCompleted) and event.service == "preemption"
                            and event.trigger_seq == tick_seq):
                        done.add(event.tree)
                # the trees our tick (naming none) cycles, as the fold has them once it read the tick
                if self.read_to >= tick_seq and done >= set(trees_ticked(self.view.admission, None)):
                    return read
                await anyio.sleep(0.002)

    # --- setup and steps ------------------------------------------------------------------

    async def command(self, item: StepInput) -> tuple[bool, str]:
        reply = await self.tree.handle(item.body)  # type: ignore[arg-type]
        # the rule too: an invalid setup is reported with the place, the numbers and the rule
        return reply.ok, "" if reply.error is None else f"{reply.error.message} [{reply.error.rule}]"

    async def setup(self, inputs: list[StepInput]) -> None:
        for item in inputs:
            ok, message = await self.command(item)
            if not ok:
                loc = tuple(int(p) if p.isdigit() else p for p in item.place.replace("]", "").replace("[", ".")
                            .split("."))
                raise self.scenario.error(loc, message)
        await self.catch_up()

    async def publish(self, item: StepInput, time: Any) -> None:
        body = item.body
        if isinstance(body, PoolUpsert | PoolDelete | HostAdd | HostRemove | TreeConfigure):
            await self.command(item)
            return
        if isinstance(body, EnqueueInput):
            await self.log.append_raw(subjects.gang(body.tree), body.envelope_json(item.id, time), item.id)
            return
        events: list[Event]
        if isinstance(body, TaskSelector | AckPreemptions):
            await self.catch_up()
            if isinstance(body, TaskSelector):
                events = list(body.resolve(state_tasks(self.view.admission), can_move))
            else:
                events = list(body.resolve(t for t in state_tasks(self.view.admission) if t.requested))
        else:
            events = [body]
        envelopes = [Envelope(id=derived_id(item.id, n), time=time, source="scenario", event=e)
                     for n, e in enumerate(events)]
        if envelopes:
            await self.log.append(envelopes)

    async def step(self, plan: StepPlan) -> StepReport:
        start = self.read_to
        self.seen = []
        for item in plan.inputs:  # 1.
            await self.publish(item, plan.time)
        tick = Envelope(id=derived_id(self.run_id, "tick", plan.index), time=plan.time, source="scenario",
                        event=ClockTicked())
        (appended,) = await self.log.append([tick])  # 2.
        await self.settle(appended.seq)  # 3.
        decisions = [d for seq, env in self.seen if seq > start for d in decisions_of(env.event, self._key)]
        return step_report(plan, self.view.admission, self._key, decisions)

    def _key(self, tree: str | None, path: str) -> str:
        return self.scenario.pool_key(tree, path)


async def run_on(log: EventLog, scenario: Scenario, run_id: str) -> ScenarioReport:
    """Run one scenario on `log` (an empty stream) with the services started here."""
    expander = Expander(scenario, run=run_id)
    invalid: ScenarioError | None = None
    steps: list[StepReport] = []
    async with anyio.create_task_group() as tg:
        tree: TreeService = await tg.start(lambda task_status: serve_tree(log, None, task_status=task_status))
        await tg.start(lambda task_status: serve_admission(log, None, clock=False, task_status=task_status))
        await tg.start(lambda task_status: serve_preemption(log, None, task_status=task_status))
        run = Run(scenario, log, tree, run_id)
        # An invalid setup (initial pools the tree service refuses) is the file's fault: raised
        # here, it would leave the task group wrapped in an ExceptionGroup, which `scenario run`
        # cannot tell from a crash (exit 1, "internal error"); it is raised after the group.
        try:
            await run.setup(expander.setup())
        except ScenarioError as exc:
            invalid = exc
        else:
            steps = [await run.step(plan) for plan in expander.plans()]
        tg.cancel_scope.cancel()
    if invalid is not None:
        raise invalid
    return ScenarioReport.build(scenario.name, steps)


async def run_file(scenario: Scenario, bus: str, nats_url: str | None, index: int) -> ScenarioReport:
    run_id = f"{Path(scenario.file or scenario.name).name}:{index}"
    if bus == "memory":
        from services.common.memlog import MemoryLog

        return await run_on(MemoryLog(), scenario, run_id)
    from services.common.jetstream import JetStreamLog

    assert nats_url is not None
    log = await JetStreamLog.connect(nats_url)
    try:
        await log.delete_stream()
        await log.ensure_stream()
        return await run_on(log, scenario, run_id)
    finally:
        with anyio.CancelScope(shield=True):
            await log.close()
