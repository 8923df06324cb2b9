"""The whole system (tree, admission, preemption) on a real nats-server, for end-to-end tests,
with bounded waits (a broken service fails the test instead of hanging it)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from anyio.abc import TaskStatus

from events import DecodeError, Envelope, decode_all
from events.commands import HostAdd, PoolUpsert, TreeConfigure
from events.config import GangTimeoutOptions, PoolConfig, TreeOptions
from services.common.jetstream import JetStreamLog
from services.launcher import SERVICES, start_services
from services.tools.cli.client import request

WAIT = 30.0


async def serve_system(url: str, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
    """Run every service on `url` (admission's clock on: it ticks by itself) until cancelled."""
    log = await JetStreamLog.connect(url)
    try:
        async with anyio.create_task_group() as tg:
            await start_services(tg, log, list(SERVICES), None)
            task_status.started()
    finally:
        with anyio.CancelScope(shield=True):
            await log.close()


async def setup_cluster(url: str) -> None:
    """Tree `default` (gang timeouts 100 s, no jitter: nothing times out during a test), one host
    of cpu 10 and memory 1000, and the leaf pool /ATG limited to cpu 10."""
    options = TreeOptions(gang_timeout=GangTimeoutOptions(default=100, limit=100, jitter=0))
    await request(url, "tree", TreeConfigure(tree="default", options=options))
    await request(url, "tree", HostAdd(host="h1", resources={"cpu": 10, "memory": 1000}))
    await request(url, "tree", PoolUpsert(path="/ATG", config=PoolConfig(limit={"cpu": 10})))


async def events(url: str) -> list[Envelope]:
    log = await JetStreamLog.connect(url)
    try:
        found = []
        for stored in await log.read():
            try:
                found.extend(decode_all(stored.data))
            except DecodeError:
                continue
        return found
    finally:
        await log.close()


async def wait_until(check: Callable[[], Awaitable[Any]], what: str, timeout: float = WAIT) -> Any:
    """Poll `check` until it returns something true, and return that; fail after `timeout` s."""
    with anyio.move_on_after(timeout):
        while True:
            found = await check()
            if found:
                return found
            await anyio.sleep(0.05)
    raise AssertionError(f"gave up waiting for {what} after {timeout:g} s")
