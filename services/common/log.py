"""The log port: what a service needs of the event log, whatever carries it.

Two adapters implement it: `JetStreamLog` (the real one, NATS JetStream) and `MemoryLog` (an
in-memory twin for unit tests and `scenario run --bus memory`). Both must pass the same contract
suite (`tests/contract/test_log_contract.py`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from events import Envelope


@dataclass(frozen=True, slots=True)
class Stored:
    """An event as stored in the log: its position, subject and raw bytes (decode with events.decode)."""

    seq: int
    subject: str
    data: bytes
    msg_id: str | None = None


@dataclass(frozen=True, slots=True)
class Appended:
    """Where an appended event landed; `duplicate` when the id was already stored (no second copy)."""

    seq: int
    duplicate: bool = False


class StaleWrite(Exception):
    """An append with an expected last sequence found the subject moved on (a concurrent writer)."""

    def __init__(self, subject: str, expected: int, message: str = "") -> None:
        super().__init__(message or f"{subject}: expected last sequence {expected}, the log has moved on")
        self.subject = subject
        self.expected = expected


class AppendRefused(Exception):
    """The log refused to store an event: no stream takes its subject, or a limit was hit. Events of
    the same `append` before `index` may be stored; the refused one and those after it may not be."""

    def __init__(self, subject: str, reason: str, index: int = 0) -> None:
        super().__init__(f"{subject}: {reason}")
        self.subject = subject
        self.reason = reason
        self.index = index


BatchHandler = Callable[[Sequence[Stored]], Awaitable[None]]


class EventLog(Protocol):
    async def append(self, envelopes: Sequence[Envelope]) -> list[Appended]:
        """Append events (each on `events.subjects.for_event`), many in flight, all acknowledged
        before returning, in order. Ids de-duplicate: an id seen before is not stored again."""
        ...

    async def append_raw(self, subject: str, data: bytes, msg_id: str | None = None) -> Appended:
        """Append bytes as they are (submitters' events, malformed input in tests)."""
        ...

    async def append_expecting(
        self, envelope: Envelope, subject: str, expected_last_subject_seq: int
    ) -> Appended:
        """Append one event only if the last event on `subject` is at `expected_last_subject_seq`
        (0: the subject has none). Raises `StaleWrite` otherwise (optimistic concurrency)."""
        ...

    async def last_seq(self, subject: str | None = None) -> int:
        """The stream's last sequence (0 when empty), or the last on `subject`."""
        ...

    async def read(
        self, start_seq: int = 1, subjects: Sequence[str] = (), end_seq: int | None = None
    ) -> list[Stored]:
        """Events from `start_seq` through `end_seq` (default: the current end), filtered to subjects
        (NATS wildcards allowed; empty = all), in log order."""
        ...

    async def consume(
        self,
        durable: str,
        subjects: Sequence[str],
        after_seq: int,
        handler: BatchHandler,
        *,
        max_batch: int = 1000,
        linger: float = 0.0,
    ) -> None:
        """Deliver events after `after_seq` matching `subjects` to `handler`, in order, in batches
        of up to `max_batch`, forever (until cancelled). The batch is acknowledged only after the
        handler returns (its effects are committed); a handler that raises gets the batch again.
        `after_seq` is the consumer's own committed checkpoint: the durable consumer is moved to it
        when they disagree, so nothing at or below it is delivered again. With `linger` (seconds),
        a batch smaller than `max_batch` is followed by that pause before the next is taken, so
        that what arrives meanwhile comes as one batch (see `LINGER` of the preemption service)."""
        ...


READ_CHUNK = 20_000  # messages per read when a service folds the log from the start


async def read_in_chunks(log: EventLog, start_seq: int = 1, subjects: Sequence[str] = (),
                         chunk: int | None = None, end_seq: int | None = None) -> AsyncIterator[list[Stored]]:
    """What `log.read(start_seq, subjects, end_seq)` gives, as it stands when called (`end_seq`
    default: the last sequence then), in pieces of at most `chunk` (default `READ_CHUNK`) positions
    of the log each, in log order: a service that folds a long log from the start holds one piece
    at a time, not the whole log."""
    chunk = chunk or READ_CHUNK
    end = await log.last_seq() if end_seq is None else end_seq
    position = max(start_seq, 1)
    while position <= end:
        last = min(end, position + chunk - 1)
        piece = await log.read(position, subjects, last)
        if piece:
            yield piece
        position = last + 1
