"""A lease's renewals on a thread of their own, on a NATS connection of their own
(`LeaseRenewer`), and how that connection is opened (`connector`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import nats
from nats.aio.client import Client as NATS

from services.common.lease import Lease
from services.common.loop_thread import LoopThread

_log = logging.getLogger(__name__)

Connect = Callable[[], Awaitable[NATS]]


def connector(servers: str | list[str], name: str = "poolwise-lease") -> Connect:
    """A way to open a connection of its own to `servers` (for a lease's renewals)."""

    async def connect() -> NATS:
        from services.common.connection import connect_options, nats_servers, quietly  # (one URL, or several)

        return await nats.connect(nats_servers(servers), name=name, max_reconnect_attempts=-1, error_cb=quietly,
                                  **connect_options())  # the service's credentials and TLS (its environment)

    return connect


def servers_of(nc: NATS) -> list[str]:
    """The URLs `nc` knows (with their credentials, when they were given in the URL)."""
    return [server.geturl() for server in nc.servers]

class LeaseRenewer:
    """Renews a held lease from a thread of its own, on an event loop and a NATS connection of its
    own (`LoopThread`), so that a busy event loop (a long fold, rebuild or cycle: seconds at scale)
    does not cost the lease. A frozen or partitioned process still loses it: the thread stops with
    it; and so does one whose own connection is closed for good (`alive()` false: it could not
    work). `on_lost` is called from that thread."""

    def __init__(self, lease: Lease, connect: Connect, bucket: str, on_lost: Callable[[], None],
                 alive: Callable[[], bool]) -> None:
        self._lease = lease
        self._alive = alive
        self._connect = connect
        self._bucket = bucket
        self._on_lost = on_lost
        self._thread = LoopThread(f"lease {lease.name}", self._run)

    def start(self) -> None:
        self._thread.start()

    async def _run(self) -> None:
        nc: NATS | None = None
        try:
            nc = await self._connect()
            kv = await nc.jetstream().key_value(self._bucket)
            await self._lease.keep(self._on_lost, kv, self._alive)
        except asyncio.CancelledError:
            pass  # stopped
        except Exception as exc:  # cannot renew: as good as lost
            _log.warning("lease %s: renewals stopped (%s: %s)", self._lease.name, type(exc).__name__, exc)
            self._lease.lose()
            self._on_lost()
        finally:
            if nc is not None:
                try:
                    await nc.close()
                except (Exception, asyncio.CancelledError) as exc:  # cancelled again while closing: done anyway
                    _log.debug("lease %s: closing the renewals' connection: %r", self._lease.name, exc)

    async def stop(self) -> None:
        """Stop renewing (the lease stays as it is) and wait for the thread to end."""
        await self._thread.stop()


__all__ = ["Connect", "LeaseRenewer", "connector", "servers_of"]
