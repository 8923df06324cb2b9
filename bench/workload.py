"""The synthetic cluster the admission and pipeline benchmarks run on (nothing runs at import).

One tree (`bench`) of `leaves` leaf pools, two levels deep (`/g<i>/l<j>`, `group_size` leaves
per group), `hosts` hosts whose summed capacity is `fill` times what the gangs ask for, and
`gangs` gangs of `tasks_per_gang` tasks spread round-robin over the leaves:

- `fill < 1`: part of the demand fits; the admission cycle admits what its entitlement allows
  and the rest is held back (head of line, or moved to the `non_preemptible` queue for the
  `non_preemptible` fraction of gangs);
- `fill >= 1`: every gang fits, so every gang gets a `GangAdmitted` (what the end-to-end
  benchmark needs to time each gang).

Gang timeouts are an hour, so no timer fires while a benchmark runs.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from events import (
    Envelope,
    Event,
    GangEnqueued,
    HostRegistered,
    PoolConfig,
    PoolConfigChanged,
    TaskSpec,
    TreeConfigured,
    TreeOptions,
    encode,
)
from events.config import GangTimeoutOptions

TREE = "bench"
KINDS: tuple[str, ...] = ("cpu", "memory", "disk", "gpu")
TASK_CPU = 1.0
TASK_MEMORY = 4.0


@dataclass(frozen=True, slots=True)
class Workload:
    """What to build; every count is bounded by the caller."""

    gangs: int = 100_000
    leaves: int = 1000
    hosts: int = 100
    tasks_per_gang: int = 2
    fill: float = 0.5  # cluster capacity / total demand of the gangs
    non_preemptible: float = 0.1  # fraction of gangs that are not preemptible
    group_size: int = 32
    jobs_per_leaf: int = 4
    tree: str = TREE

    @property
    def groups(self) -> int:
        return math.ceil(self.leaves / self.group_size)

    def leaf(self, index: int) -> str:
        """The path of leaf `index` (0-based)."""
        return f"/g{index // self.group_size}/l{index % self.group_size}"

    def leaf_paths(self) -> list[str]:
        return [self.leaf(i) for i in range(self.leaves)]

    def capacity(self) -> dict[str, float]:
        """The whole cluster: `fill` times the demand of all gangs (at least one task per leaf)."""
        tasks = max(self.gangs * self.tasks_per_gang, self.leaves)
        cpu = math.ceil(tasks * TASK_CPU * self.fill)
        return {"cpu": float(cpu), "memory": float(cpu) * TASK_MEMORY, "disk": float(cpu) * 10.0, "gpu": 0.0}


def config_events(w: Workload) -> list[Event]:
    """The tree, its pools (groups then leaves) and the hosts, in log order."""
    options = TreeOptions(resources=list(KINDS),
                          gang_timeout=GangTimeoutOptions(default=3600.0, limit=3600.0, jitter=0.0))
    events: list[Event] = [TreeConfigured(tree=w.tree, options=options)]
    cap = w.capacity()
    reserved = {k: v * 0.8 for k, v in cap.items()}  # 80% of the cluster is reserved, evenly
    for g in range(w.groups):
        in_group = min(w.group_size, w.leaves - g * w.group_size)
        share = in_group / w.leaves
        events.append(PoolConfigChanged(tree=w.tree, path=f"/g{g}", created=True,
                                        config=PoolConfig(reservation={k: v * share for k, v in reserved.items()})))
    per_leaf = {k: v / w.leaves for k, v in reserved.items()}
    for i in range(w.leaves):
        events.append(PoolConfigChanged(tree=w.tree, path=w.leaf(i), created=True,
                                        config=PoolConfig(reservation=dict(per_leaf))))
    hosts = max(1, w.hosts)
    for h in range(hosts):
        events.append(HostRegistered(host=f"h{h}", resources={k: v / hosts for k, v in cap.items()}))
    return events


def gang_event(w: Workload, index: int, prefix: str = "g") -> GangEnqueued:
    """Gang `index`: on leaf `index % leaves`, one of that leaf's `jobs_per_leaf` jobs."""
    leaf = index % w.leaves
    gang = f"{prefix}{index}"
    tasks = [TaskSpec(id=f"{gang}.{t}", resources={"cpu": TASK_CPU, "memory": TASK_MEMORY})
             for t in range(w.tasks_per_gang)]
    preemptible = (index * 7919 % 1000) >= w.non_preemptible * 1000
    return GangEnqueued(tree=w.tree, gang=gang, pool=w.leaf(leaf), job=f"j{leaf}.{index % w.jobs_per_leaf}",
                        user=f"u{leaf % 50}", size=w.tasks_per_gang, preemptible=preemptible, tasks=tasks)


def gang_events(w: Workload, prefix: str = "g", start: int = 0, count: int | None = None) -> Iterator[GangEnqueued]:
    end = w.gangs if count is None else start + count
    for index in range(start, end):
        yield gang_event(w, index, prefix)


def envelope(event: Event, id_: str, seconds: float, source: str = "bench") -> Envelope:
    return Envelope(id=id_, time=datetime.fromtimestamp(seconds, tz=UTC), source=source, event=event)


def gang_payload_size(w: Workload) -> int:
    """Bytes of one encoded gang envelope (what the submitter publishes, per gang)."""
    sample = gang_event(w, w.gangs - 1 if w.gangs else 0, prefix="g-size-")
    return len(encode(envelope(sample, "x" * 32, 1.7e9, source="sdk:bench")))
