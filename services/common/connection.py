"""A NATS connection that gives up on an unreachable server (nats-py, asked to reconnect forever,
also retries the first connect forever; asked not to, it loops in its server selection), and
that then reconnects forever, quietly (nats-py logs each failed attempt with a traceback).

The services' logs (`JetStreamLog.connect`), the submitter SDK and the CLI connect this way: an
operator who gives `poolwise up` or `poolwise serve` a wrong `--nats-url` gets one line naming
it, not a traceback a second forever."""

from __future__ import annotations

import logging
from contextlib import suppress

import anyio
from nats.aio.client import Client as NATS

from services.common.jetstream import new_client

log = logging.getLogger("poolwise.nats")

CONNECT_TIMEOUT = 5.0  # seconds to reach the server at first


async def quietly(exc: Exception) -> None:
    """A connection's error callback: a lost or refused connection is retried, not worth a
    traceback on the console (nats-py's default prints one for every failed reconnect)."""
    log.debug("nats: %s: %s", exc.__class__.__name__, exc)


_quietly = quietly


async def connect_nats(url: str, *, name: str = "poolwise", timeout: float = CONNECT_TIMEOUT) -> NATS:
    """Connect to `url` within `timeout` seconds, else `ConnectionError` naming the URL. Once
    connected, a lost connection is re-established for as long as it takes."""
    nc = new_client()  # the log's fast paths (PubAcks straight from the parser)
    try:
        with anyio.fail_after(timeout):
            await nc.connect(url, name=name, connect_timeout=max(1, int(min(timeout, 2.0))),
                             max_reconnect_attempts=-1, reconnect_time_wait=1, error_cb=_quietly)
    except TimeoutError:
        await _abandon(nc)
        raise ConnectionError(f"cannot reach NATS at {url} within {timeout:g} s") from None
    except Exception as exc:  # a malformed URL, refused authorization, ...
        await _abandon(nc)
        raise ConnectionError(f"cannot reach NATS at {url}: {exc.__class__.__name__} {exc}".strip()) from None
    return nc


async def _abandon(nc: NATS) -> None:
    with anyio.CancelScope(shield=True), suppress(Exception):
        await nc.close()
