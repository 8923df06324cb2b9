"""`poolwise demo --workload kueue-baseline`: the workload of Kueue's scheduler performance test.

Kueue's baseline (test/performance/scheduler/configs/baseline/generator.yaml in its repository):
5 cohorts of 6 ClusterQueues, each with a nominal quota of 20 cpu and a borrowing limit of 100;
per queue, 350 small workloads (1 cpu, 200 ms, priority 50) created one every 100 ms, 100 medium
(5 cpu, 500 ms, priority 100) one every 500 ms, and 50 large (20 cpu, 1 s, priority 200) one
every 1.2 s; 15,000 workloads. Its queues preempt lower priorities within a queue and reclaim
their nominal quota within the cohort.

Mapped onto pools (docs/demo.md says what does not map):

- a cohort is a top-level pool reserving the sum of its queues' quotas (120) and limited to it:
  cohorts lend nothing to each other, as in Kueue;
- a ClusterQueue is a leaf pool under it: reservation 20 (the nominal quota) and a limit of
  20 + 100 (what it may hold when borrowing up to its limit; the cohort's 120 caps it anyway),
  `preempt_lower_priority` (withinClusterQueue: LowerPriority);
- reclaiming within the cohort is poolwise's preemption between pools, with no grace;
- the cluster's capacity is the sum of the quotas (600 cpu): Kueue's test has no nodes either.

`scale` (0 < scale <= 1) keeps the cluster and cuts each queue's job counts (at least one of
each class), for tests.
"""

from __future__ import annotations

from services.tools.demo.workload import Job, Workload, spread

COHORTS = 5
QUEUES = 6
NOMINAL = 20
BORROWING_LIMIT = 100
# class: (count per queue, creation interval ms, runtime ms, priority, cpu)
CLASSES: dict[str, tuple[int, int, int, int, int]] = {
    "small": (350, 100, 200, 50, 1),
    "medium": (100, 500, 500, 100, 5),
    "large": (50, 1200, 1000, 200, 20),
}


def cluster_file() -> str:
    """The cohorts and queues as a cluster file (one host per cohort: capacity = the quotas)."""
    quota = NOMINAL * QUEUES
    lines = [
        "# poolwise demo --workload kueue-baseline: Kueue's scheduler performance test, as pools",
        "resources: [cpu]",
        "hosts:",
        *(f"  - {{name: quota-{c}, resources: {{cpu: {quota}}}}}" for c in range(COHORTS)),
        "trees:",
        "  - name: default",
        "    policy: per_resource",
        "    preemption: {enabled: true, grace: 0}",
        "    gang_timeout: {default: 3600, limit: 3600, jitter: 0}",
        "pools:",
    ]
    for c in range(COHORTS):
        lines.append(f"  - {{path: /cohort-{c}, reservation: {{cpu: {quota}}}, limit: {{cpu: {quota}}}}}")
        for q in range(QUEUES):
            lines.append(f"  - {{path: /cohort-{c}/cq-{q}, reservation: {{cpu: {NOMINAL}}}, "
                         f"limit: {{cpu: {NOMINAL + BORROWING_LIMIT}}}, preempt_lower_priority: true}}")
    return "\n".join(lines) + "\n"


def kueue_baseline(scale: float = 1.0) -> Workload:
    if not 0 < scale <= 1:
        raise ValueError(f"--scale: a fraction above 0 and at most 1, got {scale:g}")
    jobs: list[Job] = []
    for c in range(COHORTS):
        for q in range(QUEUES):
            pool = f"/cohort-{c}/cq-{q}"
            for klass, (count, every, runtime, priority, cpu) in CLASSES.items():
                # Kueue's generator waits one interval before each creation: the first at `every`
                for k, at in enumerate(spread(max(1, round(count * scale)), every, every)):
                    jobs.append(Job(gang=f"c{c}q{q}-{klass}-{k}", pool=pool, klass=klass, at_ms=at,
                                    runtime_ms=runtime, resources=(("cpu", float(cpu)),), priority=priority,
                                    job=f"c{c}q{q}-{klass}-{k}", user=f"cq-{c}-{q}"))
    jobs.sort(key=lambda j: (j.at_ms, j.gang))
    return Workload(name="kueue-baseline", cluster=cluster_file(), jobs=tuple(jobs), step_ms=100,
                    description=(f"Kueue's scheduler performance test: {COHORTS} cohorts x {QUEUES} queues "
                                 f"(nominal {NOMINAL}, borrowing limit {BORROWING_LIMIT}), {len(jobs):,} jobs "
                                 "in log time"),
                    classes=tuple(CLASSES))
