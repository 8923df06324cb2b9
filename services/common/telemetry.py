"""OpenTelemetry at the edge: spans around each batch a service folds and publishes.

Off unless asked for: `POOLWISE_TRACE=console` prints spans to stderr (a `BatchSpanProcessor`
with the console exporter); any other exporter is configured the usual OpenTelemetry way by the
operator's own SDK setup before poolwise starts. Domain code never sees any of this."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span

_configured = False


def configure(service: str = "poolwise") -> None:
    """Install a tracer provider once, if `POOLWISE_TRACE` asks for one (called when `poolwise
    serve` / `poolwise up --single-process` start their services; `service` names the process)."""
    global _configured
    if _configured:
        return
    _configured = True
    if os.environ.get("POOLWISE_TRACE", "").lower() != "console":
        return
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
    trace.set_tracer_provider(provider)


@cache
def _tracer() -> trace.Tracer:
    """The poolwise tracer, looked up once: a proxy that follows whatever provider is installed,
    before or after (looking it up for every span read the environment each time: tens of µs a
    batch, for nothing when tracing is off)."""
    return trace.get_tracer("poolwise")


@contextmanager
def span(name: str, **attributes: Any) -> Iterator[Span]:
    """A span on the poolwise tracer (a no-op when no provider is installed)."""
    with _tracer().start_as_current_span(name, attributes=attributes) as current:
        yield current


def trace_context() -> dict[str, str] | None:
    """The current W3C trace context (`traceparent`), for an envelope's `trace` field."""
    carrier: dict[str, str] = {}
    from opentelemetry.propagate import inject

    inject(carrier)
    return carrier or None
