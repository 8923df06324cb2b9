"""Riding out a reconnect: nats-py re-establishes a lost connection on its own, for as long as it
takes; what the log sent meanwhile may be lost, so the publisher, the puller and the log's requests
wait for the connection to be back (`connected`) and ask again (`asking`), and count only the
failures on a steady connection towards giving up."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from nats.aio.client import Client as NATS
from nats.errors import ConnectionClosedError, NoRespondersError, OutboundBufferLimitError
from nats.errors import TimeoutError as RequestTimeout
from nats.js.errors import ServiceUnavailableError

MAX_LOSSES = 10  # consumer losses in a row, without progress, before giving up
# What a request or publish meets when the connection is cut under it: asked again once it is back.
# (nats-py's JetStream manager reports no responders as ServiceUnavailableError: JetStream not up yet.)
CUT_SHORT = (RequestTimeout, NoRespondersError, ServiceUnavailableError, OutboundBufferLimitError)
TICK = 0.5  # seconds between looks at a quiet connection
RECONNECT_POLL = 0.05  # seconds between looks at a connection that is reconnecting

_T = TypeVar("_T")


async def connected(nc: NATS) -> int:
    """Once `nc` is connected (it reconnects on its own, for as long as it takes): how many times it
    has reconnected. A publish made while it reconnects is only buffered, and a full buffer refuses it."""
    while not nc.is_connected:
        if nc.is_closed:
            raise ConnectionClosedError
        await asyncio.sleep(RECONNECT_POLL)
    return int(nc.stats["reconnects"])


async def asking(nc: NATS, ask: Callable[[], Awaitable[_T]]) -> _T:
    """`await ask()` (a JetStream API request on `nc`), again while it is cut short by a reconnect;
    only failures on a steady connection count towards giving up."""
    failures = 0
    while True:
        reconnects = await connected(nc)
        try:
            return await ask()
        except CUT_SHORT:
            if nc.stats["reconnects"] == reconnects:
                failures += 1
                if failures >= MAX_LOSSES:
                    raise
            await asyncio.sleep(0.05 * max(failures, 1))
