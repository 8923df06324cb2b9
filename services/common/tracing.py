"""Traces (OpenTelemetry): one gang's trace from its enqueue, through the admission cycle that
decided it, to any preemption of its tasks.

- **Submitters** (the SDK, and the CLI through it) start a span per call (`enqueue`,
  `task state`, `cancel`) and, when it is sampled, carry its W3C context (`traceparent`,
  `tracestate`) in the envelope's `trace` field and in the message's NATS headers (`producing`).
- **Admission** remembers the sampled context of each gang it folds (`GangTraces`, keyed by tree
  and gang, dropped when the gang ends, never more than `GangTraces.LIMIT`). A cycle that decides
  anything is one span (`admission cycle`, a child of the batch's `fold batch` span, or, in a batch
  the sampler left out, of the first sampled gang's enqueue; none when neither is sampled) with a
  link to each sampled gang it decided; each such gang gets a short span in its own trace (`admission
  GangAdmitted`, ...: a child of its enqueue span, linked to the cycle), and the decision's
  envelope carries that span's context (`decided`).
- A task state report or a cancel carrying a sampled context gets a span in its sender's trace
  when admission folds it, linked to the gang's trace (`received`).
- **Preemption** remembers the gangs' contexts from their enqueue and from admission's
  decisions; a `PreemptionRequested` gets a span in its gang's trace, and carries it (`preempted`).
- **The tree service**'s live batch that holds sampled work is a span in the first such gang's
  trace, linked to the others (`folded`).

Cost: nothing unless a provider is configured (`ON` is False: one flag read per event). Spans are
made only while a service folds a live batch (`LIVE`, set by `services.common.folding.run_folder`),
not while it rebuilds or stands by, and only for gangs whose enqueue was sampled: the sampler
(`OTEL_TRACES_SAMPLER`/`_ARG`, or `POOLWISE_TRACE_RATIO`) decides at the submitter, and the
services follow (parent-based). A recorded SDK span costs a sizeable part of a gang's admission,
and an unsampled one still costs the SDK's bookkeeping: so a batch has one span (started, not
made current), a cycle one only when it is recorded, a sampled gang one, an unsampled gang none
(measured: docs/performance.md, "Metrics on and off (issue 20)").

Determinism: contexts are carried, never read by a decision. A decision's `trace` differs
between the live run and a replay (a replay makes no spans); `poolwise replay --verify` ignores
the field, and decision ids never include it. Domain code never sees any of this."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from functools import cache
from time import time_ns
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Link, NonRecordingSpan, Span, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from events import Envelope

ON = False  # a provider of poolwise's records spans (`configure`, `install`): the folders remember contexts
LIVE = False  # a service is folding a live batch (`run_folder`): spans are made only then
BATCH: Batch | None = None  # that batch (`live(service)`): its span is the parent of its cycles' spans
_installed: trace.Tracer | None = None
_provider: Any = None  # the provider `configure` made (flushed by `flush`)
_configured = False


# --- set-up ---------------------------------------------------------------------------------------


def configure(service: str = "poolwise") -> None:
    """Install a tracer provider once, if the environment asks for spans (called when `poolwise
    serve` / `up --single-process` start their services, and by the CLI's submit commands):

    - `POOLWISE_TRACE=console` or `OTEL_TRACES_EXPORTER=console`: spans printed (stdout);
    - `OTEL_EXPORTER_OTLP_ENDPOINT` (or `..._TRACES_ENDPOINT`) set, or `OTEL_TRACES_EXPORTER=otlp`:
      the OTLP/HTTP exporter (extra `poolwise[otlp]`; without it, one line on stderr);
    - else, if the operator's own code installed an SDK provider before poolwise started, that one.

    Sampling: the SDK's `OTEL_TRACES_SAMPLER`/`OTEL_TRACES_SAMPLER_ARG`, or `POOLWISE_TRACE_RATIO`
    (a fraction of new traces, parent-based). `service` names the process (`service.name`)."""
    global _configured
    if _configured:
        return
    _configured = True
    exporter = _exporter()
    if exporter is None:
        if _sdk_provider(trace.get_tracer_provider()):
            install(trace.get_tracer_provider())
        return
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": service}), sampler=_sampler())
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    install(provider)
    global _provider
    _provider = provider


def flush(timeout: float = 5.0) -> None:
    """Send the spans `configure`'s provider still holds (a short-lived process: the CLI)."""
    if _provider is not None:
        _provider.force_flush(int(timeout * 1000))


def _exporter() -> Any:
    wanted = os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if os.environ.get("POOLWISE_TRACE", "").strip().lower() == "console" or wanted == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if wanted == "none":
        return None
    if wanted == "otlp" or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") \
            or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            print("poolwise: an OTLP endpoint is set but the OTLP exporter is not installed "
                  "(pip install 'poolwise[otlp]'); no spans are exported", file=sys.stderr)
            return None
        return OTLPSpanExporter()
    return None


def _sampler() -> Any:
    """`POOLWISE_TRACE_RATIO` as a parent-based ratio sampler; else None (the SDK reads
    `OTEL_TRACES_SAMPLER`). A ratio that is not a number from 0 to 1 is said on stderr and ignored."""
    text = os.environ.get("POOLWISE_TRACE_RATIO")
    if text is None:
        return None
    try:
        ratio = float(text)
        if not 0.0 <= ratio <= 1.0:
            raise ValueError
    except ValueError:
        print(f"poolwise: POOLWISE_TRACE_RATIO: a fraction from 0 to 1, got {text!r}; ignored", file=sys.stderr)
        return None
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    return ParentBased(TraceIdRatioBased(ratio))


def _sdk_provider(provider: Any) -> bool:
    """Whether `provider` records (an SDK one), not the API's proxy or no-op."""
    return not isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider))


def install(provider: Any) -> None:
    """Make poolwise's spans on `provider` and turn remembering on (`configure`; a test's provider
    with an in-memory exporter: not the process's global one, which can be set only once)."""
    global ON, _installed
    _installed = provider.get_tracer("poolwise")
    ON = True


def uninstall() -> None:
    """Back to no spans (a test's end)."""
    global ON, LIVE, BATCH, _installed
    _installed, ON, LIVE, BATCH = None, False, False, None


@cache
def _global_tracer() -> trace.Tracer:
    """The global tracer, looked up once: a proxy that follows whatever provider is installed,
    before or after (looking it up per span read the environment each time)."""
    return trace.get_tracer("poolwise")


def tracer() -> trace.Tracer:
    return _installed if _installed is not None else _global_tracer()


def active() -> bool:
    """Whether spans are recorded here: poolwise's provider, or an SDK provider the application
    installed globally (the SDK's users configure OpenTelemetry themselves)."""
    return ON or _sdk_provider(trace.get_tracer_provider())


@contextmanager
def span(name: str, **attributes: Any) -> Iterator[Span]:
    """A span on the poolwise tracer (a no-op span when nothing records)."""
    with tracer().start_as_current_span(name, attributes=attributes) as current:
        yield current


class Batch:
    """A live batch being folded (`live(service)`): its span, `fold batch`, is made only when it is
    needed, started at the batch's start: as the parent of a cycle's span (`decided`), or at the
    end if the batch decided anything (`decisions`, set by the shell) or raised. A batch that
    only folds makes none: under a trickle most batches are one input and no decision, and an
    unsampled span still costs the SDK's bookkeeping, more when made current, per batch."""

    __slots__ = ("decisions", "events", "made", "service", "start")

    def __init__(self, service: str, events: int) -> None:
        self.service, self.events, self.start = service, events, time_ns()
        self.decisions = 0
        self.made: Span | None = None

    def span(self) -> Span:
        if self.made is None:
            self.made = tracer().start_span("fold batch", start_time=self.start,
                                            attributes={"service": self.service, "events": self.events})
        return self.made


@contextmanager
def live(service: str | None = None, events: int = 0) -> Iterator[Batch | None]:
    """A live batch is folded (`run_folder`): its cycles and preemptions make spans. With `service`,
    the batch (`Batch`: its span, the parent of its cycles' spans, made when needed), yielded;
    None while no provider of poolwise's records.

    The batch's span is never made current (no context attached and detached per batch): the
    cycles name it as their parent. An unsampled batch makes no cycle span at all unless the
    cycle decided a sampled gang (`decided`): a parent-based sampler would not record it."""
    global LIVE, BATCH
    batch = Batch(service, events) if ON and service is not None else None
    LIVE, BATCH = ON, batch
    try:
        yield batch
    except BaseException as exc:
        if batch is not None and (made := batch.span()).is_recording():
            made.record_exception(exc)
            made.set_status(Status(StatusCode.ERROR, type(exc).__name__))
        raise
    finally:
        LIVE, BATCH = False, None
        if batch is not None and (batch.made is not None or batch.decisions):
            made = batch.span()
            made.set_attribute("decisions", batch.decisions)
            made.end()


# --- carrying a context ---------------------------------------------------------------------------


def carrier_of(current: Span) -> dict[str, str] | None:
    """`current`'s W3C context as an envelope's `trace` (`traceparent`, and `tracestate` if any);
    None for an invalid span (nothing records)."""
    found = current.get_span_context()
    if not found.is_valid:
        return None
    out = {"traceparent": f"00-{found.trace_id:032x}-{found.span_id:016x}-{int(found.trace_flags):02x}"}
    if found.trace_state:
        out["tracestate"] = found.trace_state.to_header()
    return out


_SAMPLED = frozenset("13579bdfBDF")  # the last hex digit of the flags, with bit 0 (sampled) set


def context_of(carried: dict[str, str] | None) -> SpanContext | None:
    """The sampled remote context an envelope's `trace` names (None: none, malformed, or not
    sampled: nothing is recorded below it)."""
    text = carried.get("traceparent") if carried else None
    if not text or len(text) != 55 or text[54] not in _SAMPLED:  # 00-<32>-<16>-<flags>: the sampled bit set
        return None
    try:
        version, trace_id, span_id, flags = text.split("-")
        found = SpanContext(int(trace_id, 16), int(span_id, 16), is_remote=True,
                            trace_flags=TraceFlags(int(flags, 16)))
    except ValueError:
        return None
    return found if found.is_valid and found.trace_flags.sampled and version != "ff" else None


@contextmanager
def producing(name: str, **attributes: Any) -> Iterator[dict[str, str] | None]:
    """A submitter's span (kind producer, a child of the caller's current span, not made current:
    the spans of several gangs published together are siblings) around one call; yields the context
    to carry: None when nothing records (no span is made) or the sampler left this one out (the
    services would make no span below it: the envelope and the log are spared its 70 bytes). An
    exception ends it with an error status."""
    if not active():
        yield None
        return
    made = tracer().start_span(name, kind=SpanKind.PRODUCER, attributes=attributes)
    try:
        yield carrier_of(made) if made.get_span_context().trace_flags.sampled else None
    except BaseException as exc:
        made.record_exception(exc)
        made.set_status(Status(StatusCode.ERROR, type(exc).__name__))
        raise
    finally:
        made.end()


def with_trace(envelope: Envelope, carried: dict[str, str] | None) -> Envelope:
    """`envelope` carrying `carried` (a copy: envelopes are frozen)."""
    return envelope.model_copy(update={"trace": carried})


# --- remembering gangs' contexts (the services' folds) --------------------------------------------

STARTS = frozenset({"GangEnqueued", "GangAdmitted"})  # their envelope's context is the gang's from then on
ENDS = frozenset({"GangFinished", "GangTimedOut"})
DECIDED = frozenset({"GangAdmitted", "GangTimedOut", "GangRequeued", "GangMovedToQueue"})  # a cycle's, per gang


class GangTraces:
    """The carried, sampled context of each gang a fold holds, keyed by (tree, gang): from its
    enqueue (and, in preemption's fold, from admission's decision), dropped when the gang ends. At most `LIMIT`
    (the oldest go first): it never grows with the history. Not in snapshots: after a start from
    one, the held gangs' contexts are read back from their enqueues on the log
    (`services.common.trace_recovery`)."""

    LIMIT = 100_000
    __slots__ = ("found",)

    def __init__(self) -> None:
        self.found: dict[tuple[str, str], dict[str, str]] = {}

    def see(self, envelope: Envelope) -> None:
        """Fold one envelope (an input, or a decision): remember its gang's context if it starts one
        and is sampled (an unsampled gang is never looked up again: it costs no span), or forget
        it if the gang ends. Cheap for the rest: an envelope without a context, while nothing is
        remembered, is not looked into."""
        carried = envelope.trace
        found = self.found
        if carried is None and not found:
            return
        event: Any = envelope.event
        kind = event.type
        if kind in ENDS:
            found.pop((event.tree, event.gang), None)
        elif carried is not None and kind in STARTS:
            text = carried.get("traceparent")
            if text and len(text) == 55 and text[54] in _SAMPLED:
                key = (event.tree, event.gang)
                found.pop(key, None)  # (re-inserted last: the newest)
                found[key] = carried
                if len(found) > self.LIMIT:
                    del found[next(iter(found))]

    def see_all(self, envelopes: Sequence[Envelope]) -> None:
        for envelope in envelopes:
            self.see(envelope)

    def context(self, tree: str, gang: str) -> SpanContext | None:
        return context_of(self.found.get((tree, gang)))


def decided(envelopes: list[Envelope], took: float, gangs: GangTraces) -> list[Envelope]:
    """An admission cycle's decisions (`took` seconds of wall time, ending now), while `LIVE`: the
    cycle's span (a child of the batch's, or of the first sampled gang's enqueue when the batch is
    not sampled), linked to each sampled gang it decided; a span per such
    gang in the gang's trace (linked to the cycle), whose context the decision then carries.
    Returns the envelopes (those of traced gangs copied with their context).

    Unsampled work is skipped at once: the decisions are looked into only while sampled gangs are
    remembered, a cycle of an unsampled batch that decided no sampled gang makes no span (an
    unsampled span still costs the SDK's bookkeeping), and its attributes are counted only when it
    records."""
    parents: list[tuple[int, SpanContext]] = []
    remembered = gangs.found
    if remembered:
        for index, envelope in enumerate(envelopes):
            event: Any = envelope.event
            kind = event.type
            if kind in DECIDED:
                carried = remembered.get((event.tree, event.gang))  # (only sampled ones are kept)
                found = context_of(carried) if carried is not None else None
                if found is not None:
                    parents.append((index, found))
            elif kind in ENDS:
                remembered.pop((event.tree, event.gang), None)
    batch = BATCH.span() if BATCH is not None else None
    parent: Any = None  # (the current context: a test's, a bench's)
    if batch is not None:
        if batch.is_recording():
            parent = trace.set_span_in_context(batch)
        elif not parents:
            return envelopes
        else:  # in the first sampled gang's trace, so that it is recorded and the gangs' links lead to it
            parent = trace.set_span_in_context(NonRecordingSpan(parents[0][1]))
    end = time_ns()
    start = end - int(took * 1e9)
    use = tracer()
    cycle = use.start_span("admission cycle", context=parent, start_time=start, links=[Link(c) for _, c in parents])
    if cycle.is_recording():
        first: Any = envelopes[0].event if envelopes else None
        cycle.set_attributes({"poolwise.decisions": len(envelopes),
                              "poolwise.gangs_decided": sum(1 for e in envelopes if e.event.type in DECIDED),
                              "poolwise.gangs_traced": len(parents),
                              "poolwise.basis": envelopes[0].basis or 0 if envelopes else 0,
                              "poolwise.tree": getattr(first, "tree", None) or ""})
    cycle.end(end_time=end)
    if not parents:
        return envelopes
    back = [Link(cycle.get_span_context())]
    out = list(envelopes)
    for index, parent in parents:
        envelope = out[index]
        event = envelope.event
        made = use.start_span(f"admission {event.type}", context=trace.set_span_in_context(NonRecordingSpan(parent)),
                              start_time=start, links=back, attributes=_gang_attributes(envelope))
        made.end(end_time=end)
        out[index] = with_trace(envelope, carrier_of(made))
        gangs.see(out[index])  # (its context from now on: admission's span; a timed-out gang's forgotten)
    return out


def folded(service: str, start: int, events: int, decoded: Iterable[list[Envelope]]) -> None:
    """A live batch a service folded without deciding on it (the tree service's: gangs' inputs and
    admission's decisions, for its state and its projections), started at `start` (ns): one span,
    `fold batch`, only when the batch holds sampled work, so that a gang's trace shows that fold
    too. It is a child of the first sampled envelope's span (the trickle's case: a batch is one
    gang's enqueue, or one decision), and linked to the others' (each link names its gang: a span
    has one parent). A batch without sampled work costs a look at each envelope's `trace`."""
    sampled: list[tuple[SpanContext, Any]] = []
    for envelopes in decoded:
        for envelope in envelopes:
            if envelope.trace is not None and (found := context_of(envelope.trace)) is not None:
                sampled.append((found, envelope.event))
    if not sampled:
        return
    parent, first = sampled[0]
    links = [Link(found, {"poolwise.gang": getattr(event, "gang", None) or "", "poolwise.event": event.type})
             for found, event in sampled[1:LINKS + 1]]
    made = tracer().start_span("fold batch", context=trace.set_span_in_context(NonRecordingSpan(parent)),
                               start_time=start, links=links,
                               attributes={"service": service, "events": events, "poolwise.traced": len(sampled),
                                           "poolwise.tree": getattr(first, "tree", None) or "",
                                           "poolwise.gang": getattr(first, "gang", None) or "",
                                           "poolwise.event": first.type})
    made.end()


LINKS = 127  # the other sampled envelopes a tree-service batch links (the SDK keeps 128 links a span)


FOLLOWED = frozenset({"TaskStateChanged", "GangCancelled"})  # inputs about a gang that admission joins to it


def received(envelope: Envelope, gangs: GangTraces) -> None:
    """A task state report or a cancel that carries a sampled context, folded by admission while
    `LIVE`: a span in the sender's trace (a child of its `task state` or `cancel` span), linked to
    the gang's own trace where admission remembers it (its enqueue, or admission's decision): the
    report and the gang it is about are joined both ways. Nothing for anything else (only inputs
    carrying a context get here)."""
    event: Any = envelope.event
    if event.type not in FOLLOWED:
        return
    parent = context_of(envelope.trace)
    if parent is None:
        return
    gang = gangs.context(event.tree, event.gang)
    attributes = {"poolwise.tree": event.tree, "poolwise.gang": event.gang, "poolwise.input": envelope.id}
    if event.type == "TaskStateChanged":
        attributes |= {"poolwise.task": event.task, "poolwise.state": str(event.state)}
    made = tracer().start_span(f"admission {event.type}", context=trace.set_span_in_context(NonRecordingSpan(parent)),
                               links=[Link(gang)] if gang is not None else None, attributes=attributes)
    made.end()


def preempted(envelopes: list[Envelope], gangs: GangTraces) -> list[Envelope]:
    """Preemption's decisions, while `LIVE`: a span in the gang's trace for each
    `PreemptionRequested` of a sampled gang, whose context the decision carries."""
    out = envelopes
    for index, envelope in enumerate(envelopes):
        event: Any = envelope.event
        if event.type != "PreemptionRequested":
            continue
        parent = gangs.context(event.tree, event.gang)
        if parent is None:
            continue
        attributes = {**_gang_attributes(envelope), "poolwise.tasks": len(event.tasks),
                      "poolwise.reason": event.reason}
        made = tracer().start_span("preemption requested", context=trace.set_span_in_context(NonRecordingSpan(parent)),
                                   attributes=attributes)
        made.end()
        if out is envelopes:
            out = list(envelopes)
        out[index] = with_trace(envelope, carrier_of(made))
    return out


def _gang_attributes(envelope: Envelope) -> dict[str, Any]:
    event: Any = envelope.event
    return {"poolwise.tree": event.tree, "poolwise.gang": event.gang, "poolwise.pool": event.pool,
            "poolwise.decision": envelope.id, "poolwise.basis": envelope.basis or 0}
