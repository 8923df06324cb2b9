"""The recording half of the metrics (on the hot path): the decisions this process published,
counted by their labels in plain dicts (`Tallies`, one `TALLIES`), and the histograms' bucket
counts (`Buckets`: admission waits, cycle durations, decision latencies).

An OpenTelemetry `Counter.add` or `Histogram.record` costs a large share of a gang's whole
admission (attributes hashed and cleaned on every call), a dict increment next to nothing: so
nothing of the SDK runs per decision (docs/performance.md, "Metrics on and off"); the instruments
read these tables when a reader collects (`services.common.metric_instruments`).

A pool's counts (keyed by tree and pool) are dropped when the pool is deleted (`Tallies.pool_deleted`,
called by admission's and preemption's folders): what is kept is bounded by the pools that exist."""

from __future__ import annotations

import bisect
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, get_args

from events import GangRequeued
from services.common.service_status import status

if TYPE_CHECKING:
    from events import Envelope


class Buckets:
    """A histogram's counts for fixed bounds (Prometheus `le`: a value lands in the first bucket
    whose bound it does not exceed; the last bucket is +Inf)."""

    __slots__ = ("bounds", "count", "counts", "max", "min", "started", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0
        self.count = 0
        self.min = float("inf")
        self.max = float("-inf")
        self.started = time.time_ns()  # (OTLP: the start of the cumulative counts)

    def observe(self, value: float, times: int = 1) -> None:
        """`value` observed `times` times (the decisions of one batch share their latency)."""
        self.counts[bisect.bisect_left(self.bounds, value)] += times
        self.sum += value * times
        self.count += times
        if value < self.min:
            self.min = value
        if value > self.max:
            self.max = value

    def cumulative(self) -> list[tuple[str, float]]:
        """(le, count at or below) per bound, +Inf last: what Prometheus exposes."""
        out, running = [], 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += n
            out.append(("+Inf" if bound == float("inf") else repr(float(bound)), float(running)))
        return out


# Log-time waits from a gang's enqueue to its admission: milliseconds (a burst) to an hour (a queue).
WAIT_BOUNDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
# Wall time of one admission cycle: milliseconds on a small tree, seconds on 10k pools.
CYCLE_BOUNDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# Wall time from an input's arrival at a service to its decision on the log: milliseconds (a batch
# folded and its decisions acknowledged) to seconds (a fold far behind, a 10k-pool cycle).
LATENCY_BOUNDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


@dataclass(slots=True)
class Tallies:
    """Counts of the decisions this process published, by what the labels say."""

    admitted: dict[tuple[str, str], int] = field(default_factory=dict)  # (tree, pool)
    timed_out: dict[tuple[str, str], int] = field(default_factory=dict)  # (tree, pool)
    requeued: dict[tuple[str, str, str], int] = field(default_factory=dict)  # (tree, pool, cause)
    preempted: dict[tuple[str, str, str], int] = field(default_factory=dict)  # (tree, pool, reason): tasks
    rejected: dict[tuple[str, str, str], int] = field(default_factory=dict)  # (service, tree, rule)
    waits: dict[tuple[str, str], Buckets] = field(default_factory=dict)  # (tree, pool): log seconds
    cycles: dict[str, Buckets] = field(default_factory=dict)  # service: wall seconds
    latency: dict[str, Buckets] = field(default_factory=dict)  # service: wall seconds, input to decision

    def pool_deleted(self, tree: str, path: str) -> None:
        """Forget the counts of pool `path` of `tree` and of any pool below it (its deletion: a
        tree whose pools come and go would otherwise keep an entry for every pool it ever had)."""
        below = path.rstrip("/") + "/"
        tables: tuple[dict[Any, Any], ...] = (self.admitted, self.timed_out, self.requeued, self.preempted, self.waits)
        for table in tables:
            gone = [key for key in table if key[0] == tree and (key[1] == path or key[1].startswith(below))]
            for key in gone:
                del table[key]


TALLIES = Tallies()


def _bump(table: dict[Any, int], key: Any, n: int = 1) -> None:
    table[key] = table.get(key, 0) + n



# The reasons' kinds a preemption is counted under (`reason_kind`), and the causes of a requeue (from
# the model): each leaf pool shows each of them at 0 before the first one, so that a dashboard's
# rate() reads 0, not "no data", for a pool nothing has happened to yet.
REASON_KINDS = ("over_entitlement", "lower_priority", "other")
REQUEUE_CAUSES: tuple[str, ...] = get_args(GangRequeued.model_fields["cause"].annotation)


def reason_kind(reason: str) -> str:
    """A preemption's reason as a label: its kind, not its text (which names numbers and times)."""
    if reason.startswith("over "):
        return "over_entitlement"
    if reason.startswith("makes room"):
        return "lower_priority"
    return "other"


def published(service: str, decisions: Sequence[Envelope], folder: Any) -> None:
    """Count the decisions a service just published (its shell calls this once per append, when
    `RECORDING`). A `GangAdmitted` also records the gang's wait, in log time, from the gang the fold
    holds (`created_at` to `admitted_at`).

    Admissions are nearly every decision: each is counted and its wait put in its bucket inline
    (no call per admission; a tree's gangs looked up once per run of its decisions)."""
    found = status(service)
    found.decisions += len(decisions)
    tallies = TALLIES
    admitted, all_waits = tallies.admitted, tallies.waits
    state = getattr(folder, "state", None)
    trees = getattr(state, "trees", None)
    where, bounds = bisect.bisect_left, WAIT_BOUNDS
    gangs: Any = None
    last_tree = None
    for envelope in decisions:
        event: Any = envelope.event
        kind = event.type
        if kind == "GangAdmitted":
            tree = event.tree
            if tree != last_tree:
                last_tree = tree
                rt = trees.get(tree) if trees is not None else None
                gangs = rt.gangs if rt is not None else None
            key = (tree, event.pool)
            admitted[key] = admitted.get(key, 0) + 1
            gang: Any = gangs.get(event.gang) if gangs is not None else None
            at = gang.admitted_at if gang is not None else None
            if at is None:
                continue
            waits = all_waits.get(key)
            if waits is None:
                waits = all_waits[key] = Buckets(WAIT_BOUNDS)
            wait = at - gang.created_at
            if wait < 0.0:  # (a clock set back between enqueue and admission)
                wait = 0.0
            waits.counts[where(bounds, wait)] += 1
            waits.sum += wait
            waits.count += 1
            if wait < waits.min:
                waits.min = wait
            if wait > waits.max:
                waits.max = wait
        elif kind == "GangTimedOut":
            _bump(tallies.timed_out, (event.tree, event.pool))
        elif kind == "GangRequeued":
            _bump(tallies.requeued, (event.tree, event.pool, event.cause))
        elif kind == "PreemptionRequested":
            _bump(tallies.preempted, (event.tree, event.pool, reason_kind(event.reason)), len(event.tasks))
        elif kind == "InputRejected":
            _bump(tallies.rejected, (service, event.tree or "", event.rule))


def decisions_stored(service: str, arrivals: Sequence[tuple[float, int]], now: float) -> None:
    """Decisions of `service` are on the log at `now` (`time.perf_counter()`): per folded batch,
    when it arrived at the service and how many decisions it made (`run_folder`, when `RECORDING`)."""
    found = TALLIES.latency.get(service)
    if found is None:
        found = TALLIES.latency[service] = Buckets(LATENCY_BOUNDS)
    for arrived, made in arrivals:
        if made:
            found.observe(max(0.0, now - arrived), made)
