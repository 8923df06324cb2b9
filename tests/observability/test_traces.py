"""One gang's trace, end to end on the test nats-server: the SDK enqueues it (a span, its context in
the envelope and the NATS headers), admission's cycle admits it (the cycle a span linking it, the
gang a span in its own trace), preemption asks for its tasks back (a span in the same trace). Read
with the OpenTelemetry SDK's in-memory span exporter. The same run's metrics: the decision
latency histogram, and every histogram in an OTLP-shaped export; `replay --verify` passes on the
log the traced run wrote."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import pytest
from opentelemetry.sdk.metrics.export import (
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricExporter,
    MetricExportResult,
    MetricsData,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from bench.workload import envelope
from events import HostRegistered, PoolConfig, PoolConfigChanged, TreeConfigured, TreeOptions, decode_all
from events.config import GangTimeoutOptions, PreemptionOptions
from events.subjects import STREAM
from services.common import metrics, tracing
from services.common.jetstream import JetStreamLog
from services.launcher import start_services
from services.sdk import Submitter
from services.tools.replay.reader import verify_log
from tests.conftest import reset_stream

pytestmark = pytest.mark.anyio

T0 = 1_767_225_600.0
TREE = "t"
WAIT = 60.0  # seconds: a hung system fails the test instead of hanging the run


class Exported(MetricExporter):
    """What an OTLP exporter would be handed: every export kept (in memory)."""

    def __init__(self) -> None:
        super().__init__()
        self.exports: list[MetricsData] = []

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any) -> MetricExportResult:
        self.exports.append(metrics_data)
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        pass


@dataclass
class Run:
    spans: list[ReadableSpan]
    log: list[Any]  # (seq, subject, envelope) of every event
    headers: dict[int, dict[str, str]]  # seq -> NATS headers
    exported: Exported
    uncounted: dict[str, int]  # decisions published while rebuilding
    page: str
    verified: Any


@pytest.fixture(scope="module")
async def run(nats_url: str) -> AsyncIterator[Run]:
    """Gang a0 (10 tasks of 1 cpu) fills the cluster from pool /a; b0 (3 cpu) arrives in /b, which
    reserves 3: preemption asks a0 back (a gang runs whole: its 10 tasks)."""
    log = await JetStreamLog.connect(nats_url, stream=f"{STREAM}_TRACES")
    await reset_stream(log)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(provider)
    metrics.reset()
    exported = Exported()
    reader = PeriodicExportingMetricReader(metrics.histograms_exporter(exported), export_interval_millis=3_600_000)
    installed = metrics.install("test", readers=[reader])
    config = [
        TreeConfigured(tree=TREE, options=TreeOptions(
            resources=["cpu"], preemption=PreemptionOptions(grace=0),
            gang_timeout=GangTimeoutOptions(default=3600.0, limit=3600.0, jitter=0.0))),
        PoolConfigChanged(tree=TREE, path="/a", created=True, config=PoolConfig()),
        PoolConfigChanged(tree=TREE, path="/b", created=True, config=PoolConfig(reservation={"cpu": 3.0})),
        HostRegistered(host="h1", resources={"cpu": 10.0}),
    ]
    await log.append([envelope(e, f"setup-{i}", T0, source="tree") for i, e in enumerate(config)])
    try:
        async with anyio.create_task_group() as tg:
            await start_services(tg, log, ["admission", "preemption"], None, leadership=False)
            # the first cycle (of the configuration) decided; preemption may publish its pass while it
            # rebuilds (that one has no arrival: not in the latency): what the services published
            # so far and did not count, per service
            await _until(log, lambda envelopes: sum(e.source == "preemption" for e in envelopes) >= 1)
            await anyio.sleep(0.5)
            uncounted = {service: n - metrics.status(service).decisions
                         for service, n in _published(await log.read()).items()}
            sdk = Submitter(log=log, tree=TREE, source="sdk:test")
            await sdk.enqueue(gang="a0", pool="/a", count=10, resources={"cpu": 1.0}, job="ja")
            await _until(log, lambda events: any(e.type == "GangAdmitted" for e in events))
            for i in range(10):
                await sdk.task_state(f"a0/{i}", "a0", "running")
            await sdk.enqueue(gang="b0", pool="/b", count=1, resources={"cpu": 3.0}, job="jb", preemptible=False)
            await _until(log, lambda events: any(e.type == "PreemptionRequested" for e in events))
            await _until(log, lambda envelopes: all(  # (no decision cut off between stored and counted)
                n - metrics.status(service).decisions == uncounted[service]
                for service, n in _published_envelopes(envelopes).items()))
            tg.cancel_scope.cancel()
        stored = await log.read()
        page = installed.render().decode()
        reader.force_flush()  # one collection, exported
        headers = {}
        for message in stored:
            raw = await log.jsm.get_msg(log.stream, message.seq)
            headers[message.seq] = dict(raw.headers or {})
        tracing.uninstall()  # (the replay makes no spans, like a replay without tracing)
        verified = await verify_log(log)
        yield Run(spans=list(exporter.get_finished_spans()),
                  log=[(m.seq, m.subject, e) for m in stored for e in decode_all(m.data)],
                  headers=headers, exported=exported, uncounted=uncounted, page=page, verified=verified)
    finally:
        tracing.uninstall()
        installed.shutdown()
        metrics.reset()
        await log.delete_stream()
        await log.close()


async def _until(log: JetStreamLog, done: Any) -> None:
    with anyio.fail_after(WAIT):
        while not done([e for m in await log.read() for e in decode_all(m.data)]):
            await anyio.sleep(0.05)


def _published_envelopes(envelopes: Sequence[Any]) -> dict[str, int]:
    return {service: sum(e.source == service for e in envelopes) for service in ("admission", "preemption")}


def _published(stored: Sequence[Any]) -> dict[str, int]:
    """Decisions on the log per service that made them."""
    return _published_envelopes([e for m in stored for e in decode_all(m.data)])


def named(spans: Sequence[ReadableSpan], name: str, gang: str | None = None) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name
            and (gang is None or (s.attributes or {}).get("poolwise.gang") == gang)]


def parent_of(traced: dict[str, str] | None) -> tuple[int, int]:
    assert traced is not None
    _, trace_id, span_id, flags = traced["traceparent"].split("-")
    assert int(flags, 16) & 1  # sampled
    return int(trace_id, 16), int(span_id, 16)


async def test_one_gang_is_one_trace_from_enqueue_to_preemption(run: Run) -> None:
    spans = run.spans
    (enqueue,) = named(spans, "enqueue", "a0")
    assert enqueue.context is not None
    trace_id = enqueue.context.trace_id
    # the enqueue's context rides in the envelope and in the message's NATS headers
    (seq, enqueued) = next((s, e) for s, _, e in run.log if e.type == "GangEnqueued" and e.event.gang == "a0")
    assert parent_of(enqueued.trace) == (trace_id, enqueue.context.span_id)
    assert run.headers[seq]["traceparent"] == enqueued.trace["traceparent"]
    assert enqueued.id == run.headers[seq]["Nats-Msg-Id"]

    # admission: the gang's span, a child of its enqueue, linked to the cycle that admitted it
    (admitted,) = named(spans, "admission GangAdmitted", "a0")
    assert admitted.context is not None and admitted.parent is not None
    assert (admitted.context.trace_id, admitted.parent.span_id) == (trace_id, enqueue.context.span_id)
    cycles = [s for s in named(spans, "admission cycle")
              if any(link.context.span_id == enqueue.context.span_id for link in s.links)]
    assert len(cycles) == 1  # one cycle decided a0
    (cycle,) = cycles
    assert cycle.context is not None
    assert [link.context.span_id for link in admitted.links] == [cycle.context.span_id]
    assert cycle.context.trace_id != trace_id  # the cycle is the service's (its batch's trace), linking the gangs
    assert cycle.attributes is not None and cycle.attributes["poolwise.gangs_traced"] == 1
    assert cycle.parent is not None and named(spans, "fold batch")  # a child of its batch's span
    decision = next(e for _, _, e in run.log if e.type == "GangAdmitted" and e.event.gang == "a0")
    assert parent_of(decision.trace) == (trace_id, admitted.context.span_id)  # the decision carries it
    assert admitted.attributes is not None and admitted.attributes["poolwise.decision"] == decision.id

    # preemption: its request for a0's tasks is in the same trace, below admission's decision
    requested = named(spans, "preemption requested", "a0")
    assert len(requested) == 1
    (preempt,) = requested
    assert preempt.context is not None and preempt.parent is not None
    assert (preempt.context.trace_id, preempt.parent.span_id) == (trace_id, admitted.context.span_id)
    asked = [e for _, _, e in run.log if e.type == "PreemptionRequested"]
    assert [e.event.gang for e in asked] == ["a0"] and len(asked[0].event.tasks) == 10  # (a gang goes whole)
    assert parent_of(asked[0].trace) == (trace_id, preempt.context.span_id)
    assert preempt.attributes is not None and preempt.attributes["poolwise.tasks"] == 10

    # the other gang is a trace of its own; one trace per gang, from enqueue on
    (other,) = named(spans, "enqueue", "b0")
    assert other.context is not None and other.context.trace_id != trace_id
    in_trace = {s.name for s in spans if s.context is not None and s.context.trace_id == trace_id}
    assert in_trace == {"enqueue", "admission GangAdmitted", "preemption requested"}


async def test_the_traced_log_replays_to_the_same_decisions(run: Run) -> None:
    report = run.verified
    assert report.ok, report
    assert report.count("GangAdmitted").matched == 2
    assert report.count("PreemptionRequested").matched == 1


def histogram_points(metric: Metric) -> Sequence[HistogramDataPoint]:
    assert isinstance(metric.data, Histogram), metric
    return metric.data.data_points


async def test_decision_latency_and_every_histogram_in_the_otlp_export(run: Run) -> None:
    admission = [e for _, _, e in run.log if e.source == "admission"]
    assert run.uncounted["admission"] == 0  # (every one of admission's made live)
    assert 'poolwise_decision_latency_seconds_count{service="admission"} ' + f"{float(len(admission))}" in run.page
    assert len(run.exported.exports) == 1  # the collection the test asked for
    (data,) = run.exported.exports
    found = {m.name: m for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
    assert {"poolwise_admission_wait_seconds", "poolwise_cycle_duration_seconds",
            "poolwise_decision_latency_seconds", "poolwise_gangs_admitted"} <= set(found)
    latency = {tuple(sorted((p.attributes or {}).items())): p
               for p in histogram_points(found["poolwise_decision_latency_seconds"])}
    point = latency[(("service", "admission"),)]
    assert point.count == len(admission) == sum(point.bucket_counts)
    assert 0.0 < point.min <= point.max < WAIT
    assert list(point.explicit_bounds) == list(metrics.LATENCY_BOUNDS)
    preemption = [e for _, _, e in run.log if e.source == "preemption"]
    assert run.uncounted["preemption"] <= 1
    assert latency[(("service", "preemption"),)].count == len(preemption) - run.uncounted["preemption"] > 0
    waits = histogram_points(found["poolwise_admission_wait_seconds"])
    assert {((p.attributes or {})["pool"], p.count) for p in waits} == {("/a", 1), ("/b", 1)}


async def test_cli_submit_starts_the_gangs_trace(fresh_stream: str) -> None:
    """`poolwise submit` with `POOLWISE_TRACE=console`: its process prints the enqueue span, and the
    stored gang carries that span's context (a child interpreter: a process sets its provider once)."""
    env = {**os.environ, "NATS_URL": fresh_stream, "POOLWISE_TRACE": "console"}
    done = await anyio.run_process([sys.executable, "-m", "services.tools.cli.main", "submit", "--gang", "cli-g",
                                    "--pool", "/a", "--resources", "cpu=1"], env=env, check=False)
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()
    printed = json.loads(out[out.index("{"):out.rindex("}") + 1])
    assert printed["name"] == "enqueue" and printed["kind"] == "SpanKind.PRODUCER"
    assert printed["attributes"]["poolwise.gang"] == "cli-g"
    log = await JetStreamLog.connect(fresh_stream)
    try:
        (stored,) = [e for m in await log.read() for e in decode_all(m.data)]
    finally:
        await log.close()
    trace_id, span_id = parent_of(stored.trace)
    assert (f"0x{trace_id:032x}", f"0x{span_id:016x}") == (printed["context"]["trace_id"],
                                                            printed["context"]["span_id"])
