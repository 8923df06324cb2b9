"""The metrics' ways out beside the Prometheus reader's page: the histograms (kept as bucket
counts in `services.common.metric_tallies`: the SDK has no observable histogram, and its
synchronous one costs as much per admitted gang as a counter's call) as a Prometheus collector of
our own (`HistogramCollector`, on `/metrics`' registry) and as OTLP metrics joined to every export
of the OTLP reader (`histograms_exporter`); that reader, when `OTEL_EXPORTER_OTLP_ENDPOINT` is set
(`otlp_readers`); and the readers' cardinality limits."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from services.common.metric_tallies import TALLIES, Buckets

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics.export import MetricReader

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


class HistogramCollector:
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


CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


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
