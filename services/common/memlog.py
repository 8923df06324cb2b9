"""`MemoryLog`: the in-memory twin of the JetStream log, for unit tests and `--bus memory`.

Same semantics as `JetStreamLog` (both pass `tests/contract/test_log_contract.py`): sequences from
1 in append order, de-duplication by message id, expected-last-subject-sequence checked before
de-duplication (as the server does), NATS subject filters (`*` one token, `>` the rest), and
`consume` that delivers matching events in batches and waits for new appends. One process, one
event loop; nothing here blocks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache

import anyio
import anyio.lowlevel

from events import Envelope, encode
from events.subjects import STREAM_SUBJECTS, for_event
from services.common.decodes import SHARED
from services.common.log import Appended, AppendRefused, BatchHandler, StaleWrite, Stored
from services.common.packs import outgoing


def subject_matches(pattern: str, subject: str) -> bool:
    """NATS subject matching: `*` matches one token, a final `>` one or more tokens."""
    p_tokens = pattern.split(".")
    s_tokens = subject.split(".")
    for i, token in enumerate(p_tokens):
        if token == ">":
            return len(s_tokens) > i
        if i >= len(s_tokens) or (token != "*" and token != s_tokens[i]):
            return False
    return len(p_tokens) == len(s_tokens)


@lru_cache(maxsize=256)
def subject_filter(patterns: tuple[str, ...]) -> Callable[[str], bool]:
    """A predicate for a set of filters (empty: everything). Literal filters take a set lookup."""
    if not patterns:
        return lambda subject: True
    literal = frozenset(p for p in patterns if "*" not in p.split(".") and ">" not in p.split("."))
    wild = tuple(p for p in patterns if p not in literal)
    if not wild:
        return literal.__contains__
    seen: dict[str, bool] = {}  # a log has few distinct subjects: match each once (bounded, in case)

    def wanted(subject: str) -> bool:
        found = seen.get(subject)
        if found is None:
            found = subject in literal or any(subject_matches(p, subject) for p in wild)
            if len(seen) >= 65_536:
                seen.clear()
            seen[subject] = found
        return found

    return wanted


def envelope_subject(envelope: Envelope) -> str:
    """The subject an envelope is appended on (`events.subjects.for_event`)."""
    event = envelope.event
    return for_event(event.type, getattr(event, "tree", None), envelope.source)


class MemoryLog:
    """An event log in a list. `subjects`: what the "stream" accepts (others raise AppendRefused)."""

    def __init__(self, subjects: Sequence[str] = STREAM_SUBJECTS) -> None:
        self._accepts = subject_filter(tuple(subjects))
        self._events: list[Stored] = []
        self._ids: dict[str, int] = {}
        self._last_by_subject: dict[str, int] = {}
        self._appended: anyio.Event | None = None  # created by a waiting consumer, set by the next append

    def __len__(self) -> int:
        return len(self._events)

    def _store(self, subject: str, data: bytes, msg_id: str | None, index: int = 0) -> Appended:
        if not self._accepts(subject):
            raise AppendRefused(subject, "no stream takes this subject", index)
        if msg_id is not None and msg_id in self._ids:
            return Appended(self._ids[msg_id], duplicate=True)
        seq = len(self._events) + 1
        self._events.append(Stored(seq, subject, data, msg_id))
        self._last_by_subject[subject] = seq
        if msg_id is not None:
            self._ids[msg_id] = seq
        return Appended(seq)

    def _wake(self) -> None:
        if self._appended is not None:
            self._appended.set()
            self._appended = None

    async def append(self, envelopes: Sequence[Envelope]) -> list[Appended]:
        await anyio.lowlevel.checkpoint()
        results: list[Appended] = []
        try:
            for message in outgoing(envelopes, envelope_subject, SHARED.encode):
                landed = self._store(message.subject, message.data, message.msg_id, message.first)
                results.extend([landed] * message.count)
        finally:
            if results:
                self._wake()
        return results

    async def append_raw(self, subject: str, data: bytes, msg_id: str | None = None) -> Appended:
        await anyio.lowlevel.checkpoint()
        result = self._store(subject, bytes(data), msg_id)
        self._wake()
        return result

    async def append_expecting(
        self, envelope: Envelope, subject: str, expected_last_subject_seq: int
    ) -> Appended:
        await anyio.lowlevel.checkpoint()
        last = self._last_seq_of(subject)
        if last != expected_last_subject_seq:
            raise StaleWrite(subject, expected_last_subject_seq, f"{subject}: wrong last sequence: {last}")
        result = self._store(envelope_subject(envelope), encode(envelope), envelope.id)
        self._wake()
        return result

    def _last_seq_of(self, subject: str) -> int:
        if "*" not in subject and ">" not in subject:
            return self._last_by_subject.get(subject, 0)
        matching = (seq for subj, seq in self._last_by_subject.items() if subject_matches(subject, subj))
        return max(matching, default=0)

    async def last_seq(self, subject: str | None = None) -> int:
        await anyio.lowlevel.checkpoint()
        return len(self._events) if subject is None else self._last_seq_of(subject)

    async def read(
        self, start_seq: int = 1, subjects: Sequence[str] = (), end_seq: int | None = None
    ) -> list[Stored]:
        await anyio.lowlevel.checkpoint()
        end = len(self._events) if end_seq is None else min(end_seq, len(self._events))
        wanted = subject_filter(tuple(subjects))
        return [s for s in self._events[max(start_seq, 1) - 1 : max(end, 0)] if wanted(s.subject)]

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
        """Deliver matching events after `after_seq` in batches, forever. A raising handler's error
        propagates; the next `consume` from the same checkpoint gets the same events again.
        `linger`: see `EventLog.consume`."""
        wanted = subject_filter(tuple(subjects))
        scanned = max(after_seq, 0)  # every event at or below this was looked at
        while True:
            batch: list[Stored] = []
            while scanned < len(self._events) and len(batch) < max_batch:
                stored = self._events[scanned]
                scanned += 1
                if wanted(stored.subject):
                    batch.append(stored)
            if batch:
                await handler(batch)
                if linger and len(batch) < max_batch:
                    await anyio.sleep(linger)
                else:
                    await anyio.lowlevel.checkpoint()
            elif scanned >= len(self._events):
                if self._appended is None:
                    self._appended = anyio.Event()
                await self._appended.wait()
