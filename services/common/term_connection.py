"""`TermConnection`: the NATS connection as one leadership term sees it, fenced by its lease
(services/common/leadership.py, "Fencing")."""

from __future__ import annotations

import logging
from typing import Any

from nats.aio.client import Client as NATS

from services.common.lease import Lease, LeaseLost

_log = logging.getLogger(__name__)


class TermConnection:
    """The NATS connection as one leadership term sees it: publishes and requests pass the lease's
    fence (`Lease.wait_valid`), and every subscription made through it ends with the term
    (`end()`), so a standby answers no requests and runs no consumers. Anything else is the
    connection's own."""

    def __init__(self, nc: NATS, lease: Lease) -> None:
        self._nc = nc
        self._lease = lease
        self._subscriptions: list[Any] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._nc, name)

    async def publish(self, *args: Any, **kwargs: Any) -> None:
        """Publish while the lease is certainly ours (wait while in doubt). Once it is lost, drop
        it: the term is being stopped, and whoever waits for an answer is cancelled with it (a
        subscription callback too: `end()`), so raising would only make noise in those callbacks."""
        if not self._lease.valid:
            try:
                await self._lease.wait_valid()
            except LeaseLost:
                return
        await self._nc.publish(*args, **kwargs)

    async def request(self, *args: Any, **kwargs: Any) -> Any:
        if not self._lease.valid:
            await self._lease.wait_valid()
        return await self._nc.request(*args, **kwargs)

    async def subscribe(self, *args: Any, **kwargs: Any) -> Any:
        subscription = await self._nc.subscribe(*args, **kwargs)
        self._subscriptions.append(subscription)
        return subscription

    async def end(self) -> None:
        """Unsubscribe everything the term subscribed (their running callbacks are cancelled)."""
        subscriptions, self._subscriptions = self._subscriptions, []
        for subscription in subscriptions:
            try:
                await subscription.unsubscribe()
            except Exception as exc:  # already gone (the service unsubscribed it, or the connection closed)
                _log.debug("term subscription: %s", exc)


__all__ = ["TermConnection"]
