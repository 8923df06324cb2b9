"""`poolwise demo` end to end on the real services and an embedded nats-server: short runs of the
teams workload (unpaced) and of Kueue's baseline at a small scale, each ending with the replay
verified and a summary with real numbers. Event times come from the driver, so a run's numbers are
the same every time: they are asserted exactly."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from projections.store import ProjectionStore
from services.tools.cli.answers import store_files
from services.tools.cli.demo_cmd import apply_file, read_models_settled
from services.tools.demo.driver import DemoResult, Settle, run_demo
from services.tools.demo.kueue import kueue_baseline
from services.tools.demo.live import PlainLines
from services.tools.demo.summary import print_summary, result_document
from services.tools.demo.teams import teams
from services.tree.domain import used_ids

pytestmark = pytest.mark.nats


def _run(workload, where: Path, lines: list[str], settle: Settle | None = None) -> DemoResult:  # type: ignore[no-untyped-def]
    return anyio.run(lambda: run_demo(workload, where, PlainLines(workload, lines.append), apply_file,
                                      settle=settle))


@pytest.fixture(scope="module")
def teams_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("teams")


@pytest.fixture(scope="module")
def store_before() -> used_ids.RunStore:
    """Where the process's id record kept its runs before the module's demos ran."""
    return used_ids.current_store()


@pytest.fixture(scope="module")
def teams_run(teams_dir: Path, store_before: used_ids.RunStore) -> Iterator[tuple[DemoResult, list[str]]]:
    lines: list[str] = []
    fast = dataclasses.replace(teams(10), speed=10_000.0)  # 75 s of log time, 92 jobs, unpaced
    # as `poolwise demo --data-dir` runs it: the SQL tables made whole before the system stops
    yield _run(fast, teams_dir, lines, read_models_settled), lines


@pytest.fixture(scope="module")
def kueue_run(tmp_path_factory: pytest.TempPathFactory, store_before: used_ids.RunStore) -> DemoResult:
    return _run(kueue_baseline(0.02), tmp_path_factory.mktemp("kueue"), [])


def test_teams_demo_ends_with_replay_verified(teams_run: tuple[DemoResult, list[str]]) -> None:
    result, lines = teams_run
    assert result.replay.ok and not result.replay.findings
    assert sum(c.recorded for c in result.replay.counts.values()) > 100
    assert result.steps == 76 and not result.stopped_early  # a tick every log second, 0 through 75
    # poolwise apply's plan: 8 hosts, the tree's options and 9 pools, a command each; then a line per
    # tenth of the 75 s (7.5 s: the next step at or after it)
    assert lines[0].startswith("applied ") and lines[0].endswith(": 18 change(s) in 18 command(s) (poolwise apply)")
    assert [line.split(" |")[0] for line in lines[1:]][:3] == ["log time 0.0 s", "log time 8.0 s", "log time 16.0 s"]


def test_stopped_demos_leave_the_id_record_in_the_store_they_found(teams_run: tuple[DemoResult, list[str]],
                                                                   kueue_run: DemoResult,
                                                                   store_before: used_ids.RunStore) -> None:
    """A demo's services keep their id runs in its data dir's files while they run; stopped, the
    process keeps its runs where it did before (a demo run in-process, then anything else sealing
    runs in that process, a scenario, another demo, wrote them among the stopped demo's files)."""
    assert used_ids.current_store() is store_before


def test_a_kept_data_dirs_sql_tables_hold_the_whole_log(teams_run: tuple[DemoResult, list[str]],
                                                        teams_dir: Path) -> None:
    """The demo stopped, its data dir's read models (what `poolwise sql --data-dir` reads) hold
    every position of its log: the driver waited for the tree service's projections."""
    result, _ = teams_run
    assert result.read_models_behind is None
    main, others = store_files(teams_dir)
    store = ProjectionStore.open_read_only(main, others)
    try:
        (held,), = store.query("SELECT min(last_seq) FROM checkpoints")[1]
        (last, finished), = store.query("SELECT max(seq), count(*) FILTER (WHERE type = 'GangFinished') "
                                        "FROM event_log")[1]
    finally:
        store.close()
    assert held == last >= result.log_positions
    assert finished == sum(result_document(result)["finished"].values())


LATE_INPUTS = """
SELECT e.source, count(*) FROM event_log e
WHERE (e.source = 'demo:submitter' AND NOT EXISTS (SELECT 1 FROM event_log t WHERE t.type = 'ClockTicked'
                                                   AND t.time = e.time AND t.seq > e.seq))
   OR (e.source = 'demo:executor' AND EXISTS (SELECT 1 FROM event_log t WHERE t.type = 'ClockTicked'
                                              AND t.time > e.time AND t.seq < e.seq))
GROUP BY ALL
"""


def test_every_input_lands_before_the_tick_it_is_for(teams_run: tuple[DemoResult, list[str]],
                                                     teams_dir: Path) -> None:
    """What makes the run's numbers the same every time (and lets the tests assert them): a
    step's jobs and cancels are in the log before that step's tick, and the executors' reports
    (stamped with the step's time, sent after its decisions) before the next tick."""
    store = ProjectionStore.open_read_only(*store_files(teams_dir))
    try:
        late = store.query(LATE_INPUTS)[1]
        sources = dict(store.query("SELECT source, count(*) FROM event_log GROUP BY ALL")[1])
    finally:
        store.close()
    assert late == []
    assert sources["demo:submitter"] > 90 and sources["demo:executor"] > 90 and sources["demo:clock"] == 76


def test_teams_summary_has_the_numbers(teams_run: tuple[DemoResult, list[str]]) -> None:
    result, _ = teams_run
    doc = result_document(result)
    assert (doc["jobs"], doc["enqueued"], doc["admitted_gangs"], doc["admissions"]) == (92, 92, 90, 91)
    assert doc["rejected"] == {"above_limit": 2}  # the too-big jobs: cpu 128 in /dev (limit 96)
    assert doc["finished"] == {"cancelled": 1, "done": 60, "rejected": 2}
    assert (doc["preempted_gangs"], doc["preempted_tasks"]) == (1, 2)  # a fine-tuning pair, admitted again
    assert doc["usage"] == 0.5601 and doc["log_seconds"] == 75.0
    pools = {p["pool"]: p for p in doc["pools"]}
    assert set(pools) == {"/dev/ci", "/production/etl", "/research/nlp", "/research/vision", "/spot"}
    assert (pools["/production/etl"]["admitted"], pools["/production/etl"]["mean_wait"],
            pools["/production/etl"]["p50_wait"], pools["/production/etl"]["p95_wait"]) == (20, 3.7, 0.0, 15.0)
    assert (pools["/research/nlp"]["preempted"], pools["/research/nlp"]["admissions"]) == (1, 16)
    shown: list[str] = []
    print_summary(result, shown.append)
    assert any("cluster usage: 56.0% of the cpu" in line for line in shown)
    assert any(line.split()[:2] == ["/production/etl", "20"] for line in shown)


def test_kueue_baseline_small_admits_every_job(kueue_run: DemoResult) -> None:
    doc = result_document(kueue_run)
    assert kueue_run.replay.ok
    assert doc["jobs"] == doc["enqueued"] == doc["admitted_gangs"] == 300
    assert doc["finished"] == {"done": 300}
    assert doc["rejected"] == {}
    classes = {c["class"]: c for c in doc["classes"]}
    assert [c["class"] for c in doc["classes"]] == ["small", "medium", "large"]
    assert {name: row["admitted"] for name, row in classes.items()} == {"small": 210, "medium": 60, "large": 30}
    # smaller jobs take the queues' room first; a large one (20 cpu, priority 200) waits while
    # lower priorities are preempted for it (30 gangs, each admitted again later)
    assert [classes[c]["mean_wait"] for c in ("small", "medium", "large")] == [0.0, 0.0, 0.3]
    assert (doc["preempted_gangs"], doc["admissions"]) == (30, 330)
    assert doc["usage"] == 0.4983 and doc["log_seconds"] == 2.9 and kueue_run.steps == 14
