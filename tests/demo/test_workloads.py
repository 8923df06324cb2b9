"""The demo's workloads as values: Kueue's baseline counted, the teams mix drawn the same each
time, both cluster files valid by the tree service's own rules, and the summary's arithmetic."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from events import GangAdmitted, GangEnqueued, TaskSpec
from services.tools.demo.kueue import kueue_baseline
from services.tools.demo.record import Recorder, percentile
from services.tools.demo.teams import teams
from services.tools.demo.workload import Workload
from services.tools.scenario.cluster_file import load_cluster
from services.tools.scenario.errors import ScenarioError
from services.tree.domain.change_plan import plan_changes
from services.tree.domain.state import TreeState


def test_kueue_baseline_is_kueues_mix() -> None:
    workload = kueue_baseline()
    assert len(workload.jobs) == 15_000
    by_class = Counter(job.klass for job in workload.jobs)
    assert by_class == {"small": 10_500, "medium": 3_000, "large": 1_500}
    one_queue = [j for j in workload.jobs if j.pool == "/cohort-3/cq-5"]
    smalls = [j for j in one_queue if j.klass == "small"]
    larges = [j for j in one_queue if j.klass == "large"]
    assert [j.at_ms for j in smalls[:3]] == [100, 200, 300] and smalls[-1].at_ms == 35_000
    assert (larges[0].at_ms, larges[-1].at_ms, larges[0].runtime_ms, larges[0].priority) == (1_200, 60_000, 1_000, 200)
    assert dict(larges[0].resources) == {"cpu": 20.0}
    assert workload.capacity() == 600.0


def test_kueue_scale_cuts_the_jobs_not_the_cluster() -> None:
    small = kueue_baseline(0.02)
    assert Counter(j.klass for j in small.jobs) == {"small": 30 * 7, "medium": 30 * 2, "large": 30 * 1}
    assert small.cluster == kueue_baseline().cluster
    with pytest.raises(ValueError, match="--scale"):
        kueue_baseline(0)


@pytest.mark.parametrize("workload", [kueue_baseline(0.01), teams(60)], ids=["kueue", "teams"])
def test_cluster_files_keep_every_rule(workload, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "cluster.yaml"
    path.write_text(workload.cluster)
    plan = plan_changes(TreeState(), load_cluster(path).config, prune=False)
    assert plan.ok, plan.violations
    pools = [c for c in plan.changes if c.what == "pool"]
    assert len(pools) == (35 if workload.name == "kueue-baseline" else 9)


def test_teams_is_the_same_mix_each_time_and_has_every_kind_of_job() -> None:
    first, again = teams(60), teams(60)
    assert first.jobs == again.jobs
    jobs = first.jobs
    assert first.horizon_ms == 450_000 and first.paced and first.speed == 10
    assert all(j.at_ms < first.horizon_ms for j in jobs)
    assert any(j.size > 1 for j in jobs)  # gangs
    assert any(not j.preemptible for j in jobs) and any(j.revocable for j in jobs)
    assert any(j.cancel_ms is not None for j in jobs) and any(j.fails for j in jobs)
    assert any(j.klass == "too-big" for j in jobs)  # above /dev's limit of cpu 96: refused
    assert len({j.gang for j in jobs}) == len(jobs)
    assert len(teams(10).jobs) < len(jobs)


def test_teams_lists_its_classes_in_the_order_they_are_drawn_and_its_cpu() -> None:
    workload = teams(60)
    assert workload.classes == ("training", "finetune", "sweep", "service", "etl", "ci", "too-big", "spot")
    assert set(workload.classes) == {j.klass for j in workload.jobs}
    assert workload.capacity() == 8 * 64.0  # eight machines of 64 cpu (their revocable cpu not counted)


def test_capacity_reads_the_cluster_file_as_apply_does() -> None:
    one_host = Workload(name="w", cluster="capacity: {cpu: 40, memory: 100}\n", jobs=(), step_ms=1000)
    assert one_host.capacity() == 40.0
    bad = Workload(name="w", cluster="hosts:\n  - {name: h1, resources: {cpu: 4}, cores: 2}\n", jobs=(), step_ms=1000)
    with pytest.raises(ScenarioError, match="cores"):
        bad.capacity()


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 21)]
    assert percentile(values, 50) == 10.0
    assert percentile(values, 95) == 19.0
    assert percentile([3.0], 95) == 3.0


def test_recorder_counts_waits_and_usage() -> None:
    recorder = Recorder(classes={"a": "small", "b": "large"})
    task = [TaskSpec(id="t", resources={"cpu": 1})]
    recorder.event(GangEnqueued(gang="a", pool="/p", job="a", size=1, tasks=task), 1.0)
    recorder.event(GangEnqueued(gang="b", pool="/q", job="b", size=1, tasks=task), 1.0)
    recorder.event(GangAdmitted(tree="default", gang="a", pool="/p", queue="pending", tasks=task), 1.0)
    recorder.event(GangAdmitted(tree="default", gang="b", pool="/q", queue="pending", tasks=task), 4.0)
    recorder.hold(0.0, 10.0)  # 10 cpu held from 0 to 2, then 30 from 2 to 4
    recorder.hold(2.0, 30.0)
    recorder.hold(4.0, 0.0)
    summary = recorder.summary(capacity=40.0, class_order=("small", "large"))
    assert summary["usage"] == pytest.approx((10 * 2 + 30 * 2) / (40 * 4))
    assert [(c["class"], c["mean_wait"]) for c in summary["classes"]] == [("small", 0.0), ("large", 3.0)]
    assert [(p["pool"], p["admissions"], p["p95_wait"]) for p in summary["pools"]] == [("/p", 1, 0.0), ("/q", 1, 3.0)]
