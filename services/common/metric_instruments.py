"""The reading half of the metrics (at scrape time): the OpenTelemetry instruments poolwise
registers (`register_instruments`), every one observable, reading when a reader collects what the
shells recorded (`services.common.service_status`, `services.common.metric_tallies`) and the
folds' own state (`services.admission.domain.views.pool_numbers`, the ledgers, queues and
entitlements admission keeps, preemption's starvation memory), read once per collection
(`READING`). Nothing is computed a second time; what is summed up the tree is summed by the same
function `poolwise explain` and the scenario reports use.

Every series names its `service` where two processes could both export it, so that `poolwise up`
can merge its children's pages without a clash (`services.common.exposition`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

# The pool series are read from admission's fold with the functions `explain` and the scenario
# reports use (never a second computation): the metrics depend on admission's domain (pure code;
# it imports nothing of this module's).
from services.admission.domain.job_counts import running_jobs, total_jobs
from services.admission.domain.state import AdmissionState
from services.admission.domain.views import pool_numbers
from services.common.metric_tallies import REASON_KINDS, REQUEUE_CAUSES, TALLIES
from services.common.service_status import STATUS, STREAM, ServiceStatus, lag, resident_bytes
from services.tree.domain.effective import effective_pools

if TYPE_CHECKING:
    from opentelemetry.metrics import CallbackOptions, Observation

# Labels of each per-pool series: (tree, pool, kind) for resource vectors, (tree, pool) otherwise.
POOL_VECTORS: dict[str, str] = {
    "entitlement": "entitlement per kind, from the last admission cycle",
    "non_slack_entitlement": "entitlement that is not slack",
    "slack_entitlement": "entitlement lent as slack (revocable)",
    "allocation": "what the pool's admitted, unfinished tasks hold (a parent: its leaves' sum)",
    "non_preemptible_allocation": "allocation of non-preemptible gangs",
    "controller_allocation": "allocation of controller gangs",
    "slack_allocation": "allocation of revocable gangs (on slack)",
    "demand": "what the non-revocable gangs in the pool's queues ask for",
    "slack_demand": "what the revocable gangs in the pool's queues ask for",
    "reservation": "the pool's reservation (guarantee)",
    "limit": "the pool's limit",
    "share": "the pool's share (weight)",
}
STARVATION = {"ok": 0, "below_fair_share": 1, "starving": 2}
# One reading of the folds serves every instrument of one collection: `/metrics` reads afresh per
# scrape (`Metrics.render`); another reader (OTLP's, a test's) gets a reading at most this old.
CACHE_SECONDS = 0.2


class _Reading:
    """What the per-pool instruments report, read from the folds once per collection (each
    instrument's callback asks; the first one reads, the others within `CACHE_SECONDS` reuse it).
    `/metrics` reads on the event loop (`refresh`) and then `frozen`, while the SDK turns the reading
    into the page on a worker thread (`Metrics.render_async`)."""

    def __init__(self) -> None:
        self.at = float("-inf")
        self.frozen = False
        self.vectors: dict[str, list[tuple[float, dict[str, str]]]] = {}
        self.scalars: dict[str, list[tuple[float, dict[str, str]]]] = {}
        self.leaves: dict[str, list[tuple[str, str]]] = {}  # service: (tree, leaf pool) its fold holds

    def get(self) -> _Reading:
        if not self.frozen and time.monotonic() - self.at > CACHE_SECONDS:
            self.refresh()
        return self

    def refresh(self) -> None:
        vectors, scalars, leaves = self.vectors, self.scalars, self.leaves
        self.vectors, self.scalars, self.leaves = {}, {}, {}
        try:
            self._read()
        except RuntimeError:  # read from the OTLP exporter's thread while the fold changed a dict:
            self.vectors, self.scalars, self.leaves = vectors, scalars, leaves  # the last reading stands
        self.at = time.monotonic()

    def _add(self, table: dict[str, list[tuple[float, dict[str, str]]]], name: str, value: float,
             labels: dict[str, str]) -> None:
        table.setdefault(name, []).append((float(value), labels))

    def _read(self) -> None:
        admission = STATUS.get("admission")
        state = getattr(admission.folder, "state", None) if admission is not None else None
        if isinstance(state, AdmissionState):
            for tree in list(state.trees):
                rt = state.trees[tree]
                views = effective_pools(state.config, tree)
                numbers = pool_numbers(state, tree, more=True, views=views)
                for pool, vectors in numbers.items():
                    for name, vector in vectors.items():
                        for kind, value in vector.items():
                            self._add(self.vectors, name, value, {"tree": tree, "pool": pool, "kind": kind})
                    labels = {"tree": tree, "pool": pool}
                    ent = rt.entitlements.get(pool)
                    if ent is not None:
                        self._add(self.scalars, "fair_share", ent.fair_share, labels)
                        self._add(self.scalars, "usage_share", ent.usage_share, labels)
                        self._add(self.scalars, "demand_share", ent.demand_share, labels)
                    self._add(self.scalars, "running_jobs", running_jobs(rt, pool), labels)
                    self._add(self.scalars, "jobs", total_jobs(rt, pool), labels)
                    view = views[pool]
                    if view.max_running_jobs is not None:
                        self._add(self.scalars, "max_running_jobs", view.max_running_jobs, labels)
                    if view.max_jobs is not None:
                        self._add(self.scalars, "max_jobs", view.max_jobs, labels)
                # every leaf pool of the tree's configuration (a pool's queues exist only from its first
                # gang, and its counters must be there at 0 before it: `increase()` counts its first)
                parents = {path.rsplit("/", 1)[0] or "/" for path in views}
                leaves = {path for path in views if path != "/" and path not in parents} | set(rt.queues)
                self.leaves.setdefault("admission", []).extend((tree, pool) for pool in sorted(leaves))
                for pool, queues in rt.queues.items():
                    for queue, gangs in queues.items():
                        labels = {"tree": tree, "pool": pool, "queue": queue}
                        self._add(self.scalars, "queue_gangs", len(gangs), labels)
                        self._add(self.scalars, "queue_tasks", sum(len(g.tasks) for g in gangs.members()), labels)
        preemption = STATUS.get("preemption")
        pstate = getattr(preemption.folder, "state", None) if preemption is not None else None
        memory = getattr(pstate, "memory", None)
        if memory is not None:
            for tree in list(memory):
                starvation = list(memory[tree].starvation.items())
                parents = {pool.rsplit("/", 1)[0] or "/" for pool, _ in starvation}
                for pool, starving in starvation:
                    self._add(self.scalars, "starvation_status", STARVATION.get(starving.status, 0),
                              {"tree": tree, "pool": pool})
                    if pool not in parents:
                        self.leaves.setdefault("preemption", []).append((tree, pool))


READING = _Reading()


def _observations(rows: Iterable[tuple[float, dict[str, str]]]) -> list[Observation]:
    from opentelemetry.metrics import Observation

    return [Observation(value, labels) for value, labels in rows]


def _vector(name: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
    return lambda options: _observations(READING.get().vectors.get(name, ()))


def _scalar(name: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
    return lambda options: _observations(READING.get().scalars.get(name, ()))


def _per_service(value: Callable[[ServiceStatus], float | None]) -> Callable[[CallbackOptions], Iterable[Observation]]:
    def observe(options: CallbackOptions) -> Iterable[Observation]:
        from opentelemetry.metrics import Observation

        out = []
        for name, found in list(STATUS.items()):
            got = value(found)
            if got is not None:
                out.append(Observation(got, {"service": name}))
        return out

    return observe


def _table(table: Callable[[], dict[Any, int]], names: tuple[str, ...],
           zeros: Callable[[], Iterable[tuple[str, ...]]] | None = None) -> Callable[[CallbackOptions],
                                                                                   Iterable[Observation]]:
    """A counter's observations: its tally, and 0 for each key of `zeros` it has not counted yet."""
    def observe(options: CallbackOptions) -> Iterable[Observation]:
        from opentelemetry.metrics import Observation

        counts = dict(table())
        if zeros is not None:
            for key in zeros():
                counts.setdefault(key, 0)
        return [Observation(n, dict(zip(names, key, strict=True))) for key, n in counts.items()]

    return observe


def _leaves(service: str, *more: tuple[str, ...]) -> Callable[[], Iterable[tuple[str, ...]]]:
    """(tree, leaf pool) of each leaf pool `service`'s fold holds, times each of `more`'s values."""
    def keys() -> Iterable[tuple[str, ...]]:
        leaves = READING.get().leaves.get(service, ())
        if not more:
            return leaves
        return [(tree, pool, value) for tree, pool in leaves for values in more for value in values]

    return keys


def _snapshot_age_events(found: ServiceStatus) -> float | None:
    policy = found.snapshots
    return None if policy is None else float(max(0, found.folded - policy.saved))


def _snapshot_age_seconds(found: ServiceStatus) -> float | None:
    policy, folder = found.snapshots, found.folder
    if policy is None or folder is None or not policy.last_time:
        return None
    return max(0.0, float(folder.now) - float(policy.last_time))


def register_instruments(provider: Any, process: str) -> None:
    """Every poolwise instrument, on `provider`'s meter (each an observable read at collection)."""
    meter = provider.get_meter("poolwise")
    for name, text in POOL_VECTORS.items():
        meter.create_observable_gauge(f"poolwise_pool_{name}", [_vector(name)], description=text)
    scalars = {
        "poolwise_pool_fair_share": ("fair_share", "the pool's fair share (dominant), from the last cycle"),
        "poolwise_pool_usage_share": ("usage_share", "the pool's usage share (dominant), from the last cycle"),
        "poolwise_pool_demand_share": ("demand_share", "the pool's demand share (dominant), from the last cycle"),
        "poolwise_pool_starvation_status": ("starvation_status",
                                            "0 ok, 1 below fair share, 2 starving (preemption's last pass)"),
        "poolwise_pool_running_jobs": ("running_jobs", "jobs with an admitted gang in the pool"),
        "poolwise_pool_jobs": ("jobs", "jobs with an unfinished gang in the pool"),
        "poolwise_pool_max_running_jobs": ("max_running_jobs", "the pool's max_running_jobs (where set)"),
        "poolwise_pool_max_jobs": ("max_jobs", "the pool's max_jobs (where set)"),
        "poolwise_queue_gangs": ("queue_gangs", "gangs in a leaf pool's queue"),
        "poolwise_queue_tasks": ("queue_tasks", "tasks (members enqueued) of the gangs in a leaf pool's queue"),
    }
    for metric, (name, text) in scalars.items():
        meter.create_observable_gauge(metric, [_scalar(name)], description=text)
    tallies = TALLIES
    counters: dict[str, tuple[Callable[[], dict[Any, int]], tuple[str, ...], str,
                              Callable[[], Iterable[tuple[str, ...]]] | None]] = {
        "poolwise_gangs_admitted": (lambda: tallies.admitted, ("tree", "pool"), "gangs admitted (published here)",
                                    _leaves("admission")),
        "poolwise_gangs_timed_out": (lambda: tallies.timed_out, ("tree", "pool"), "gangs timed out waiting",
                                     _leaves("admission")),
        "poolwise_gangs_requeued": (lambda: tallies.requeued, ("tree", "pool", "cause"),
                                    "gangs requeued (placement timeout, preempted)",
                                    _leaves("admission", REQUEUE_CAUSES)),
        "poolwise_preemptions": (lambda: tallies.preempted, ("tree", "pool", "reason"),
                                 "tasks whose preemption was requested", _leaves("preemption", REASON_KINDS)),
        # (by rule: the rules are many and most never happen; it appears with the first refusal)
        "poolwise_inputs_rejected": (lambda: tallies.rejected, ("service", "tree", "rule"),
                                     "inputs refused, by rule", None),
    }
    for metric, (table, names, text, zeros) in counters.items():
        meter.create_observable_counter(metric, [_table(table, names, zeros)], description=text)
    # (not the tree service's: it folds through a shell of its own, which reports its role only)
    meter.create_observable_counter("poolwise_folded_events", [_per_service(lambda s: _folding(s, s.events))],
                                    description="log messages folded (rate(): folded events per second)")
    meter.create_observable_counter("poolwise_decisions_published",
                                    [_per_service(lambda s: _folding(s, s.decisions))],
                                    description="decisions this process published")
    per_service: dict[str, tuple[Callable[[ServiceStatus], float | None], str]] = {
        "poolwise_consumer_lag_events": (lambda s: _float(lag(s)), "log positions between the fold and the log's end"),
        "poolwise_folded_position": (lambda s: float(s.folded) if s.folder is not None else None,
                                     "the last log position the service folded"),
        "poolwise_lease_held": (lambda s: 1.0 if s.lease_held else 0.0,
                                "1 while this instance leads (or holds at least one tree), else 0"),
        "poolwise_trees_held": (lambda s: float(s.trees_held) if s.role == "per-tree" else None,
                                "trees this instance decides (--trees per-tree)"),
        "poolwise_snapshot_age_events": (_snapshot_age_events, "log positions folded since the newest kept snapshot"),
        "poolwise_snapshot_age_seconds": (_snapshot_age_seconds,
                                          "log time since the newest snapshot was started"),
        "poolwise_fold_parked_seconds": (lambda s: _parked(s, 0), "log time a per-tree fold has waited for a pass "
                                         "held elsewhere to be read (0: it waits for none)"),
        "poolwise_fold_parked_events": (lambda s: _parked(s, 1), "events a per-tree fold holds back while it waits"),
    }
    for metric, (value, text) in per_service.items():
        meter.create_observable_gauge(metric, [_per_service(value)], description=text)

    def rss(options: CallbackOptions) -> Iterable[Observation]:
        from opentelemetry.metrics import Observation

        got = resident_bytes()
        return [] if got is None else [Observation(got, {"service": process})]

    meter.create_observable_gauge("poolwise_process_resident_memory_bytes", [rss], unit="By",
                                  description="the process's resident set size")

    def stream(options: CallbackOptions) -> Iterable[Observation]:
        from opentelemetry.metrics import Observation

        return [] if STREAM.last_seq is None else [Observation(STREAM.last_seq, {"service": process})]

    meter.create_observable_gauge("poolwise_stream_last_seq", [stream],
                                  description="the log's last sequence, as this process last asked NATS")


def _folding(found: ServiceStatus, value: int) -> float | None:
    """`value` of a service that folds here (`folder` set), else nothing to report."""
    return None if found.folder is None else float(value)


def _float(value: int | None) -> float | None:
    return None if value is None else float(value)


def _parked(found: ServiceStatus, index: int) -> float | None:
    """What a fold that can wait at another instance's pass reports of it (`waited()`: the
    log time waited, the events held back), else nothing."""
    waited = getattr(found.folder, "waited", None)
    return None if waited is None else float(waited()[index])
