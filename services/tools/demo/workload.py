"""What `poolwise demo` runs: a cluster file and a timeline of jobs, built from plain values.

A `Workload` is the cluster (a cluster file's text, applied with `poolwise apply`'s machinery)
and the jobs, each with the logical time it is submitted at, how long it runs once admitted, and
when (if ever) it is cancelled. Times are integer milliseconds of log time from 0, so that the
same workload is the same log, byte for byte, on every run. Nothing here talks to NATS.

Two workloads (`teams.py`, `kueue.py`): `teams`, a realistic cluster of several teams, paced
to the wall clock so that it can be watched; `kueue-baseline`, the mix of Kueue's scheduler
performance test, run as fast as the pipeline goes.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Job:
    """One gang to submit: `size` tasks of `resources` each, for leaf pool `pool`."""

    gang: str
    pool: str
    klass: str  # the workload's class of the job (small, training, ...): how the summary groups it
    at_ms: int  # submitted at this log time
    runtime_ms: int  # how long its tasks run once admitted (the executor simulator reports them done then)
    size: int = 1
    resources: tuple[tuple[str, float], ...] = (("cpu", 1.0),)
    priority: int = 0
    preemptible: bool = True
    revocable: bool = False
    user: str = "anonymous"
    job: str | None = None
    cancel_ms: int | None = None  # cancelled at this log time (if not finished by then)
    fails: bool = False  # its first task reports `failed` instead of `succeeded`

    def enqueue_options(self) -> dict[str, object]:
        """The submitter SDK's `enqueue` arguments for this job."""
        return {"gang": self.gang, "pool": self.pool, "count": self.size, "resources": dict(self.resources),
                "job": self.job or self.gang, "user": self.user, "priority": self.priority,
                "preemptible": self.preemptible, "revocable": self.revocable}


@dataclass(frozen=True, slots=True)
class Workload:
    """A cluster and its jobs (sorted by `at_ms`, then gang id).

    `step_ms`: the grid of log time the driver ticks on; `paced`: ticks every step, each at its
    wall-clock time (`speed` log seconds per wall second), for watching; otherwise the driver
    ticks only when something happens, as fast as the pipeline allows."""

    name: str
    cluster: str  # a cluster file (YAML)
    jobs: tuple[Job, ...]
    step_ms: int
    paced: bool = False
    speed: float = 1.0
    horizon_ms: int = 0  # a paced workload's last step
    description: str = ""
    classes: tuple[str, ...] = field(default=())  # in the order the summary lists them

    def capacity(self) -> float:
        """The cpu of the cluster file's hosts (what usage is a share of), the file read as
        `poolwise apply` reads it (`capacity:` is one host)."""
        from services.tools.scenario.cluster_file import cluster_text

        hosts = cluster_text(self.cluster, f"{self.name}-cluster.yaml").config.hosts or {}
        return float(sum(host.resources.get("cpu", 0.0) for host in hosts.values()))


def spread(count: int, first_ms: int, every_ms: int) -> list[int]:
    """`count` times, the first at `first_ms`, then one every `every_ms`."""
    return [first_ms + k * every_ms for k in range(count)]
