"""What the demo counts while it runs, from the events of the log as admission's fold applies them.

Waits are in log time: from a gang's enqueue to its first admission (`GangAdmitted` is stamped with
its cycle's trigger, the tick at which it was decided). Usage is the cpu the pools hold for
non-revocable tasks (their allocation: admitted tasks until they report that they stopped; revocable
ones run on the machines' spare cpu, beyond the capacity), integrated over log time, as a share of
the cluster's cpu.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, cast

from events import Event, GangAdmitted, GangEnqueued, GangFinished, InputRejected, PreemptionRequested, event_class


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank `q` percentile (0 < q <= 100) of `values` (not empty)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


@dataclass
class Recorder:
    """`classes`: each gang's class, from the workload (gangs it does not name: `other`)."""

    classes: dict[str, str] = field(default_factory=dict)
    enqueued: dict[str, float] = field(default_factory=dict)  # gang -> log time of its enqueue
    waits: dict[str, float] = field(default_factory=dict)  # gang -> seconds to its first admission
    pools: dict[str, str] = field(default_factory=dict)  # gang -> leaf pool
    admissions: Counter[str] = field(default_factory=Counter)  # per pool, re-admissions included
    preempted_gangs: Counter[str] = field(default_factory=Counter)  # per pool
    preempted_tasks: Counter[str] = field(default_factory=Counter)
    rejected: Counter[str] = field(default_factory=Counter)  # per rule
    outcomes: Counter[str] = field(default_factory=Counter)  # done, cancelled, timed_out, rejected
    used: float = 0.0  # cpu x seconds held
    first: float | None = None
    last: float = 0.0
    _held: float = 0.0  # cpu held since `last`

    def event(self, event: Event, at: float) -> None:
        """An event of the log (inputs, cycle and pass decisions; a gang event may be its view:
        events.views) or of the fold (refusals, finished gangs), at log time `at`."""
        kind = event_class(event)
        if kind is GangEnqueued:
            gang = cast(GangEnqueued, event)
            self.enqueued.setdefault(gang.gang, at)
            self.pools.setdefault(gang.gang, gang.pool)
        elif kind is GangAdmitted:
            admitted = cast(GangAdmitted, event)
            self.admissions[admitted.pool] += 1
            if admitted.gang not in self.waits and admitted.gang in self.enqueued:
                self.waits[admitted.gang] = at - self.enqueued[admitted.gang]
        elif kind is PreemptionRequested:
            request = cast(PreemptionRequested, event)
            self.preempted_gangs[request.pool] += 1
            self.preempted_tasks[request.pool] += len(request.tasks)
        elif kind is InputRejected:
            self.rejected[cast(InputRejected, event).rule] += 1
        elif kind is GangFinished:
            self.outcomes[cast(GangFinished, event).outcome] += 1

    def hold(self, at: float, cpu: float) -> None:
        """From log time `at` on, the pools hold `cpu` (sampled after each step)."""
        if self.first is None:
            self.first = at
        self.used += self._held * max(0.0, at - self.last)
        self.last, self._held = at, cpu

    def summary(self, capacity: float, class_order: tuple[str, ...] = ()) -> dict[str, Any]:
        span = self.last - (self.first or 0.0)
        per_pool: dict[str, list[float]] = {}
        per_class: dict[str, list[float]] = {}
        for gang, wait in self.waits.items():
            per_pool.setdefault(self.pools.get(gang, "?"), []).append(wait)
            per_class.setdefault(self.classes.get(gang, "other"), []).append(wait)
        pools = sorted(set(per_pool) | set(self.admissions) | set(self.preempted_gangs))
        per_top: dict[str, list[float]] = {}
        for pool, waits in per_pool.items():
            per_top.setdefault(_top(pool), []).extend(waits)
        tops = sorted({_top(p) for p in pools})
        order = [c for c in class_order if c in per_class] + sorted(set(per_class) - set(class_order))
        return {
            "enqueued": len(self.enqueued),
            "admitted_gangs": len(self.waits),
            "admissions": sum(self.admissions.values()),
            "preempted_gangs": sum(self.preempted_gangs.values()),
            "preempted_tasks": sum(self.preempted_tasks.values()),
            "rejected": dict(sorted(self.rejected.items())),
            "finished": dict(sorted(self.outcomes.items())),
            "log_seconds": round(span, 3),
            "usage": round(self.used / (capacity * span), 4) if capacity > 0 and span > 0 else 0.0,
            "pools": [{"pool": p, "admissions": self.admissions[p], "preempted": self.preempted_gangs[p],
                       **_waits(per_pool.get(p, []))} for p in pools],
            "top_pools": [{"pool": t, "admissions": sum(n for p, n in self.admissions.items() if _top(p) == t),
                           "preempted": sum(n for p, n in self.preempted_gangs.items() if _top(p) == t),
                           **_waits(per_top.get(t, []))} for t in tops],
            "classes": [{"class": c, **_waits(per_class[c])} for c in order],
        }


def _top(path: str) -> str:
    """The top-level pool of a pool's path (`/cohort-3/cq-1` -> `/cohort-3`)."""
    return "/" + path.strip("/").split("/", 1)[0]


def _waits(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"admitted": 0, "mean_wait": None, "p50_wait": None, "p95_wait": None}
    return {"admitted": len(values), "mean_wait": round(sum(values) / len(values), 3),
            "p50_wait": round(percentile(values, 50), 3), "p95_wait": round(percentile(values, 95), 3)}
