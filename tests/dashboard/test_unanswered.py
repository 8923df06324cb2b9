"""The dashboard when the services are not there: on a NATS server with the stream and no
service, the API still answers (200, with each missing part and why in `errors`; a gang's explain
is a 503); with no NATS at all, it says so. Nothing raises, and a refresh waits on nothing."""

from __future__ import annotations

import json

import anyio
import pytest

from services.common.health_http import Request
from services.tools.dashboard import Dashboard

pytestmark = pytest.mark.anyio


async def get(board: Dashboard, path: str, **query: str) -> tuple[int, dict[str, object]]:
    found = await board.handler(Request(path, query))
    assert found is not None
    return found.status, json.loads(found.body)


async def test_no_service_answers(fresh_stream: str) -> None:
    board = Dashboard(lambda: fresh_stream, every=0.1)
    async with anyio.create_task_group() as tg:
        tg.start_soon(board.run)
        status, body = await get(board, "/api/overview")
        assert status == 200 and body["trees"] == [] and body["log_seq"] == 0
        errors = body["errors"]  # "no responder": answered at once, not a request's timeout waited out
        assert errors == {"trees": "the tree service is not running (no responder)",
                          "pools": "the admission service is not running (no responder)",
                          "preemptions": "the preemption service is not running (no responder)"}
        status, body = await get(board, "/api/gangs/g1")
        assert status == 503 and body["error"] == "the admission service is not running (no responder)"
        status, body = await get(board, "/api/trees/default")
        assert status == 404 and body["trees"] == []
        tg.cancel_scope.cancel()


async def test_no_nats() -> None:
    board = Dashboard(lambda: None, every=0.1)
    async with anyio.create_task_group() as tg:
        tg.start_soon(board.run)
        status, body = await get(board, "/api/timeline")
        assert status == 200 and body["errors"] == {"nats": "NATS is not up yet"} and body["timeline"] == []
        tg.cancel_scope.cancel()
