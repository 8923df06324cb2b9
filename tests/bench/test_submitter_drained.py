"""`bench.submitter._drained`: a consumer briefly gone (made again by its service under load) is
asked again until the deadline, not taken as the end of the run."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

from nats.js.errors import NotFoundError

from bench.submitter import _drained


class Consumers:
    """`js.consumer_info` of consumers that are not found `gone` times each, then `info`."""

    def __init__(self, gone: int, pending: int = 0) -> None:
        self.gone = gone
        self.pending = pending
        self.asked = 0

    async def consumer_info(self, stream: str, name: str) -> Any:
        self.asked += 1
        if self.gone:
            self.gone -= 1
            raise NotFoundError(code=404, err_code=10014, description="consumer not found")
        return SimpleNamespace(num_pending=self.pending, num_ack_pending=0)


def test_a_consumer_briefly_not_found_is_asked_again() -> None:
    js = Consumers(gone=3)
    assert asyncio.run(_drained(js, ["admission", "preemption"], time.perf_counter() + 30.0)) is True
    assert js.asked == 3 + 2


def test_a_consumer_never_found_is_not_drained_at_the_deadline() -> None:
    js = Consumers(gone=10**9)
    assert asyncio.run(_drained(js, ["admission"], time.perf_counter() + 0.05)) is False
    assert js.asked >= 1


def test_a_consumer_with_messages_pending_is_not_drained() -> None:
    assert asyncio.run(_drained(Consumers(gone=0, pending=1), ["admission"], time.perf_counter() + 0.05)) is False
