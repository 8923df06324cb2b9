"""A tiny read-only HTTP server (and client) on anyio: `/metrics`, `/healthz`, `/readyz`.

No framework: GET (and HEAD) of a handful of paths, one request per connection, answered and
closed. A path none of them is goes to the `handler`, if given (the dashboard:
services/tools/dashboard), with its query read (`Request`; a malformed query is a 400 before any
handler sees it). Each connection is a task of its own, its request read within `READ_WITHIN`
seconds, so a slow or stuck client holds nothing but its own task. Unknown paths answer 404, other methods 405,
a request that is not HTTP 400, a route that raises 500: always a JSON body naming the error, never
a traceback. Nothing here changes anything.

Which routes a process serves, and the running of its port beside its services, are in
`services.common.process_http`."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, unquote

import anyio
from anyio.abc import SocketStream, TaskStatus

READ_WITHIN = 5.0  # seconds for a client to send its request
MAX_HEAD = 8192  # bytes of request line and headers
MAX_FIELDS = 32  # names in one query string
JSON = "application/json"


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes
    content_type: str = JSON


@dataclass(frozen=True, slots=True)
class Request:
    """A GET (or HEAD) as a handler sees it: its path (percent-decoded) and its query, each name
    once."""

    path: str
    query: Mapping[str, str]


Route = Callable[[], Awaitable[Response]]
Handler = Callable[[Request], Awaitable[Response | None]]  # None: not one of its paths (404)
REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
           500: "Internal Server Error", 503: "Service Unavailable"}


def json_response(status: int, body: Mapping[str, Any]) -> Response:
    return Response(status, json.dumps(body, sort_keys=True).encode() + b"\n")


def error(status: int, message: str, **more: Any) -> Response:
    return json_response(status, {"error": message, **more})


async def serve_http(host: str, port: int, routes: Mapping[str, Route], handler: Handler | None = None, *,
                     task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED) -> None:
    """Serve `routes` (path -> route), and `handler` for any other path, on `host:port` until
    cancelled; ready with the port bound (port 0: any free one)."""
    listener = await anyio.create_tcp_listener(local_host=host, local_port=port, reuse_port=False)
    async with listener:
        bound = listener.extra(anyio.abc.SocketAttribute.local_port)
        task_status.started(bound)
        await listener.serve(lambda stream: _answer_safely(stream, routes, handler))


async def _answer_safely(stream: SocketStream, routes: Mapping[str, Route], handler: Handler | None) -> None:
    """`_answer`, whose failure ends its connection and nothing else: the listener's task group is the
    service's, and no client may stop a service."""
    try:
        await _answer(stream, routes, handler)
    except Exception:  # (a connection torn down in some way not caught below)
        return


async def _answer(stream: SocketStream, routes: Mapping[str, Route], handler: Handler | None) -> None:
    async with stream:
        head = b""
        with anyio.move_on_after(READ_WITHIN):
            try:
                while b"\r\n\r\n" not in head and b"\n\n" not in head and len(head) <= MAX_HEAD:
                    head += await stream.receive(4096)
            except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                return
        method, response = await _respond(head, routes, handler)
        reason = REASONS.get(response.status, "")
        lines = [f"HTTP/1.1 {response.status} {reason}", f"Content-Type: {response.content_type}",
                 f"Content-Length: {len(response.body)}", "Connection: close", "Cache-Control: no-store", "", ""]
        payload = "\r\n".join(lines).encode("latin-1") + (b"" if method == "HEAD" else response.body)
        try:
            with anyio.move_on_after(READ_WITHIN):
                await stream.send(payload)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            return


async def _respond(head: bytes, routes: Mapping[str, Route], handler: Handler | None) -> tuple[str, Response]:
    line = head.split(b"\n", 1)[0].strip()
    parts = line.split(b" ")
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/") or len(head) > MAX_HEAD:
        return "GET", error(400, "malformed request")
    method = parts[0].decode("latin-1")
    path, _, query = parts[1].decode("latin-1").partition("?")
    if method not in ("GET", "HEAD"):
        return method, error(405, "read-only: only GET and HEAD", method=method)
    route = routes.get(path)
    try:
        if route is not None:
            return method, await route()
        request = _request(path, query) if handler is not None else None
        if isinstance(request, Response):
            return method, request
        found = await handler(request) if handler is not None and request is not None else None
    except Exception as exc:  # a route's defect: a JSON error, the process goes on
        return method, error(500, "internal error", detail=type(exc).__name__)
    return method, found or error(404, "not found", path=path, paths=sorted(routes))


def _request(path: str, query: str) -> Request | Response:
    """The request a handler is given, or the 400 saying what is wrong with it."""
    try:
        decoded = unquote(path, errors="strict")
    except UnicodeDecodeError:
        return error(400, "malformed path: not UTF-8 once percent-decoded", path=path)
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query), errors="strict",
                          max_num_fields=MAX_FIELDS)
    except (UnicodeDecodeError, ValueError) as exc:
        return error(400, "malformed query", detail=str(exc))
    query_map = dict(pairs)
    if len(query_map) != len(pairs):
        repeated = next(name for name, _ in pairs if sum(1 for n, _ in pairs if n == name) > 1)
        return error(400, f"malformed query: {repeated!r} given more than once", field=repeated)
    return Request(decoded, query_map)


async def get(host: str, port: int, path: str, timeout: float = 5.0) -> tuple[int, bytes]:
    """GET `path` from `host:port` (the server closes after answering): (status, body). Raises
    `OSError` or `TimeoutError` when it cannot be reached or does not answer within `timeout`."""
    with anyio.fail_after(timeout):
        async with await anyio.connect_tcp(host, port) as stream:
            await stream.send(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode("latin-1"))
            data = b""
            with _closed_is_end():
                while True:
                    data += await stream.receive(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].split(b" ")
    if len(status) < 2 or not status[1].isdigit():
        raise OSError(f"not an HTTP answer from {host}:{port}")
    return int(status[1]), body


class _closed_is_end:
    """`anyio.EndOfStream` (the server closed after its answer) ends the read, quietly."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> bool:
        return kind is not None and issubclass(kind, anyio.EndOfStream)
