"""Metrics: what each service process says about itself and its folds, for Prometheus and OTLP.

Two halves, so that the pipeline pays next to nothing:

- **Recording** (on the hot path): the services' shells write plain Python numbers: where each
  service's fold stands (`services.common.service_status`), the decisions published counted per
  type, tree and pool into dicts, and histogram buckets of admission waits, cycle durations and
  decision latencies (`services.common.metric_tallies`). Until `install` turns recording on
  (`RECORDING`), the per-decision tallies are skipped (one flag per batch).
- **Reading** (at scrape time): `install` makes an OpenTelemetry `MeterProvider` whose observable
  instruments (`services.common.metric_instruments`) read those numbers, and the folds' own state,
  when a reader collects: the Prometheus exporter's (`Metrics.render_async`, served on `/metrics`
  by `services.common.health_http`: the folds read on the event loop, the page made on a worker
  thread), an OTLP exporter's when `OTEL_EXPORTER_OTLP_ENDPOINT` is set, or a test's in-memory
  reader; the histograms join both through `services.common.metric_export`.

This module is the switch (`RECORDING`, `install`, `Metrics`) and the one name the shells and
tests import: what the other modules hold is read through here too (`metrics.status`,
`metrics.TALLIES`, ...)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from services.common.metric_export import (
    CONTENT_TYPE,
    HISTOGRAMS,
    HistogramCollector,
    cardinality_limits,
    histogram_metrics,
    histogram_rows,
    histograms_exporter,
    otlp_readers,
    otlp_wanted,
    with_histograms,
)
from services.common.metric_instruments import (
    CACHE_SECONDS,
    POOL_VECTORS,
    READING,
    STARVATION,
    _parked,
    register_instruments,
)
from services.common.metric_tallies import (
    CYCLE_BOUNDS,
    LATENCY_BOUNDS,
    REASON_KINDS,
    REQUEUE_CAUSES,
    TALLIES,
    WAIT_BOUNDS,
    Buckets,
    Tallies,
    decisions_stored,
    published,
    reason_kind,
)
from services.common.service_status import (
    ROLES,
    STALE_AFTER,
    STATUS,
    STREAM,
    ServiceStatus,
    StreamPosition,
    follow_stream,
    lag,
    readiness,
    resident_bytes,
    set_role,
    status,
    stopped,
)

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics.export import MetricReader

__all__ = [
    "CACHE_SECONDS", "CONTENT_TYPE", "CYCLE_BOUNDS", "HISTOGRAMS", "LATENCY_BOUNDS", "POOL_VECTORS", "READING",
    "REASON_KINDS", "RECORDING", "REQUEUE_CAUSES", "ROLES", "STALE_AFTER", "STARVATION", "STATUS", "STREAM",
    "TALLIES", "WAIT_BOUNDS", "Buckets", "HistogramCollector", "Metrics", "ServiceStatus", "StreamPosition",
    "Tallies", "_parked", "cardinality_limits", "cycle_took", "decisions_stored", "follow_stream",
    "histogram_metrics", "histogram_rows", "histograms_exporter", "install", "lag", "otlp_readers", "otlp_wanted",
    "published", "readiness", "reason_kind", "register_instruments", "reset", "resident_bytes", "set_role",
    "status", "stopped", "with_histograms",
]

RECORDING = False  # set by `install`: the shells skip the per-decision tallies while it is off


def cycle_took(service: str, seconds: float) -> None:
    """One decision cycle of `service` took `seconds` of wall time (admission's folder)."""
    if not RECORDING:
        return
    found = TALLIES.cycles.get(service)
    if found is None:
        found = TALLIES.cycles[service] = Buckets(CYCLE_BOUNDS)
    found.observe(seconds)


def reset() -> None:
    """Forget every status, tally and the stream's position (a test that runs services again in
    one process; the tables are emptied in place: the instruments hold them)."""
    STATUS.clear()
    for table in (TALLIES.admitted, TALLIES.timed_out, TALLIES.requeued, TALLIES.preempted, TALLIES.rejected,
                  TALLIES.waits, TALLIES.cycles, TALLIES.latency):
        table.clear()
    STREAM.last_seq = None
    READING.at = float("-inf")


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
    registry.register(HistogramCollector())
    all_readers: list[MetricReader] = [prometheus, *readers, *otlp_readers()]
    provider = MeterProvider(metric_readers=all_readers,
                             resource=Resource.create({"service.name": f"poolwise-{process}"}))
    register_instruments(provider, process)
    RECORDING = True
    return Metrics(registry, provider)
