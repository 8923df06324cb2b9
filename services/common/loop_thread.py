"""A coroutine run on a thread of its own, on an event loop of its own: what keeps leases renewed
while the service's own loop is busy (a long fold, rebuild or cycle: seconds at scale), in
`services.common.lease_renewer` (one lease) and `services.common.tree_leases` (a lease per tree)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Coroutine
from typing import Any

import anyio

STOP_RETRY = 0.5  # seconds between cancellations sent to a thread that has not ended


class LoopThread:
    """`body()` on a daemon thread, in `asyncio.run`; `stop()` cancels it and waits for the end."""

    def __init__(self, name: str, body: Callable[[], Coroutine[Any, Any, None]]) -> None:
        self._body = body
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[Any] | None = None
        self._stopping = False
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _main(self) -> None:
        asyncio.run(self._run())

    async def _run(self) -> None:
        with self._lock:
            if self._stopping:
                return
            self._loop = asyncio.get_running_loop()
            self._task = asyncio.current_task()
        await self._body()

    async def stop(self, grace: float = STOP_RETRY) -> None:
        """Cancel the body and wait for the thread to end (`grace` s before the first resend).

        The cancellation is sent again until the thread has ended: one can be lost (Python 3.11's
        `asyncio.wait_for`, under nats-py's requests, swallows a cancellation that arrives as the
        awaited reply does), and a thread that never ends would keep the service from ever
        stopping: a service that failed at start hung instead of exiting, and `poolwise up`
        waited for it forever."""
        with self._lock:
            self._stopping = True
        wait = grace
        while self._thread.is_alive():
            with self._lock:
                loop, task = self._loop, self._task
            if loop is not None and task is not None:
                with contextlib.suppress(RuntimeError):  # its loop has ended already
                    loop.call_soon_threadsafe(task.cancel)
            await anyio.to_thread.run_sync(self._thread.join, wait)
            wait = STOP_RETRY
