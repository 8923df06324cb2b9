"""Helpers for the service-shell tests: reading a log back, racing writers, bounded waits."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import anyio

from events import DecodeError, Envelope, decode_all
from services.common.log import Appended, BatchHandler, EventLog, StaleWrite, Stored

WAIT = 30.0  # seconds: a bound on every wait, so a broken service fails the test instead of hanging it


async def envelopes(log: EventLog, after: int = 0) -> list[tuple[int, Envelope]]:
    """The decodable events of the log after `after`, with their sequences."""
    out: list[tuple[int, Envelope]] = []
    for stored in await log.read(after + 1):
        try:
            out.extend((stored.seq, e) for e in decode_all(stored.data))
        except DecodeError:
            continue
    return out


async def types_after(log: EventLog, after: int) -> list[str]:
    return [env.type for _, env in await envelopes(log, after)]


async def wait_until(check: Callable[[], Awaitable[bool]], what: str, timeout: float = WAIT) -> None:
    """Poll `check` until it holds; fail (not hang) after `timeout` seconds."""
    with anyio.move_on_after(timeout):
        while not await check():
            await anyio.sleep(0.02)
        return
    raise AssertionError(f"gave up waiting for {what} after {timeout:g} s")


class Gate:
    """Holds the first `writers` optimistic appends (of any of the logs sharing it) until all of
    them have arrived, so that each writer decided on the same, soon stale, view before any writes."""

    def __init__(self, writers: int = 2) -> None:
        self.writers = writers
        self.arrived = 0
        self.all_arrived = anyio.Event()
        self.stale = 0  # optimistic appends the log refused

    async def pass_through(self) -> None:
        if self.arrived >= self.writers:
            return
        self.arrived += 1
        if self.arrived == self.writers:
            self.all_arrived.set()
        with anyio.fail_after(WAIT):
            await self.all_arrived.wait()


class RacingLog:
    """A log whose optimistic appends pass a shared `Gate` first."""

    def __init__(self, log: EventLog, gate: Gate) -> None:
        self.log = log
        self.gate = gate

    async def append(self, envelopes: Sequence[Envelope]) -> list[Appended]:
        return await self.log.append(envelopes)

    async def append_raw(self, subject: str, data: bytes, msg_id: str | None = None) -> Appended:
        return await self.log.append_raw(subject, data, msg_id)

    async def append_expecting(self, envelope: Envelope, subject: str, expected_last_subject_seq: int) -> Appended:
        await self.gate.pass_through()
        try:
            return await self.log.append_expecting(envelope, subject, expected_last_subject_seq)
        except StaleWrite:
            self.gate.stale += 1
            raise

    async def last_seq(self, subject: str | None = None) -> int:
        return await self.log.last_seq(subject)

    async def read(self, start_seq: int = 1, subjects: Sequence[str] = (), end_seq: int | None = None) -> list[Stored]:
        return await self.log.read(start_seq, subjects, end_seq)

    async def consume(self, durable: str, subjects: Sequence[str], after_seq: int, handler: BatchHandler, *,
                      max_batch: int = 1000, linger: float = 0.0) -> None:
        await self.log.consume(durable, subjects, after_seq, handler, max_batch=max_batch, linger=linger)
