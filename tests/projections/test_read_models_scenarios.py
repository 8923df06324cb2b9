"""End to end: scenarios run on the real services (a MemoryLog), then the whole log applied to the
read models. After every step, the tables hold what the scenario report says: each gang's state
(and its queue, and its pool once a decision named it), each task's state, each pool's entitlement;
and a preemption row for each preemption the report lists."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest

from events import ClockTicked, CycleCompleted, decode_all
from projections import EventLogProjection, PoolTreeProjection, ProjectionStore
from projections.read_models import TABLES, read_models
from services.common.log import Stored
from services.common.memlog import MemoryLog
from services.tools.scenario.format import Scenario, load_scenario
from services.tools.scenario.report import ScenarioReport, StepReport
from services.tools.scenario.runner import run_on

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "scenarios"
SHARED_FILES = sorted(SHARED.glob("*.yaml")) if SHARED.is_dir() else []

# Cancels (of a pending, an admitted and a rejected gang), refused task reports (while waiting,
# backward, after the end), refused members, a placement-timeout requeue, a waiting timeout,
# a preemption and its requeue, an ephemeral pool.
LIFECYCLE = """
name: read-models-lifecycle
resources: [cpu]
capacity: {cpu: 20}
trees:
  - name: default
    gang_timeout: {default: 10, limit: 100, jitter: 0}
    preemption: {enabled: true, grace: 0}
pools:
  - {path: /a, reservation: {cpu: 10}, limit: {cpu: 20}}
  - {path: /b, reservation: {cpu: 10}, limit: {cpu: 20}}
  - {path: /users, create_ephemeral_subpools: true}
steps:
  - at: 0
    do:
      - enqueue: {gang: ok, pool: /a, tasks: 2, resources: {cpu: 1}}
      - enqueue: {gang: slow, pool: /a, tasks: 2, resources: {cpu: 1}, timeout: 5}
      - enqueue: {gang: hog, pool: /a, tasks: 4, resources: {cpu: 3}}
      - enqueue: {gang: half, pool: /b, tasks: 1, size: 2, resources: {cpu: 1}, timeout: 5}
      - enqueue: {gang: gone, pool: /b, tasks: 1, resources: {cpu: 1}}
      - enqueue: {gang: nowhere, pool: /missing, tasks: 1, resources: {cpu: 1}}
      - enqueue: {gang: mine, pool: /users, user: alice, tasks: 1, size: 2, resources: {cpu: 1}}
      - enqueue: {gang: later, pool: /b, tasks: 1, resources: {cpu: 1}}
      - task: {gang: half, state: running}
  - at: 1
    do:
      - task: {gang: ok, state: running}
      - task: {gang: hog, state: running}
      - task: {id: slow/0, state: placed}
      - cancel: gone
      - cancel: nowhere
      - task: {id: ok/0, state: pending}
      - enqueue: {gang: half, pool: /b, tasks: 1, size: 3, resources: {cpu: 1}}
  - at: 2
    do:
      - task: {gang: ok, state: succeeded}
      - task: {id: ok/1, state: running}
      - enqueue: {gang: want, pool: /b, tasks: 2, resources: {cpu: 5}}
  - at: 3
    do:
      - ack_preemptions: {}
      - cancel: later
  - at: 8
    do:
      - task: {id: slow/1, state: running}
      - enqueue: {gang: mine, pool: /users, user: alice, tasks: 1, size: 2, resources: {cpu: 1}}
  - at: 30
    do:
      - task: {gang: hog, state: succeeded}
"""


@dataclass(frozen=True)
class Run:
    scenario: Scenario
    report: ScenarioReport
    log: list[Stored]


def run(path: Path) -> Run:
    scenario = load_scenario(path)

    async def main() -> tuple[ScenarioReport, list[Stored]]:
        log = MemoryLog()
        report = await run_on(log, scenario, "read-models")
        return report, await log.read(1)

    report, log = anyio.run(main, backend="asyncio")
    return Run(scenario, report, log)


def step_ends(log: list[Stored]) -> list[int]:
    """Where each step settled: the last preemption `CycleCompleted` of each scenario tick's chain
    (a pass is based on the trigger of the admission cycle it follows: the tick)."""
    ticks: list[int] = []
    ends: dict[int, int] = {}
    for message in log:
        envelope = decode_all(message.data)[-1]  # a pack holds admissions only: its last one will do
        event = envelope.event
        if isinstance(event, ClockTicked) and envelope.source == "scenario":
            ticks.append(message.seq)
        elif isinstance(event, CycleCompleted) and event.service == "preemption":
            ends[event.trigger_seq] = max(ends.get(event.trigger_seq, 0), message.seq)
    return [ends[tick] for tick in ticks]


@pytest.fixture(scope="module", params=[*SHARED_FILES, "lifecycle"],
                ids=[*(p.stem for p in SHARED_FILES), "lifecycle"])
def scenario_run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Run:
    path = request.param
    if path == "lifecycle":
        path = tmp_path_factory.mktemp("read-models") / "lifecycle.yaml"
        path.write_text(LIFECYCLE)
    return run(path)


def check_step(store: ProjectionStore, scenario: Scenario, step: StepReport) -> None:
    _, rows = store.query("SELECT tree, gang, state, queue, pool, requested_pool FROM gangs")
    assert {gang for _, gang, *_ in rows} == set(step.gangs), f"step at={step.at}"
    for tree, gang, state, queue, pool, requested in rows:
        want = step.gangs[gang]
        assert (state, queue) == (want.state, want.queue), f"step at={step.at}: gang {gang}"
        if state not in ("waiting", "pending") or pool != requested:
            assert scenario.pool_key(tree, pool) == want.pool, f"step at={step.at}: gang {gang}"
        else:  # admission has not named its leaf yet: the requested pool, or the ephemeral pool made for it
            leaf = (want.pool or "").rsplit("/", 1)[-1]
            assert want.pool == scenario.pool_key(tree, pool) or "$" in leaf or leaf == pool.rsplit("/", 1)[-1], (
                f"step at={step.at}: gang {gang} in {want.pool}, asked for {pool}")
    _, rows = store.query("SELECT task, state FROM tasks")
    assert dict(rows) == {task: report.state for task, report in step.tasks.items()}, f"step at={step.at}"
    _, rows = store.query("SELECT tree, path, kind, entitlement, non_slack_entitlement, slack_entitlement "
                          "FROM pool_entitlements")
    got: dict[tuple[str, str, str], float] = {}
    for tree, path, kind, *values in rows:
        for name, value in zip(("entitlement", "non_slack_entitlement", "slack_entitlement"), values, strict=True):
            got[(scenario.pool_key(tree, path), name, kind)] = value
    for key, pool in step.pools.items():
        for name in ("entitlement", "non_slack_entitlement", "slack_entitlement"):
            for kind, amount in pool.get(name).items():
                assert got.get((key, name, kind), 0.0) == pytest.approx(amount, abs=1e-9), (step.at, key, name, kind)


def test_after_every_step_the_tables_hold_what_the_report_says(scenario_run: Run) -> None:
    ends = step_ends(scenario_run.log)
    assert len(ends) == len(scenario_run.report.steps)
    with ProjectionStore(":memory:", read_models(), chunk_size=5) as store:
        done = 0
        for end, step in zip(ends, scenario_run.report.steps, strict=True):
            store.apply([m for m in scenario_run.log if done < m.seq <= end])
            done = end
            check_step(store, scenario_run.scenario, step)
        store.apply(scenario_run.log)  # the rest (announcements after the last step) changes nothing seen
        check_step(store, scenario_run.scenario, scenario_run.report.steps[-1])
        assert store.query("SELECT count(*) FROM gangs_held")[1] == [(0,)]
        preempted = [d.task for s in scenario_run.report.steps for d in s.decisions if d.kind == "preempt"]
        _, rows = store.query("SELECT task FROM preemptions ORDER BY requested_seq")
        assert [task for (task,) in rows] == preempted
        refused = {d.ref for s in scenario_run.report.steps for d in s.decisions if d.kind == "rejected"}
        _, rows = store.query("SELECT DISTINCT ref FROM rejections")
        assert refused <= {ref for (ref,) in rows}


def test_the_whole_log_at_once_gives_the_final_tables(scenario_run: Run) -> None:
    with ProjectionStore(":memory:", [*read_models(), PoolTreeProjection(), EventLogProjection()]) as store:
        store.apply(scenario_run.log)
        check_step(store, scenario_run.scenario, scenario_run.report.steps[-1])
        for table in TABLES:
            store.query(f"SELECT * FROM {table} LIMIT 1")  # every table of the list exists
