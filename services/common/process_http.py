"""The HTTP port of a poolwise process: `poolwise serve <service> --http-port P` serves its own
process's routes (`process_routes`: `/metrics`, `/healthz`, `/readyz`); `poolwise up --http-port P`
serves its children's, gathered (`services.common.exposition`); either with more paths beside
them (`Extra`: the dashboard). The server itself is `services.common.health_http`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import anyio

from services.common.exposition import http_line, up_routes
from services.common.health_http import Handler, Response, Route, json_response, serve_http
from services.common.metrics import CONTENT_TYPE, follow_stream, install, lag, readiness, status


def process_routes(metrics: Any, names: list[str], max_lag: int) -> dict[str, Route]:
    """The routes of a service process: `/metrics` (`metrics.render()`, the Prometheus page),
    `/healthz` (200 while the process answers), `/readyz` (200 when every service of the process
    is ready: `services.common.metrics.readiness`; else 503 saying why)."""
    async def page() -> Response:
        return Response(200, await metrics.render_async(), CONTENT_TYPE)

    async def healthz() -> Response:
        return json_response(200, {"alive": True, "services": names})

    async def readyz() -> Response:
        services: dict[str, Any] = {}
        for name in names:
            found = status(name)
            ok, why = readiness(found, max_lag)
            services[name] = {"ready": ok, "role": found.role, "why": why, "lag": lag(found),
                              "folded": found.folded if found.folder is not None else None}
        ready = all(s["ready"] for s in services.values())
        return json_response(200 if ready else 503, {"ready": ready, "services": services})

    return {"/metrics": page, "/healthz": healthz, "/readyz": readyz}


class Extra(Protocol):
    """More paths for a server: its `handler`, and `run`, the task that serves it (run beside the
    server, cancelled with it)."""

    handler: Handler

    async def run(self) -> None: ...


class HttpPortError(Exception):
    """The HTTP port could not be bound (in use, or not allowed)."""


async def bind(host: str, port: int, routes: Mapping[str, Route], tg: Any, handler: Handler | None = None) -> int:
    """Start `serve_http` in `tg`; the port bound, or `HttpPortError` saying why not."""
    try:
        bound: int = await tg.start(serve_http, host, port, routes, handler)
    except OSError as exc:
        raise HttpPortError(f"cannot serve HTTP on {host}:{port}: {exc.strerror or exc}") from None
    return bound


async def run_observed(main: Callable[[], Awaitable[Any]], names: list[str], *, host: str, port: int | None,
                       max_lag: int, url: Callable[[], str | None], announce: Callable[[str], None],
                       extra: Extra | None = None) -> None:
    """Run `main()` (the services of this process) with their metrics installed, the log's end
    followed (for lag and readiness), and, with a `port`, `process_routes` served on `host:port`
    (bound before the services start: `/healthz` answers while they fold the log;
    `announce(http_line)` once bound), with `extra`'s paths (`poolwise up --single-process`: the
    dashboard)."""
    metrics = install(",".join(names))
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(follow_stream, url)
            if port is not None:
                handler = None
                if extra is not None:
                    tg.start_soon(extra.run)
                    handler = extra.handler
                bound = await bind(host, port, process_routes(metrics, names, max_lag), tg, handler)
                announce(http_line(names, host, bound))
            await main()
            tg.cancel_scope.cancel()
    finally:
        metrics.shutdown()


async def run_gathering(main: Callable[[], Awaitable[Any]], children: Any, *, host: str, port: int,
                        announce: Callable[[str], None], extra: Extra | None = None) -> None:
    """`poolwise up`'s port: its children's routes gathered (`services.common.exposition`), and
    `extra`'s paths (the dashboard), while `main()` (the supervisor) runs."""
    async with anyio.create_task_group() as tg:
        if extra is not None:
            tg.start_soon(extra.run)
        bound = await bind(host, port, up_routes(children), tg, extra.handler if extra is not None else None)
        announce(http_line(["up"], host, bound))
        await main()
        tg.cancel_scope.cancel()
