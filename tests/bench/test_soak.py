"""`poolwise bench soak` (bench/soak.py): its section has every figure of issue 18 per size and the
ratio of each between the sizes, with the goals; a tiny run of the real system gives them all.

The live run (`test_a_tiny_soak_gives_every_figure`: two histories of a few hundred gangs, each
through `poolwise up`, a replay, a restart and a failover) takes about a minute on 2 cores, more
than the normal suite's budget for one test: it runs when `POOLWISE_SOAK=1` is set (`just soak`
runs it, then `poolwise bench soak --quick`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from typer.testing import CliRunner

from bench.soak import FAILOVER_GOAL_S, RATIO_GOAL, RESTART_GOAL_S, Shape, SizeResult, set_niceness, soak
from bench.suite import EXTRA, NAMES, soak_figures, soak_rows
from services.tools.cli.main import app

MB = 1024 * 1024


def fake(gangs: int, scale: float) -> SizeResult:
    return SizeResult(gangs=gangs, messages=5 * gangs, generate_s=gangs / 500,
                      rss_run={"tree": int(200 * MB * scale), "admission": 100 * MB, "preemption": 90 * MB},
                      rss_restart={"tree": 150 * MB, "admission": int(110 * MB * scale), "preemption": 95 * MB},
                      cpu_us_per_gang={"admission": 400.0}, restart_leading_s={"admission": 5.0},
                      empty_start_s=5.0, restart_ready_s=5.0 * scale, restart_answer_s=5.1 * scale,
                      restart_s=2.0 * scale, failover_s=2.5 * scale, failover_by="the standby", replay_s=10.0 * scale,
                      replay_events=7 * gangs, replay_ok=True, replay_peak_rss=300 * MB,
                      replay_max_process_rss=250 * MB)


def test_the_section_has_every_figure_per_size_and_their_ratios() -> None:
    small, large = fake(1000, 1.0), fake(10_000, 2.0)
    section = soak_rows([small, large])
    names = [r.name for r in section.rows]
    figures = [name for name, *_ in soak_figures(small)]
    assert len(figures) == 6 + 8  # RSS of 3 services twice, start, restart x3, standby warm, failover, replay x2
    for size in ("1,000 gangs", "10,000 gangs"):
        for figure in [*figures, "history: log messages", "history: events (as replay counts them)"]:
            assert f"{size}: {figure}" in names
    ratios = {r.name.split(": ", 1)[1]: r for r in section.rows if r.name.startswith("ratio 10,000 / 1,000 gangs")}
    assert set(ratios) == set(figures)
    assert ratios["RSS tree after the run"].value == pytest.approx(2.0)
    assert ratios["RSS tree after the run"].met is False  # 2x > 1.2x
    assert ratios["RSS preemption after the run"].met is True
    assert ratios["replay --verify: peak RSS (its process tree)"].met is True
    assert ratios["replay --verify: events/s"].met is None  # no goal on a rate
    restart = ratios["restart-to-answer: answering and caught up (consumers drained, projections at the end)"]
    assert restart.goal == f"<= {RATIO_GOAL:g}x" and restart.met is False
    by_name = {r.name: r for r in section.rows}
    assert by_name["1,000 gangs: failover: kill -9 of the active admission -> a new gang admitted"].goal == \
        f"<= {FAILOVER_GOAL_S:g} s"
    assert by_name["1,000 gangs: failover: kill -9 of the active admission -> a new gang admitted"].met is True
    assert by_name["10,000 gangs: failover: kill -9 of the active admission -> a new gang admitted"].met is False
    assert by_name["10,000 gangs: restart-to-answer: answering and caught up (consumers drained, projections at "
                   "the end)"].goal == f"<= {RESTART_GOAL_S:g} s"
    assert any("taken over by the standby" in n and "verified ok" in n for n in section.notes)


def test_soak_is_named_only_not_part_of_all() -> None:
    assert "soak" in EXTRA and "soak" not in NAMES


@pytest.mark.parametrize(("args", "said"), [(["bench", "soak", "--sizes", "5"], "two history sizes"),
                                            (["bench", "soak", "--sizes", "a,b"], "two history sizes"),
                                            (["bench", "raw", "--sizes", "1,2"], "only for")])
def test_bad_sizes_are_refused(args: list[str], said: str) -> None:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert said in result.output


def _thread_niceness(pid: int) -> list[int]:
    return [int((task / "stat").read_text().rsplit(")", 1)[1].split()[16])
            for task in Path(f"/proc/{pid}/task").iterdir()]


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="Linux /proc")
def test_set_niceness_reaches_every_thread_of_a_process() -> None:
    # a service's threads made before it lowered its own niceness keep theirs: each is set
    code = "import threading, time; threading.Thread(target=time.sleep, args=(30,)).start(); print(1, flush=True)"
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == b"1"
        assert len(_thread_niceness(child.pid)) == 2
        assert set_niceness(child.pid, 7)  # raising a niceness needs no privileges
        assert _thread_niceness(child.pid) == [7, 7]
    finally:
        child.kill()
        child.wait()
    assert not set_niceness(child.pid, 7)  # gone


@pytest.mark.nats
@pytest.mark.skipif(os.environ.get("POOLWISE_SOAK") != "1", reason="about a minute: set POOLWISE_SOAK=1 (just soak)")
@pytest.mark.timeout(300)
def test_a_tiny_soak_gives_every_figure() -> None:
    shape = Shape(per_round=100, window=3, timeout=120.0)
    heard: list[int] = []
    results = anyio.run(lambda: soak([300, 600], shape, each=lambda r: heard.append(r.gangs)), backend="asyncio")
    assert heard == [300, 600]
    for r in results:
        assert r.messages > r.gangs and r.replay_events > r.messages
        assert r.replay_ok, r.notes
        assert all(r.rss_run[s] > 0 and r.rss_restart[s] > 0 for s in ("tree", "admission", "preemption"))
        assert 0 < r.restart_ready_s <= r.restart_answer_s <= r.restart_s
        assert r.failover_s > 0 and r.failover_by  # (the standby, or admission restarted by up: a race)
        assert r.standby_warm_s > 0  # the kill waited for the standby's /readyz
        assert r.replay_events_per_s > 0 and r.replay_peak_rss >= r.replay_max_process_rss > 0
    section = soak_rows(results)
    ratios = [r for r in section.rows if r.name.startswith("ratio 600 / 300 gangs")]
    assert len(ratios) == len(soak_figures(results[0])) and all(r.value > 0 for r in ratios)
