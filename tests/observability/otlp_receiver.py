"""A real OTLP/HTTP receiver for the tests: a small HTTP server on a free loopback port that takes
`POST /v1/traces` and `POST /v1/metrics` as the OpenTelemetry collector does (protobuf bodies,
gzip or not), decodes them with opentelemetry-proto and keeps what it got: every span with its
resource's `service.name`, and every metric's name, points and service."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    return None if which is None else getattr(value, which)


def _attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


def _by_service(resources: Any, scopes: str, items: str) -> Iterator[tuple[str, Any]]:
    """(the resource's service.name, item) of every span or metric of an export request."""
    for resource in resources:
        service = str(_attributes(resource.resource.attributes).get("service.name", ""))
        for scope in getattr(resource, scopes):
            for item in getattr(scope, items):
                yield service, item


@dataclass(frozen=True)
class Link:
    trace_id: str
    span_id: str
    attributes: dict[str, Any]


@dataclass(frozen=True)
class Span:
    """One received span; ids in hex, as a traceparent writes them."""

    service: str  # the resource's service.name
    name: str
    trace_id: str
    span_id: str
    parent_id: str  # "" for a root
    attributes: dict[str, Any]
    links: tuple[Link, ...]


@dataclass(frozen=True)
class Point:
    service: str
    metric: str
    attributes: dict[str, Any]
    value: float  # a gauge's or sum's value; a histogram's count


@dataclass
class Received:
    """What the receiver got so far (appended from the server's threads)."""

    spans: list[Span] = field(default_factory=list)
    points: list[Point] = field(default_factory=list)
    requests: dict[str, int] = field(default_factory=dict)  # path -> requests decoded
    lock: threading.Lock = field(default_factory=threading.Lock)

    def snapshot(self) -> tuple[list[Span], list[Point]]:
        with self.lock:
            return list(self.spans), list(self.points)

    def traces(self, request: ExportTraceServiceRequest) -> None:
        found = [Span(service=service, name=span.name, trace_id=span.trace_id.hex(), span_id=span.span_id.hex(),
                      parent_id=span.parent_span_id.hex(), attributes=_attributes(span.attributes),
                      links=tuple(Link(link.trace_id.hex(), link.span_id.hex(), _attributes(link.attributes))
                                  for link in span.links))
                 for service, span in _by_service(request.resource_spans, "scope_spans", "spans")]
        with self.lock:
            self.spans.extend(found)
            self.requests["/v1/traces"] = self.requests.get("/v1/traces", 0) + 1

    def metrics(self, request: ExportMetricsServiceRequest) -> None:
        found = []
        for service, metric in _by_service(request.resource_metrics, "scope_metrics", "metrics"):
            kind = metric.WhichOneof("data")
            data = getattr(metric, kind) if kind else None
            for point in getattr(data, "data_points", ()):
                if kind == "histogram":
                    value = float(point.count)
                else:
                    value = float(point.as_double if point.WhichOneof("value") == "as_double" else point.as_int)
                found.append(Point(service, metric.name, _attributes(point.attributes), value))
        with self.lock:
            self.points.extend(found)
            self.requests["/v1/metrics"] = self.requests.get("/v1/metrics", 0) + 1


_KINDS: dict[str, tuple[type[Any], type[Any], str]] = {
    "/v1/traces": (ExportTraceServiceRequest, ExportTraceServiceResponse, "traces"),
    "/v1/metrics": (ExportMetricsServiceRequest, ExportMetricsServiceResponse, "metrics"),
}


def _handler(received: Received) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.headers.get("Content-Encoding", "").lower() == "gzip":
                body = gzip.decompress(body)
            kind = _KINDS.get(self.path)
            if kind is None or not self.headers.get("Content-Type", "").startswith("application/x-protobuf"):
                self.send_response(404 if kind is None else 415)
                self.end_headers()
                return
            request_type, response_type, method = kind
            request = request_type()
            request.ParseFromString(body)  # (a body that is not the message fails the request: 500)
            getattr(received, method)(request)
            answer = response_type().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:  # (quiet: pytest shows stderr on failures)
            pass

    return Handler


@contextmanager
def otlp_receiver() -> Iterator[tuple[str, Received]]:
    """A receiver on 127.0.0.1 and a free port: (its endpoint URL, what it received)."""
    received = Received()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(received))
    thread = threading.Thread(target=server.serve_forever, name="otlp-receiver", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


__all__ = ["Link", "Point", "Received", "Span", "otlp_receiver"]
