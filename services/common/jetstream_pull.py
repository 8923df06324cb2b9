"""`Puller`: the messages of one pull consumer, for `read` and `consume`.

It sends the pull requests itself and receives the messages in one subscription callback
(nats-py's `fetch()` makes a task per message; a callback does not). One request of `window`
messages is open at a time, the next one goes out as soon as it is served, so the handler always
has a buffer to chew on. A reconnect, or a gap in the consumer sequence, ends the puller with
`ConsumerLost`, and its caller makes the consumer again from the last position handed out (what
was buffered is dropped), so nothing is skipped and nothing is handed out twice: after a reconnect
nats-server may deliver a message that was in flight after later ones, with consecutive consumer
sequences (a burst on a connection cut again and again skipped a pack of enqueues so,
`tests/service/test_admission_cut.py`).

On a `LogClient` its messages come from the protocol parser in runs (`FastParser.runs`): one call
per run of messages, not a coroutine per message, each ack subject read from the known place of
its numbers (after `$JS.ACK.<stream>.<consumer>.`, one split), each `Stored` made without its
dataclass `__init__` (a frozen one sets each field through `object.__setattr__`): reading the
100k-gang soak log (501,765 messages) took 4.3-4.8 CPU s against 7.0-7.1 message by message
(docs/performance.md, "Replay").
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import deque
from collections.abc import Awaitable
from itertools import count
from typing import Any

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.errors import OutboundBufferLimitError

from services.common.jetstream_reconnect import TICK
from services.common.log import Stored
from services.common.nats_client import MSG_ID, msg_id_of, status_of, subscribe_direct, unsubscribe_direct
from services.common.protocol import FastParser, Raw

_TERMINAL = frozenset({"404", "408", "409"})
MAX_REQUEST_BYTES = 32 * 1024 * 1024  # per pull request, well under nats-py's 128 MiB slow-consumer limit


class ConsumerLost(Exception):
    """The pull consumer vanished or skipped messages; the caller recreates it from its position.
    `behind`: a message delivered for the first time after later ones (its stream sequence), which
    the caller must take again, in order, from before it."""

    def __init__(self, message: str, *, behind: int | None = None) -> None:
        super().__init__(message)
        self.behind = behind


# A `Stored` is made field by field through its slots (what its frozen dataclass `__init__` does
# with four calls of `object.__setattr__`, at twice the cost): the same object, equal to `Stored(...)`.
_new = object.__new__
_SEQ, _SUBJECT, _DATA, _MSG_ID = (Stored.__dict__[name].__set__ for name in ("seq", "subject", "data", "msg_id"))
_ID_FIRST = b"NATS/1.0\r\nNats-Msg-Id:"  # the header block a stream message has: its id alone, first
_ID_AT = len(_ID_FIRST)


class _Waker:
    """`asyncio.Event` for one waiter, with a timeout, without the task `asyncio.wait_for` makes
    for each wait: a consumer under a trickle of messages waits once per message, and every task
    and loop turn of that path is paid per message (docs/performance.md: a consumer's wake-up)."""

    def __init__(self) -> None:
        self._set = False
        self._waiter: asyncio.Future[bool] | None = None

    def set(self) -> None:
        self._set = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(True)

    def clear(self) -> None:
        self._set = False

    async def wait(self, timeout: float) -> bool:
        """Whether it was set (at once, or within `timeout` seconds)."""
        if self._set:
            return True
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[bool] = loop.create_future()
        self._waiter = waiter
        timer = loop.call_later(timeout, _expire, waiter)
        try:
            return await waiter
        finally:
            timer.cancel()
            self._waiter = None


def _expire(waiter: asyncio.Future[bool]) -> None:
    if not waiter.done():
        waiter.set_result(False)


class Puller:
    """Messages of one pull consumer, requested `window` at a time and gathered by a callback."""

    def __init__(
        self, nc: NATS, api: str, stream: str, consumer: str, *, window: int, last_cseq: int, after_seq: int,
        expires: float = 30.0, heartbeat: float = 5.0, end_seq: int | None = None,
    ) -> None:  # fmt: skip
        self._nc = nc
        # the last stream sequence wanted (a read's end): no request asks for more than lies before
        # it, so the server sends nothing past it (a read in pieces received far more messages than
        # it kept: each piece's second request of `window` went on past the piece's end)
        self._end = end_seq
        self._next_subject = f"{api}.CONSUMER.MSG.NEXT.{stream}.{consumer}"
        # what every ack subject of this consumer begins with (v1: no domain nor account hash),
        # before <delivered>.<sseq>.<cseq>.<timestamp>.<pending>
        self._ack_prefix = f"$JS.ACK.{stream}.{consumer}.".encode()
        self._window = window
        self._expires = expires
        self._heartbeat = heartbeat
        self._cseq = last_cseq  # consumer sequence of the last message received
        self.high = after_seq  # stream sequence of the last message buffered
        self.pending = -1  # messages left after the last one received (-1: none received yet)
        self.items: deque[Stored] = deque()
        self._replies: deque[bytes] = deque()  # each buffered message's ack subject
        self.reply = ""  # the ack subject of the last message `take` handed out
        self._subjects: dict[bytes, str] = {}  # (a consumer's few subjects, decoded once each)
        self._requests = count(1)
        self._current = 0  # the open pull request (0: none)
        self._unserved = 0
        self._inbox = ""
        self._sub: Any = None
        self._parser: FastParser | None = None  # where its runs are registered
        self._wake = _Waker()
        self._error: Exception | None = None
        self._received = 0  # messages and statuses, for the heartbeat watchdog
        self.reconnects = nc.stats["reconnects"]  # when it started: a reconnect after it ends it

    async def start(self) -> None:
        self._inbox = self._nc.new_inbox() + "."
        self._sub = await subscribe_direct(self._nc, self._inbox + "*", self._on_raw, self._on_msg)
        parser = getattr(self._nc, "_ps", None)
        if isinstance(parser, FastParser) and callable(getattr(self._nc, "direct", None)):
            parser.add_run(self._sub._id, self._on_run)
            self._parser = parser
        await self._request()

    async def stop(self) -> None:
        if self._sub is not None:
            sub, self._sub = self._sub, None
            if self._parser is not None:
                self._parser.remove_run(sub._id)
            with contextlib.suppress(Exception):
                await unsubscribe_direct(self._nc, sub)

    async def _request(self) -> None:
        if self._current or self._sub is None or len(self.items) >= self._window:
            return
        batch = self._window if self._end is None else min(self._window, self._end - self.high)
        if batch <= 0:
            return
        self._current = next(self._requests)
        self._unserved = batch
        body = json.dumps({"batch": batch, "max_bytes": MAX_REQUEST_BYTES,
                           "expires": int(self._expires * 1e9), "idle_heartbeat": int(self._heartbeat * 1e9)})
        try:
            await self._nc.publish(self._next_subject, body.encode(), reply=f"{self._inbox}{self._current}")
        except OutboundBufferLimitError:  # reconnecting, its buffer full: this puller ends with it (`_check`)
            self._current = 0

    async def _on_raw(self, subject: bytes, reply: bytes, data: bytes, headers: bytes) -> None:
        if reply:  # a message of the stream (pull consumers send statuses without a reply)
            later = self._on_run([(subject, reply, headers or b"", data)])  # (`MSG`: no headers, None)
            if later is not None:
                await later
            return
        self._received += 1
        status, description = status_of(headers) if headers else (None, "")
        await self._on_status(subject.decode(), status, description)

    async def _on_msg(self, msg: Msg) -> None:
        if msg.reply:  # (a plain nats-py client: its parsed header made raw again, for `_on_run`)
            msg_id = msg.headers.get(MSG_ID) if msg.headers else None
            raw = b"" if msg_id is None else _ID_FIRST + b" " + msg_id.encode() + b"\r\n\r\n"
            later = self._on_run([(msg.subject.encode(), msg.reply.encode(), raw, msg.data)])
            if later is not None:
                await later
            return
        self._received += 1
        headers = msg.headers or {}
        await self._on_status(msg.subject, headers.get("Status"), headers.get("Description", ""))

    async def _on_status(self, subject: str, status: str | None, description: str) -> None:
        if status in _TERMINAL:
            if subject == f"{self._inbox}{self._current}":
                self._current = 0
            if status == "409" and "Deleted" in description:
                self._error = ConsumerLost(f"consumer deleted: {description}")
        elif status == "503":
            self._error = ConsumerLost("no such consumer (no responders)")
        else:
            return  # idle heartbeat
        self._wake.set()
        await self._request()

    def _on_run(self, run: list[Raw]) -> Awaitable[None] | None:
        """Stream messages, in the order received: each buffered once, in order of stream
        sequence (see `ConsumerLost`). Gives back the next pull request to send, if one is due."""
        self._received += len(run)
        if self._nc.stats["reconnects"] != self.reconnects:
            # Received on a new connection: this consumer's deliveries cannot be trusted any more.
            # nats-server may hand a message that was in flight when the old connection went out
            # again after later ones (seen: 23, 25, ..., with consecutive consumer sequences, and
            # 24 dropped here as a redelivery), so the consumer is made again from the last
            # message handed out (`ConsumerLost`).
            self._error = ConsumerLost("the connection was re-established")
            self._wake.set()
            return None if self._current else self._request()
        prefix, cut, subjects = self._ack_prefix, len(self._ack_prefix), self._subjects
        items, replies = self.items, self._replies
        high, last_cseq, served, pending = self.high, self._cseq, 0, b""
        for raw_subject, reply, headers, data in run:
            numbers = reply[cut:].split(b".") if reply.startswith(prefix) else None
            if numbers is None or len(numbers) != 5:
                # another form (v2: with domain and account hash), or not an ack subject at all
                tokens = reply.split(b".")
                if len(tokens) < 9 or tokens[1] != b"ACK":
                    continue
                numbers = tokens[4:9] if len(tokens) == 9 else tokens[6:11]
            delivered, sseq, cseq = int(numbers[0]), int(numbers[1]), int(numbers[2])
            if sseq <= high and delivered == 1:
                # new, but behind what was handed out: never dropped (the caller goes back for it)
                self._error = ConsumerLost(f"stream sequence {sseq} delivered after {high}", behind=sseq)
                continue
            if cseq != last_cseq + 1 and delivered == 1:
                self._error = ConsumerLost(f"consumer sequence jumped from {last_cseq} to {cseq}")
            last_cseq = cseq
            served += 1
            if sseq <= high:
                continue  # a redelivery of something already handed out
            high = sseq
            pending = numbers[4]
            subject = subjects.get(raw_subject)
            if subject is None:
                subject = subjects[raw_subject] = raw_subject.decode()
            if headers.startswith(_ID_FIRST) and (end := headers.find(b"\r\n", _ID_AT)) >= 0:
                msg_id: str | None = headers[_ID_AT:end].strip().decode("utf-8", "replace")
            else:
                msg_id = msg_id_of(headers)
            stored = _new(Stored)
            _SEQ(stored, sseq)
            _SUBJECT(stored, subject)
            _DATA(stored, data)
            _MSG_ID(stored, msg_id)
            items.append(stored)
            replies.append(reply)
        self._cseq = last_cseq
        if served and self._unserved > 0:
            self._unserved = max(0, self._unserved - served)
            if self._unserved == 0:
                self._current = 0
        if pending:
            self.high = high
            self.pending = int(pending)
        if pending or self._error is not None:
            self._wake.set()
        return None if self._current else self._request()

    async def take(self, limit: int) -> list[Stored]:
        """Up to `limit` buffered messages, waiting for at least one (the ack subject of the last
        one: `reply`). Raises `ConsumerLost`."""
        quiet = 0.0
        while not self.items:
            self._check()
            if self._nc.stats["reconnects"] != self.reconnects:
                raise ConsumerLost("the connection was re-established")  # (see `_on_run`)
            self._wake.clear()
            await self._request()
            received = self._received
            if not await self._wake.wait(TICK):
                quiet = quiet + TICK if self._received == received else 0.0
                if quiet >= 3 * self._heartbeat:  # not even heartbeats: the open request is lost
                    self._current, quiet = 0, 0.0
        self._check()
        items, replies = self.items, self._replies
        limit = max(limit, 1)  # (one at least: its ack subject is `reply`, and each item has its own)
        if limit >= len(items):
            taken = list(items)
            items.clear()
            reply = replies[-1]
            replies.clear()
        else:
            taken = [items.popleft() for _ in range(limit)]
            for _ in range(limit - 1):
                replies.popleft()
            reply = replies.popleft()
        self.reply = reply.decode()
        await self._request()
        return taken

    def _check(self) -> None:
        if self._error is not None:
            raise self._error
        if self._nc.stats["reconnects"] != self.reconnects:
            raise ConsumerLost("the connection was re-established")  # what is buffered goes too
