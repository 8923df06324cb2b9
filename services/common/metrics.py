"""Metrics: what each service process says about itself and its folds, for Prometheus and OTLP.

Two halves, so that the pipeline pays next to nothing:

- **Recording** (on the hot path): the services' shells write plain Python numbers here (the fold's
  position, events and decisions counted per batch, decisions published counted per type, tree and
  pool into dicts, histogram buckets of admission waits, cycle durations and decision latencies).
  An OpenTelemetry `Counter.add` or `Histogram.record` costs a large share of a gang's whole
  admission (attributes hashed and cleaned on every call), a dict increment next to nothing:
  so nothing of the SDK runs per decision (docs/performance.md, "Metrics on and off"). Until
  `install` turns recording on, the per-decision tallies are skipped (one flag per batch).
- **Reading** (at scrape time): `install` makes an OpenTelemetry `MeterProvider` whose observable
  instruments read those numbers, and the folds' own state (`services.admission.domain.views.
  pool_numbers`, the ledgers, queues and entitlements admission keeps, preemption's starvation
  memory), when a reader collects: the Prometheus exporter's (`Metrics.render_async`, served on
  `/metrics` by `services.common.health_http`: the folds read on the event loop, the page made on a
  worker thread), an OTLP exporter's when
  `OTEL_EXPORTER_OTLP_ENDPOINT` is set, or a test's in-memory reader. Nothing is computed a second
  time; what is summed up the tree is summed by the same function `poolwise explain` and the
  scenario reports use.

The histograms (`HISTOGRAMS`: `poolwise_admission_wait_seconds`, `poolwise_cycle_duration_seconds`,
`poolwise_decision_latency_seconds`) are kept as bucket counts here: the SDK has no observable
histogram, and its synchronous one costs as much per admitted gang as the calls above. A Prometheus
collector of our own puts them on `/metrics` (the same registry), and the OTLP reader's exporter is
wrapped so that every export carries them too (`histograms_exporter`).

A pool's counts (keyed by tree and pool) are dropped when the pool is deleted (`Tallies.pool_deleted`,
called by admission's and preemption's folders): what is kept is bounded by the pools that exist.

Every series names its `service` where two processes could both export it, so that `poolwise up`
can merge its children's pages without a clash (`services.common.exposition`)."""

from __future__ import annotations

import bisect
import contextlib
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, get_args

from events import GangRequeued

# The pool series are read from admission's fold with the functions `explain` and the scenario
# reports use (never a second computation): the metrics depend on admission's domain (pure code;
# it imports nothing of this module's).
from services.admission.domain.job_counts import running_jobs, total_jobs
from services.admission.domain.state import AdmissionState
from services.admission.domain.views import pool_numbers
from services.tree.domain.effective import effective_pools

if TYPE_CHECKING:
    from opentelemetry.metrics import CallbackOptions, Observation
    from opentelemetry.sdk.metrics.export import MetricReader

    from events import Envelope

# --- recording ----------------------------------------------------------------------------------

ROLES = ("starting", "leading", "standby", "per-tree", "lost")


@dataclass(slots=True)
class ServiceStatus:
    """One service of this process: its role, and where its fold stands. Written by the shells
    (`services.common.folding`, the CLI's role callbacks); read at scrape time."""

    name: str
    role: str = "starting"  # ROLES; "per-tree": an instance sharing the trees (`trees_held` of them)
    trees_held: int = 0
    folder: Any = None  # the fold the gauges read (the leader's, or a warm standby's)
    folded: int = 0  # the last log position folded
    events: int = 0  # log messages folded since the process started (leader and standby folds)
    decisions: int = 0  # decisions this process published
    snapshots: Any = None  # the leader's `SnapshotPolicy`, when it keeps snapshots

    @property
    def lease_held(self) -> bool:
        return self.role == "leading" or (self.role == "per-tree" and self.trees_held > 0)


STATUS: dict[str, ServiceStatus] = {}


def status(service: str) -> ServiceStatus:
    found = STATUS.get(service)
    if found is None:
        found = STATUS[service] = ServiceStatus(service)
    return found


# Roles leadership tells of an instance that goes on without a fold for a moment (it stands by,
# or shares the trees): kept by `stopped`, in an entry that holds no fold.
_TOLD = ("standby", "lost", "per-tree")


def stopped(service: str, folder: Any) -> None:
    """`service`'s fold `folder` stopped: its entry goes, and with it the fold it held (the whole
    state, its id records alive: a stopped service's were kept for as long as the process lived).
    Left as it is if another fold took it over since (a standby's, the next term's); kept, holding
    no fold, if leadership told a role meanwhile (`_TOLD`: the instance is still there, `/readyz`
    says why it is not ready, and its counters go on)."""
    found = STATUS.get(service)
    if found is None or (found.folder is not None and found.folder is not folder):
        return
    if found.role in _TOLD:
        found.folder = found.snapshots = None
        return
    del STATUS[service]


def set_role(service: str, role: str, trees_held: int = 0) -> None:
    """A service's role changed (`poolwise serve`'s callbacks; `lost` after a lost lease)."""
    found = status(service)
    found.role, found.trees_held = role, trees_held


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
RECORDING = False  # set by `install`: the shells skip the per-decision tallies while it is off


def _bump(table: dict[Any, int], key: Any, n: int = 1) -> None:
    table[key] = table.get(key, 0) + n


def reset() -> None:
    """Forget every status, tally and the stream's position (a test that runs services again in
    one process; the tables are emptied in place: the instruments hold them)."""
    STATUS.clear()
    for table in (TALLIES.admitted, TALLIES.timed_out, TALLIES.requeued, TALLIES.preempted, TALLIES.rejected,
                  TALLIES.waits, TALLIES.cycles, TALLIES.latency):
        table.clear()
    STREAM.last_seq = None
    READING.at = float("-inf")


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


def cycle_took(service: str, seconds: float) -> None:
    """One decision cycle of `service` took `seconds` of wall time (admission's folder)."""
    if not RECORDING:
        return
    found = TALLIES.cycles.get(service)
    if found is None:
        found = TALLIES.cycles[service] = Buckets(CYCLE_BOUNDS)
    found.observe(seconds)


def decisions_stored(service: str, arrivals: Sequence[tuple[float, int]], now: float) -> None:
    """Decisions of `service` are on the log at `now` (`time.perf_counter()`): per folded batch,
    when it arrived at the service and how many decisions it made (`run_folder`, when `RECORDING`)."""
    found = TALLIES.latency.get(service)
    if found is None:
        found = TALLIES.latency[service] = Buckets(LATENCY_BOUNDS)
    for arrived, made in arrivals:
        if made:
            found.observe(max(0.0, now - arrived), made)


@dataclass(slots=True)
class StreamPosition:
    """The log's last sequence as last asked of NATS (`follow_stream`); None: not known yet."""

    last_seq: int | None = None
    asked_at: float = 0.0  # monotonic


STREAM = StreamPosition()
STALE_AFTER = 10.0  # seconds without an answer from NATS after which a folding service is not ready


async def follow_stream(url: Callable[[], str | None], every: float = 1.0, stream: str | None = None) -> None:
    """Keep `STREAM` current: the stream's last sequence, asked every `every` seconds on a
    connection of its own (what consumer lag and readiness are measured against). Waits for a URL
    (`poolwise up` knows its embedded server's only once it runs). `stream`: another than the
    default (tests)."""
    import anyio

    from services.common.jetstream import JetStreamLog

    while (where := url()) is None:
        await anyio.sleep(0.1)
    while True:  # NATS not there yet: the service waits for it too; this must not end the process
        try:
            log = await (JetStreamLog.connect(where, name="poolwise-metrics") if stream is None
                         else JetStreamLog.connect(where, name="poolwise-metrics", stream=stream))
            break
        except Exception:
            await anyio.sleep(every)
    try:
        while True:
            with contextlib.suppress(Exception):  # NATS away a moment: the last answer stands
                with anyio.fail_after(5):
                    STREAM.last_seq = await log.last_seq()
                STREAM.asked_at = time.monotonic()
            await anyio.sleep(every)
    finally:
        with anyio.CancelScope(shield=True):
            await log.close()


def lag(found: ServiceStatus) -> int | None:
    """How many log positions the service's fold is behind the stream's end (None: unknown, or a
    service that folds nothing here: the tree service's standby starts from its snapshot)."""
    if STREAM.last_seq is None or found.folder is None:
        return None
    return max(0, STREAM.last_seq - found.folded)


def readiness(found: ServiceStatus, max_lag: int) -> tuple[bool, str]:
    """Whether a service is ready (leading, sharing the trees, or a standby; its fold within
    `max_lag` positions of the log's end) and why not."""
    if found.role in ("starting", "lost"):
        return False, found.role
    if found.folder is not None and STREAM.last_seq is not None and time.monotonic() - STREAM.asked_at > STALE_AFTER:
        return False, f"NATS has not said where the log ends for {time.monotonic() - STREAM.asked_at:.0f} s"
    behind = lag(found)
    if found.folder is not None and behind is None:
        return False, "the log's end is not known yet"
    if behind is not None and behind > max_lag:
        return False, f"{behind} positions behind the log (more than {max_lag})"
    return True, found.role


def resident_bytes() -> int | None:
    """This process's resident set size (Linux /proc; None elsewhere)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


# --- reading --------------------------------------------------------------------------------------

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


def cardinality_limits() -> dict[type, int]:
    """Series per instrument a reader keeps: the SDK's default (2,000) is a tree of 500 pools of
    4 kinds; a 10k-pool tree's pools are all wanted."""
    from opentelemetry.sdk.metrics import ObservableCounter, ObservableGauge

    return {ObservableGauge: 1_000_000, ObservableCounter: 1_000_000}


# The histograms: name, help, label names, and the table of `TALLIES` that holds their counts.
HISTOGRAMS: tuple[tuple[str, str, tuple[str, ...], Callable[[], dict[Any, Buckets]]], ...] = (
    ("poolwise_admission_wait_seconds", "log time from a gang's enqueue to its admission, per pool",
     ("tree", "pool"), lambda: TALLIES.waits),
    ("poolwise_cycle_duration_seconds", "wall time of one admission cycle (every due tree)", ("service",),
     lambda: TALLIES.cycles),
    ("poolwise_decision_latency_seconds", "wall time from an input's arrival at the service to its decisions "
     "on the log", ("service",), lambda: TALLIES.latency),
)


def histogram_rows(table: Callable[[], dict[Any, Buckets]]) -> list[tuple[tuple[str, ...], Buckets]]:
    """A histogram's (label values, buckets), read from another thread than the fold's (a dict that
    changes size meanwhile is read again)."""
    for _ in range(10):
        try:
            return [(key if isinstance(key, tuple) else (key,), found) for key, found in list(table().items())]
        except RuntimeError:
            continue
    return []


class _HistogramCollector:
    """The histograms, from `TALLIES`, as Prometheus histogram families."""

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import HistogramMetricFamily

        for name, text, names, table in HISTOGRAMS:
            family = HistogramMetricFamily(name, text, labels=names)
            for values, found in histogram_rows(table):
                family.add_metric(list(values), found.cumulative(), found.sum)
            yield family


def histogram_metrics() -> list[Any]:
    """The histograms as OTLP metrics (the SDK's data model; cumulative since each series began)."""
    import dataclasses

    from opentelemetry.sdk.metrics.export import AggregationTemporality, Histogram, HistogramDataPoint, Metric

    fields = {f.name for f in dataclasses.fields(HistogramDataPoint)}
    exemplars: dict[str, Any] = {"exemplars": []} if "exemplars" in fields else {}  # (an SDK that has them)
    now = time.time_ns()
    out = []
    for name, text, names, table in HISTOGRAMS:
        points = []
        for values, found in histogram_rows(table):
            counts = list(found.counts)
            points.append(HistogramDataPoint(attributes=dict(zip(names, values, strict=True)),
                                             start_time_unix_nano=found.started, time_unix_nano=now,
                                             count=sum(counts), sum=found.sum, bucket_counts=counts,
                                             explicit_bounds=list(found.bounds), min=found.min, max=found.max,
                                             **exemplars))
        if points:
            out.append(Metric(name=name, description=text, unit="s",
                              data=Histogram(data_points=points,
                                             aggregation_temporality=AggregationTemporality.CUMULATIVE)))
    return out


def with_histograms(data: Any) -> Any:
    """`data` (one collection's `MetricsData`) with the histograms added to poolwise's scope."""
    from opentelemetry.sdk.metrics.export import MetricsData, ResourceMetrics, ScopeMetrics
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    extra = histogram_metrics()
    if not extra or not data.resource_metrics:
        return data
    first = data.resource_metrics[0]
    scopes = list(first.scope_metrics)
    at = next((i for i, scope in enumerate(scopes) if scope.scope.name == "poolwise"), None)
    if at is None:
        scopes.append(ScopeMetrics(scope=InstrumentationScope("poolwise"), metrics=extra, schema_url=""))
    else:
        scopes[at] = ScopeMetrics(scope=scopes[at].scope, metrics=[*scopes[at].metrics, *extra],
                                  schema_url=scopes[at].schema_url)
    return MetricsData(resource_metrics=[ResourceMetrics(resource=first.resource, scope_metrics=scopes,
                                                         schema_url=first.schema_url),
                                         *data.resource_metrics[1:]])


def histograms_exporter(inner: Any) -> Any:
    """A metric exporter that sends `inner` every collection with the histograms added: the SDK has
    no observable histogram, and its synchronous one is costly per observation, so the
    bucket counts kept here join each export (the OTLP reader's)."""
    from opentelemetry.sdk.metrics.export import MetricExporter

    class WithHistograms(MetricExporter):
        def __init__(self) -> None:
            super().__init__(preferred_temporality=getattr(inner, "_preferred_temporality", None),
                             preferred_aggregation=getattr(inner, "_preferred_aggregation", None))
            self.inner = inner

        def export(self, metrics_data: Any, timeout_millis: float = 10_000, **kwargs: Any) -> Any:
            return self.inner.export(with_histograms(metrics_data), timeout_millis=timeout_millis, **kwargs)

        def force_flush(self, timeout_millis: float = 10_000) -> bool:
            return bool(self.inner.force_flush(timeout_millis=timeout_millis))

        def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
            self.inner.shutdown(timeout_millis=timeout_millis, **kwargs)

    return WithHistograms()


@dataclass
class Metrics:
    """This process's metrics: `render()` is the Prometheus text page."""

    registry: Any
    provider: Any
    lock: Any = None  # one render at a time (`render_async`)

    def render(self) -> bytes:
        """The page, read and made on this thread (tests; a process with nothing else to do)."""
        READING.refresh()
        return self._page()

    async def render_async(self) -> bytes:
        """The page for a scrape: the folds read on the event loop (where they change: a consistent
        reading), then turned into text on a worker thread. The SDK's collection grows with the
        series (docs/performance.md, "Scraping /metrics"): on the loop it would hold the fold for
        that long; on a thread the loop goes on, sharing the GIL."""
        import anyio

        if self.lock is None:
            self.lock = anyio.Lock()
        async with self.lock:
            READING.refresh()
            READING.frozen = True
            try:
                return await anyio.to_thread.run_sync(self._page)
            finally:
                READING.frozen = False

    def _page(self) -> bytes:
        from prometheus_client import generate_latest

        data: bytes = generate_latest(self.registry)
        return data

    def shutdown(self) -> None:
        global RECORDING
        RECORDING = False
        with contextlib.suppress(Exception):
            self.provider.shutdown()


CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def install(process: str, readers: Sequence[MetricReader] = ()) -> Metrics:
    """Turn recording on and build the provider: the Prometheus reader (its own registry, without
    `target_info` and scope labels, so that the page is poolwise's series alone), `readers` (a
    test's in-memory reader), and an OTLP reader when `OTEL_EXPORTER_OTLP_ENDPOINT` is set (extra
    `poolwise[otlp]`). `process` labels what is per process (RSS). Not installed as the global
    provider: nothing else in the process records through it."""
    global RECORDING
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.resources import Resource
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    prometheus = PrometheusMetricReader(disable_target_info=True, scope_info_enabled=False, registry=registry,
                                        cardinality_limits=cardinality_limits())
    registry.register(_HistogramCollector())
    all_readers: list[MetricReader] = [prometheus, *readers, *otlp_readers()]
    provider = MeterProvider(metric_readers=all_readers,
                             resource=Resource.create({"service.name": f"poolwise-{process}"}))
    register_instruments(provider, process)
    RECORDING = True
    return Metrics(registry, provider)


def otlp_wanted() -> bool:
    """Whether the environment asks for an OTLP export of the metrics."""
    return bool(os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"))


def otlp_readers() -> list[MetricReader]:
    """A periodic OTLP/HTTP reader when `OTEL_EXPORTER_OTLP_ENDPOINT` (or its metrics variant) is
    set, configured by the usual OTEL_* variables; a line on stderr if the extra is missing."""
    if not otlp_wanted():
        return []
    try:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    except ImportError:
        import sys

        print("poolwise: OTEL_EXPORTER_OTLP_ENDPOINT is set but the OTLP exporter is not installed "
              "(pip install 'poolwise[otlp]'); metrics are served on /metrics only", file=sys.stderr)
        return []
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    return [PeriodicExportingMetricReader(histograms_exporter(OTLPMetricExporter()),
                                          cardinality_limits=cardinality_limits())]
