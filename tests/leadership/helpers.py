"""Shared by the leadership tests: a short-lived lease bucket, unique keys, bounded waits."""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from nats.js.kv import KeyValue

from services.common.lease_bucket import open_leases

TEST_BUCKET = "poolwise_leases_test"
TEST_TTL = 2.0  # seconds: short, so that waiting out an abandoned lease keeps the tests quick
WAIT = 30.0  # seconds: the bound of every wait (a broken election fails the test, it does not hang it)


async def lease_bucket(nc: Any) -> KeyValue:
    return await open_leases(nc, bucket=TEST_BUCKET, ttl=TEST_TTL)


def unique_key(what: str) -> str:
    return f"T{uuid.uuid4().hex[:12]}.{what}"


async def eventually(check: Callable[[], Awaitable[Any]], what: str, timeout: float = WAIT) -> Any:
    """Poll `check` until it returns something true, and return that; fail after `timeout` s."""
    with anyio.move_on_after(timeout):
        while True:
            found = await check()
            if found:
                return found
            await anyio.sleep(0.05)
    raise AssertionError(f"gave up waiting for {what} after {timeout:g} s")


async def until(predicate: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
    """Wait until `predicate()` holds; fail after `timeout` s."""

    async def check() -> bool:
        return predicate()

    await eventually(check, what, timeout)


def now_envelopes(*events: Any) -> list[Any]:
    """Inputs as a submitter sends them: fresh ids, the current time."""
    from events import Envelope, at_seconds

    return [Envelope(id=f"in-{uuid.uuid4().hex}", time=at_seconds(time.time()), source="test", event=e)
            for e in events]
