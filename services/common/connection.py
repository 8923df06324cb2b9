"""A NATS connection that gives up on an unreachable server (nats-py, asked to reconnect forever,
also retries the first connect forever; asked not to, it loops in its server selection), and
that then reconnects forever, quietly (nats-py logs each failed attempt with a traceback).

The services' logs (`JetStreamLog.connect`), the submitter SDK and the CLI connect this way: an
operator who gives `poolwise up` or `poolwise serve` a wrong `--nats-url` gets one line naming
it, not a traceback a second forever.

A URL may be one server or several, comma-separated (`nats://n1:4222,nats://n2:4222`, as the
systemd units give `NATS_URL`), or a list: the connection is made to any of them, and a lost one
is re-established to any of them (`nats_servers`). Messages show the URLs without passwords."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import suppress
from urllib.parse import urlsplit, urlunsplit

import anyio
from nats.aio.client import Client as NATS
from nats.errors import Error as NatsError

from services.common.jetstream import new_client

log = logging.getLogger("poolwise.nats")

CONNECT_TIMEOUT = 5.0  # seconds to reach the server at first


async def quietly(exc: Exception) -> None:
    """A connection's error callback: a lost or refused connection is retried, not worth a
    traceback on the console (nats-py's default prints one for every failed reconnect)."""
    log.debug("nats: %s: %s", exc.__class__.__name__, exc)


_quietly = quietly

Urls = str | Sequence[str]  # one URL, several comma-separated, or a list of either


def nats_servers(urls: Urls) -> list[str]:
    """The server URLs of `urls` (one URL, a comma-separated list, or a list of either), in order,
    each checked as nats-py reads it; `ConnectionError` naming one that is empty or malformed."""
    given = [urls] if isinstance(urls, str) else list(urls)
    servers = [part.strip() for item in given for part in str(item).split(",")]
    if not any(servers):
        raise ConnectionError(f"no NATS server URL in {shown(urls)!r}: give a URL such as nats://127.0.0.1:4222, "
                              f"or several separated by commas")
    if not all(servers):
        raise ConnectionError(f"an empty NATS server URL in {shown(urls)!r} (two commas in a row, or one at an end)")
    parse = getattr(NATS, "_parse_server_uri", None)  # nats-py's own reading of one URL (2.10+)
    for server in servers:
        try:
            if parse is not None:
                parse(server)
        except (NatsError, ValueError) as exc:
            raise ConnectionError(f"NATS URL {shown(server)!r} is not valid: {exc}") from None
    return servers


def shown(urls: Urls) -> str:
    """`urls` as a message shows them: comma-separated, passwords replaced by `***`."""
    given = [urls] if isinstance(urls, str) else list(urls)
    return ",".join(_without_password(part.strip()) for item in given for part in str(item).split(","))


def _without_password(url: str) -> str:
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        user = parts.username or ""
        host = parts.netloc.rpartition("@")[2]
        return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))
    except ValueError:
        return url


async def connect_nats(url: Urls, *, name: str = "poolwise", timeout: float = CONNECT_TIMEOUT) -> NATS:
    """Connect to any server of `url` (one URL, comma-separated URLs, or a list) within `timeout`
    seconds, else `ConnectionError` naming them. Once connected, a lost connection is
    re-established, to any of them, for as long as it takes."""
    servers = nats_servers(url)
    nc = new_client()  # the log's fast paths (PubAcks straight from the parser)
    try:
        with anyio.fail_after(timeout):
            await nc.connect(servers, name=name, connect_timeout=max(1, int(min(timeout, 2.0))),
                             max_reconnect_attempts=-1, reconnect_time_wait=1, error_cb=_quietly)
    except TimeoutError:
        await _abandon(nc)
        raise ConnectionError(f"cannot reach NATS at {shown(servers)} within {timeout:g} s") from None
    except Exception as exc:  # refused authorization, ...
        await _abandon(nc)
        why = f"{exc.__class__.__name__} {exc}".strip()
        raise ConnectionError(f"cannot reach NATS at {shown(servers)}: {why}") from None
    except BaseException:  # cancelled (a caller's deadline): the client must not go on trying in the background
        await _abandon(nc)
        raise
    return nc


async def _abandon(nc: NATS) -> None:
    with anyio.CancelScope(shield=True), suppress(Exception):
        await nc.close()
