"""`JetStreamLog`: the event log port over NATS JetStream (nats-py).

Throughput comes from never waiting on one message at a time:

- `append` publishes with a reply inbox per message, many in flight (a bounded window), and
  counts the PubAcks in one wildcard-subscription callback; a publish left unanswered is sent
  again (same `Nats-Msg-Id`, so the server stores it once).
- An append lands in order, even across a reconnect. Sent message by message, a connection cut
  in the middle of an append lost some messages while the ones published during the reconnect
  landed, so the lost ones, sent again, landed after them (a reader saw a cycle's decisions after
  later ones). An append that nats-py writes to the socket in one go cannot land so (`_one_write`)
  and is sent message by message; a larger one goes out as JetStream atomic batches (nats-server
  2.12+, a stream with `allow_atomic`; at most `ATOMIC_MESSAGES` messages or `ATOMIC_BYTES`
  each, one after the other), one PubAck per batch, which land whole or not at all. A batch that
  the server did not take whole is sent again under a new batch id; a batch it refuses (a message
  id it already holds: the first try did land, or a message it would refuse) goes message by
  message, as does everything on a server or stream without atomic batches.
- `read` and `consume` drive pull consumers by sending pull requests themselves and receiving
  the messages in one subscription callback (nats-py's `fetch()` makes a task per message; a
  callback does not). One request of `window` messages is open at a time, the next one goes out
  as soon as it is served, so the handler always has a buffer to chew on. A reconnect, or a gap
  in the consumer sequence, makes the consumer again from the last position handed out (what was
  buffered is dropped), so nothing is skipped and nothing is handed out twice: after a reconnect
  nats-server may deliver a message that was in flight after later ones, with consecutive
  consumer sequences (a burst on a connection cut again and again skipped a pack of enqueues so,
  `tests/service/test_admission_cut.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from bisect import bisect_left
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from itertools import count
from typing import Any, TypeVar

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.errors import ConnectionClosedError, NoRespondersError, OutboundBufferLimitError
from nats.errors import TimeoutError as RequestTimeout
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    ConsumerInfo,
    DeliverPolicy,
    StorageType,
    StoreCompression,
    StreamConfig,
)
from nats.js.errors import NotFoundError, ServerError, ServiceUnavailableError
from nats.js.manager import JetStreamManager

from events import Envelope, encode
from events.subjects import PREFIX, STREAM, STREAM_SUBJECTS
from services.common.connection import connect_nats
from services.common.decodes import SHARED
from services.common.log import Appended, AppendRefused, BatchHandler, StaleWrite, Stored
from services.common.memlog import envelope_subject
from services.common.nats_client import (
    MSG_ID,
    msg_id_of,
    status_of,
    subscribe_direct,
    unsubscribe_direct,
)
from services.common.packs import outgoing

EXPECTED_LAST_SUBJECT_SEQ = "Nats-Expected-Last-Subject-Sequence"
EXPECTED_LAST_SUBJECT_SEQ_SUBJECT = "Nats-Expected-Last-Subject-Sequence-Subject"
WRONG_LAST_SEQUENCE = 10071
BATCH_ID, BATCH_SEQUENCE, BATCH_COMMIT = "Nats-Batch-Id", "Nats-Batch-Sequence", "Nats-Batch-Commit"
ATOMIC_MESSAGES = 1000  # nats-server's largest atomic batch
ATOMIC_BYTES = 8 * 1024 * 1024  # of payload per atomic batch: well under what the server stages
WRITE_OVERHEAD = 256  # bytes of a publish besides its subject and payload: reply, headers, framing
ATOMIC_DISABLED = 10174  # the stream does not allow atomic batches
# The batch did not arrive whole (a message lost with a cut, or refused: the stream's open batches
# at their limit, 50 by default; the client sees the commit refused as incomplete); too many requests.
ATOMIC_AGAIN = frozenset({10176, 10210, 10167})
ATOMIC_PATIENCE = 12.0  # seconds: nats-server drops a batch left open after 10 s
# seconds to keep sending again what was refused with "no responders" (503): on a cluster, a
# replicated stream whose leader went is without one until its other replicas elect one (a few
# seconds); only after this long is the publish refused (AppendRefused).
LEADER_PATIENCE = 30.0
_NO_STREAM = {"error": {"code": 503, "description": "no stream takes this subject (no responders)"}}
_TERMINAL = frozenset({"404", "408", "409"})
MAX_REQUEST_BYTES = 32 * 1024 * 1024  # per pull request, well under nats-py's 128 MiB slow-consumer limit
MAX_LOSSES = 10  # consumer losses in a row, without progress, before giving up
# What a request or publish meets when the connection is cut under it: asked again once it is back.
# (nats-py's JetStream manager reports no responders as ServiceUnavailableError: JetStream not up yet.)
CUT_SHORT = (RequestTimeout, NoRespondersError, ServiceUnavailableError, OutboundBufferLimitError)
_T = TypeVar("_T")
TICK = 0.5  # seconds between looks at a quiet connection
RECONNECT_POLL = 0.05  # seconds between looks at a connection that is reconnecting
DELETE_SETTLE = 0.25  # seconds after deleting a stream before it may be created again (see delete_stream)
COMPRESSION = StoreCompression.S2  # of a file-stored stream's blocks (see ensure_stream)


CONNECT_WITHIN = 10.0  # seconds a service waits for NATS at start before it gives up with one line


class ConsumerLost(Exception):
    """The pull consumer vanished or skipped messages; the caller recreates it from its position.
    `behind`: a message delivered for the first time after later ones (its stream sequence), which
    the caller must take again, in order, from before it."""

    def __init__(self, message: str, *, behind: int | None = None) -> None:
        super().__init__(message)
        self.behind = behind


class OutOfOrderDelivery(RuntimeError):
    """A consumer delivered a message for the first time after later ones had been handled: the
    handler cannot take it in order any more. The service ends (and its supervisor starts it
    again, rebuilding its state from the log) rather than go on without it."""


_Item = tuple[str, bytes, dict[str, str] | None]  # subject, data, headers


class _Batch:
    __slots__ = ("done", "remaining", "results", "tokens")

    def __init__(self, size: int) -> None:
        self.results: list[dict[str, Any] | None] = [None] * size
        self.tokens = [0] * size
        self.remaining = size
        self.done = asyncio.Event()
        if size == 0:
            self.done.set()

    def reopen(self, indexes: Sequence[int]) -> None:
        """Forget what came back for `indexes`: they are sent again."""
        for index in indexes:
            if self.results[index] is not None:
                self.results[index] = None
                self.remaining += 1
        if self.remaining:
            self.done.clear()

    def settle(self, index: int, value: dict[str, Any]) -> None:
        if self.results[index] is None:
            self.results[index] = value
            self.remaining -= 1
            if self.remaining == 0:
                self.done.set()


def _atomic_chunks(items: Sequence[_Item]) -> list[Sequence[_Item]]:
    """`items` cut into runs of at most `ATOMIC_MESSAGES` messages and `ATOMIC_BYTES` (or one message)."""
    chunks: list[Sequence[_Item]] = []
    start = size = 0
    for index, (_, data, _) in enumerate(items):
        if index > start and (index - start >= ATOMIC_MESSAGES or size + len(data) > ATOMIC_BYTES):
            chunks.append(items[start:index])
            start, size = index, 0
        size += len(data)
    chunks.append(items[start:])
    return chunks


async def _connected(nc: NATS) -> int:
    """Once `nc` is connected (it reconnects on its own, for as long as it takes): how many times it
    has reconnected. A publish made while it reconnects is only buffered, and a full buffer refuses it."""
    while not nc.is_connected:
        if nc.is_closed:
            raise ConnectionClosedError
        await asyncio.sleep(RECONNECT_POLL)
    return int(nc.stats["reconnects"])


class _Publisher:
    """Pipelined JetStream publishes; all PubAcks land on one wildcard inbox callback."""

    def __init__(self, nc: NATS, window: int, timeout: float, retries: int) -> None:
        self._nc = nc
        self._window = window
        self._resume = window * 3 // 4  # a stalled sender goes on when the window is this empty
        self._timeout = timeout
        self._retries = retries
        self._prefix = ""
        self._waiting: dict[int, tuple[_Batch, int]] = {}
        self._tokens = count(1)
        self._space: asyncio.Event | None = None
        self._lock = asyncio.Lock()
        self._started = False
        self._batch_prefix = ""
        self.atomic = True  # until the server or stream says it does not take atomic batches
        self.ours: Callable[[str], bool] = lambda subject: False  # a subject of the log's stream

    async def _start(self) -> None:
        async with self._lock:
            if not self._started:
                self._prefix = self._nc.new_inbox() + "."
                self._batch_prefix = self._prefix.rsplit(".", 2)[-2] + "-"
                await subscribe_direct(self._nc, self._prefix + "*", self._on_raw_ack, self._on_ack)
                self._started = True

    async def _on_raw_ack(self, subject: bytes, reply: bytes, data: bytes, headers: bytes) -> None:
        status = status_of(headers)[0] if headers and not data else None
        self._acked(subject.decode(), data, status)

    async def _on_ack(self, msg: Msg) -> None:
        self._acked(msg.subject, msg.data, msg.headers.get("Status") if msg.headers and not msg.data else None)

    def _acked(self, subject: str, data: bytes, status: str | None) -> None:
        try:
            entry = self._waiting.pop(int(subject[len(self._prefix) :]), None)
        except ValueError:
            return
        if entry is None:
            return  # the answer to a publish we already sent again
        if self._space is not None and len(self._waiting) <= self._resume:
            self._space.set()
            self._space = None
        batch, index = entry
        if status == "503":
            batch.settle(index, _NO_STREAM)
            return
        try:
            batch.settle(index, json.loads(data))
        except ValueError:
            batch.settle(index, {"error": {"description": f"unreadable PubAck {data[:100]!r}"}})

    async def publish(self, items: Sequence[_Item]) -> list[dict[str, Any]]:
        """Publish all, in order, wait for every PubAck, return them in order: in atomic batches if
        there are several messages, each with a message id, else message by message."""
        if not self._started:
            await self._start()
        if (len(items) < 2 or not self.atomic or not all(h and MSG_ID in h for _, _, h in items)
                or self._one_write(items)):
            return await self._publish_each(items)
        acks: list[dict[str, Any]] = []
        for chunk in _atomic_chunks(items):
            landed = await self._publish_atomic(chunk) if self.atomic and len(chunk) > 1 else None
            acks.extend(landed if landed is not None else await self._publish_each(chunk))
        return acks

    def _one_write(self, items: Sequence[_Item]) -> bool:
        """Whether `items`, sent message by message, reach the socket in one write: then a cut
        connection loses a tail of them, sent again in order, and nothing of theirs lands in
        between. nats-py buffers what is published, and its flusher task writes the buffer out;
        `publish` gives way to that task only once the buffer passes the client's `pending_size`
        (it then waits for a flush), and `_send` only when the window is full. An atomic batch
        costs nats-server about 1.4 ms of CPU on a file-stored stream (it stages the batch), so
        the appends that need none (a cycle's few messages under a steady load) are sent plainly."""
        limit = getattr(self._nc, "_max_pending_size", 0)
        buffered = getattr(self._nc, "_pending_data_size", None)
        if not isinstance(limit, int) or not isinstance(buffered, int) or limit <= 0:
            return False  # a client that buffers otherwise: atomic batches
        size = buffered + sum(len(subject) + len(data) + WRITE_OVERHEAD for subject, data, _ in items)
        return size <= limit // 2 and len(self._waiting) + len(items) < self._window

    async def _publish_atomic(self, items: Sequence[_Item]) -> list[dict[str, Any]] | None:
        """Publish `items` as one atomic batch: their PubAcks (one sequence each, consecutive), or
        None if they must go message by message (the server refused the batch, or does not batch).

        A batch left unanswered (a cut) is sent again under a new id, up to `retries` times. One
        the server did not take whole (a message lost with a cut, or the stream's limit of open
        batches reached: batches cut short stay open until the server drops them, after 10 s) is
        sent again after a pause, for up to `ATOMIC_PATIENCE` seconds."""
        last = len(items)
        publish = self._nc.publish
        unanswered = 0
        patience = asyncio.get_running_loop().time() + ATOMIC_PATIENCE
        pause = 0.05
        while True:
            reconnects = await _connected(self._nc)
            batch = _Batch(1)
            token = next(self._tokens)
            self._waiting[token] = (batch, 0)  # the commit's PubAck
            batch.tokens[0] = token
            batch_id = f"{self._batch_prefix}{token}"
            try:
                for number, (subject, data, headers) in enumerate(items, 1):
                    marked = {**(headers or {}), BATCH_ID: batch_id, BATCH_SEQUENCE: str(number)}
                    if number == last:
                        marked[BATCH_COMMIT] = "1"
                    reply = f"{self._prefix}{token}" if number == last else ""
                    await publish(subject, data, reply=reply, headers=marked)
                settled = await self._settled(batch, reconnects)
            except OutboundBufferLimitError:  # the connection went meanwhile: again once it is back
                settled = False
            finally:
                self._forget(batch, [0])  # answered or not, the commit no longer holds a place
            if not settled:
                if self._nc.stats["reconnects"] == reconnects:  # no answer on a steady connection
                    unanswered += 1
                    if unanswered > self._retries:
                        return None
                continue  # sent again under a new id (if the first did land, this one is refused)
            ack = batch.results[0] or {}
            error = ack.get("error")
            if not error:
                if ack.get("batch") != batch_id or ack.get("count") != last:
                    self.atomic = False  # a server without atomic batches stored them one by one
                    return None
                first = int(ack["seq"]) - last + 1
                return [{"stream": ack.get("stream"), "seq": first + i} for i in range(last)]
            code = error.get("err_code")
            if code == ATOMIC_DISABLED:
                self.atomic = False
                return None
            if code not in ATOMIC_AGAIN or asyncio.get_running_loop().time() + pause > patience:
                return None
            await asyncio.sleep(pause)
            pause = min(2 * pause, 2.0)

    async def _publish_each(self, items: Sequence[_Item]) -> list[dict[str, Any]]:
        """Publish all, message by message, wait for every PubAck (resending unanswered ones, and
        for up to `LEADER_PATIENCE` seconds those refused for want of a stream leader)."""
        batch = _Batch(len(items))
        todo: Sequence[int] = range(len(items))
        unanswered = 0
        patience: float | None = None
        pause = 0.05
        try:
            while True:
                reconnects = await _connected(self._nc)
                try:
                    sent = await self._send(batch, items, todo, reconnects)
                except OutboundBufferLimitError:  # the connection went meanwhile: again once it is back
                    sent = False
                if sent and await self._settled(batch, reconnects):
                    refused = [i for i, r in enumerate(batch.results) if r is _NO_STREAM and self.ours(items[i][0])]
                    now = asyncio.get_running_loop().time()
                    patience = now + LEADER_PATIENCE if patience is None and refused else patience
                    if not refused or patience is None or now > patience:
                        return [r for r in batch.results if r is not None]
                    batch.reopen(refused)  # no leader (yet): the same messages (ids) again shortly
                    todo = refused
                    await asyncio.sleep(pause)
                    pause = min(2 * pause, 1.0)
                    continue
                todo = [i for i, r in enumerate(batch.results) if r is None]
                self._forget(batch, todo)
                if self._nc.stats["reconnects"] == reconnects:  # no answer on a steady connection
                    unanswered += 1
                    if unanswered > self._retries:
                        raise TimeoutError(f"JetStream did not acknowledge {batch.remaining} of {len(items)} "
                                           "publishes")
        finally:
            if batch.remaining:
                self._forget(batch, [i for i, r in enumerate(batch.results) if r is None])

    async def _send(
        self, batch: _Batch, items: Sequence[_Item], todo: Sequence[int], reconnects: int
    ) -> bool:
        """Publish `todo`, at most `window` unanswered at a time; False if acks stopped coming."""
        waiting, tokens, prefix, publish = self._waiting, self._tokens, self._prefix, self._nc.publish
        for index in todo:
            while len(waiting) >= self._window:
                if self._space is None:
                    self._space = asyncio.Event()
                if not await self._wait(self._space, self._waiting.__len__, reconnects):
                    return False
            token = next(tokens)
            waiting[token] = (batch, index)
            batch.tokens[index] = token
            subject, data, headers = items[index]
            await publish(subject, data, reply=f"{prefix}{token}", headers=headers)
        return True

    async def _settled(self, batch: _Batch, reconnects: int) -> bool:
        """Wait while acks keep coming; False after `timeout` without any, or after a reconnect."""
        while not batch.done.is_set():
            if not await self._wait(batch.done, lambda: batch.remaining, reconnects):
                return False
        return True

    async def _wait(self, event: asyncio.Event, progress: Callable[[], int], reconnects: int) -> bool:
        """Wait for `event`, or for `progress()` to change: False after `timeout` without either, or
        once the connection was re-established (what was in flight then may be lost: send it again)."""
        before = progress()
        waited = 0.0
        while waited < self._timeout:
            try:
                await asyncio.wait_for(event.wait(), TICK)
                return True
            except TimeoutError:
                if self._nc.stats["reconnects"] != reconnects and self._nc.is_connected:
                    return False
                if progress() != before:
                    return True
                waited += TICK
        return False

    def _forget(self, batch: _Batch, indexes: Sequence[int]) -> None:
        for index in indexes:
            self._waiting.pop(batch.tokens[index], None)
        if self._space is not None and len(self._waiting) < self._window:
            self._space.set()
            self._space = None


class _Delivered:
    __slots__ = ("reply", "stored")

    def __init__(self, stored: Stored, reply: str) -> None:
        self.stored = stored
        self.reply = reply


class _Waker:
    """`asyncio.Event` for one waiter, with a timeout, without the task `asyncio.wait_for` makes
    for each wait: a consumer under a trickle of messages waits once per message, and every task
    and loop turn of that path costs (a null fold cost ~350 µs of CPU per message at 500/s)."""

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


class _Puller:
    """Messages of one pull consumer, requested `window` at a time and gathered by a callback."""

    def __init__(
        self, nc: NATS, api: str, stream: str, consumer: str, *, window: int, last_cseq: int, after_seq: int,
        expires: float = 30.0, heartbeat: float = 5.0, end_seq: int | None = None,
    ) -> None:  # fmt: skip
        self._nc = nc
        # the last stream sequence wanted (a read's end): no request asks for more than lies before
        # it, so the server sends nothing past it (a read in pieces took ~60% more messages than it
        # kept: each piece's second request of `window` went on past the piece's end)
        self._end = end_seq
        self._next_subject = f"{api}.CONSUMER.MSG.NEXT.{stream}.{consumer}"
        self._window = window
        self._expires = expires
        self._heartbeat = heartbeat
        self._cseq = last_cseq  # consumer sequence of the last message received
        self.high = after_seq  # stream sequence of the last message buffered
        self.pending = -1  # messages left after the last one received (-1: none received yet)
        self.items: deque[_Delivered] = deque()
        self._requests = count(1)
        self._current = 0  # the open pull request (0: none)
        self._unserved = 0
        self._inbox = ""
        self._sub: Any = None
        self._wake = _Waker()
        self._error: Exception | None = None
        self._received = 0  # messages and statuses, for the heartbeat watchdog
        self._reconnects = nc.stats["reconnects"]

    async def start(self) -> None:
        self._inbox = self._nc.new_inbox() + "."
        self._sub = await subscribe_direct(self._nc, self._inbox + "*", self._on_raw, self._on_msg)
        await self._request()

    async def stop(self) -> None:
        if self._sub is not None:
            sub, self._sub = self._sub, None
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
        self._received += 1
        if reply:  # a message of the stream (pull consumers send statuses without a reply)
            self._on_data(subject.decode(), reply.decode(), data, msg_id_of(headers))
            if not self._current:
                await self._request()
            return
        status, description = status_of(headers) if headers else (None, "")
        await self._on_status(subject.decode(), status, description)

    async def _on_msg(self, msg: Msg) -> None:
        self._received += 1
        if msg.reply:
            self._on_data(msg.subject, msg.reply, msg.data, msg.headers.get(MSG_ID) if msg.headers else None)
            if not self._current:
                await self._request()
            return
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

    def _on_data(self, subject: str, reply: str, data: bytes, msg_id: str | None) -> None:
        if self._nc.stats["reconnects"] != self._reconnects:
            # Received on a new connection: this consumer's deliveries cannot be trusted any more.
            # nats-server may hand a message that was in flight when the old connection went out
            # again after later ones (seen: 23, 25, ..., with consecutive consumer sequences, and
            # 24 dropped here as a redelivery), so the consumer is made again from the last
            # message handed out (`ConsumerLost`).
            self._error = ConsumerLost("the connection was re-established")
            self._wake.set()
            return
        tokens = reply.split(".")
        if len(tokens) < 9 or tokens[1] != "ACK":
            return
        offset = 0 if len(tokens) == 9 else 2  # v2 ack subjects carry domain and account hash
        delivered, sseq, cseq = int(tokens[4 + offset]), int(tokens[5 + offset]), int(tokens[6 + offset])
        if sseq <= self.high and delivered == 1:
            # new, but behind what was handed out: never dropped (the caller goes back for it)
            self._error = ConsumerLost(f"stream sequence {sseq} delivered after {self.high}", behind=sseq)
            self._wake.set()
            return
        if cseq != self._cseq + 1 and delivered == 1:
            self._error = ConsumerLost(f"consumer sequence jumped from {self._cseq} to {cseq}")
        self._cseq = cseq
        if self._unserved > 0:
            self._unserved -= 1
            if self._unserved == 0:
                self._current = 0
        if sseq <= self.high:
            return  # a redelivery of something already handed out
        self.high = sseq
        self.pending = int(tokens[8 + offset])
        self.items.append(_Delivered(Stored(sseq, subject, data, msg_id), reply))
        self._wake.set()

    async def take(self, limit: int) -> list[_Delivered]:
        """Up to `limit` buffered messages, waiting for at least one. Raises `ConsumerLost`."""
        quiet = 0.0
        while not self.items:
            self._check()
            if self._nc.stats["reconnects"] != self._reconnects:
                raise ConsumerLost("the connection was re-established")  # (see `_on_data`)
            self._wake.clear()
            await self._request()
            received = self._received
            if not await self._wake.wait(TICK):
                quiet = quiet + TICK if self._received == received else 0.0
                if quiet >= 3 * self._heartbeat:  # not even heartbeats: the open request is lost
                    self._current, quiet = 0, 0.0
        self._check()
        taken = [self.items.popleft() for _ in range(min(limit, len(self.items)))]
        await self._request()
        return taken

    def _check(self) -> None:
        if self._error is not None:
            raise self._error
        if self._nc.stats["reconnects"] != self._reconnects:
            raise ConsumerLost("the connection was re-established")  # what is buffered goes too


def trace_headers(msg_id: str, trace: dict[str, str] | None) -> dict[str, str]:
    """A message's headers when its (first) envelope carries a trace context: the W3C ones
    (`traceparent`, `tracestate`) beside `Nats-Msg-Id`, a value with a line break left out."""
    headers = {MSG_ID: msg_id}
    for name in ("traceparent", "tracestate"):
        value = trace.get(name) if trace else None
        if value and "\r" not in value and "\n" not in value:
            headers[name] = value
    return headers


class JetStreamLog:
    """The event log on a JetStream stream (default: `events.subjects.STREAM` over STREAM_SUBJECTS).

    `prefix` replaces the subjects' first token (`poolwise`) for envelopes and the stream's subjects,
    so benchmarks can run on a server that already holds the real stream. Subjects that callers
    pass in (`append_raw`, filters) are used as given.
    """

    read_window = 8192  # messages per pull request when reading

    def __init__(
        self,
        nc: NATS,
        *,
        stream: str = STREAM,
        prefix: str = PREFIX,
        window: int = 4096,
        timeout: float = 10.0,
        retries: int = 3,
        owns_connection: bool = False,
    ) -> None:
        self.nc = nc
        self.stream = stream
        self.prefix = prefix
        self.subjects = tuple(self._prefixed(s) for s in STREAM_SUBJECTS)
        self.jsm = JetStreamManager(nc, timeout=timeout)
        self._api = "$JS.API"
        self._owns = owns_connection
        self._publisher = _Publisher(nc, window, timeout, retries)
        self._publisher.ours = self._ours  # "no responders" on these: a stream without a leader for now

    def _ours(self, subject: str) -> bool:
        """Whether the stream's subjects take `subject` (NATS wildcards: `*` a token, `>` the rest)."""
        tokens = subject.split(".")
        for pattern in self.subjects:
            parts = pattern.split(".")
            fits = len(tokens) >= len(parts) if parts[-1] == ">" else len(tokens) == len(parts)
            if fits and all(p in ("*", ">") or p == t for p, t in zip(parts, tokens, strict=False)):
                return True
        return False

    @classmethod
    async def connect(cls, url: str, *, name: str = "poolwise", within: float = CONNECT_WITHIN,
                      **options: Any) -> JetStreamLog:
        """Connect to NATS at `url` (the log closes the connection on `close()`): `ConnectionError`
        naming it if it cannot be reached `within` seconds; once connected, a lost connection is
        re-established for as long as it takes, quietly (`services.common.connection`)."""
        nc = await connect_nats(url, name=name, timeout=within)
        return cls(nc, owns_connection=True, **options)

    async def close(self) -> None:
        """Drain and close the connection (if the log owns it); one that is reconnecting, or
        connecting, is closed at once (nats-py refuses to drain it)."""
        if not self._owns or self.nc.is_closed:
            return
        if self.nc.is_reconnecting or self.nc.is_connecting:
            await self.nc.close()
            return
        await self.nc.drain()

    async def __aenter__(self) -> JetStreamLog:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _prefixed(self, subject: str) -> str:
        return subject if self.prefix == PREFIX else self.prefix + subject[len(PREFIX) :]

    # -- the stream ------------------------------------------------------------------------------

    async def ensure_stream(self, *, replicas: int = 1, duplicate_window: float = 600.0, memory: bool = False) -> None:
        """Create the stream (file storage, compressed; `memory` for tests), or bring its subjects,
        duplicate window, compression and atomic batches up to date (idempotent; storage and
        replicas of an existing stream are kept).

        A file-stored stream is compressed with S2 (`COMPRESSION`): nats-server compresses each
        block of the log once it is full (the events are JSON: a 50k-gang burst takes 4.8 MB of
        disk instead of 19.5; the server's CPU per gang within the spread). A stream made without
        it is changed to it; nats-server compresses the blocks it seals from its next start on."""
        self._publisher.atomic = True  # tried again, if a publish found atomic batches off before
        try:
            info = await self.jsm.stream_info(self.stream)
        except NotFoundError:
            config = StreamConfig(
                name=self.stream, subjects=list(self.subjects), num_replicas=replicas,
                storage=StorageType.MEMORY if memory else StorageType.FILE, duplicate_window=duplicate_window,
                compression=StoreCompression.NONE if memory else COMPRESSION, allow_atomic=True,
            )  # fmt: skip
            for attempt in range(3):
                try:
                    await self.jsm.add_stream(config)
                    return
                except ServerError:  # the server still tidying a stream deleted a moment ago
                    if attempt == 2:
                        raise
                    await asyncio.sleep(DELETE_SETTLE)
            return
        config = info.config
        compression = COMPRESSION if config.storage == StorageType.FILE else config.compression
        if (set(config.subjects or ()) != set(self.subjects) or config.duplicate_window != duplicate_window
                or config.compression != compression or not config.allow_atomic):
            config = config.evolve(subjects=list(self.subjects), duplicate_window=duplicate_window,
                                   compression=compression, allow_atomic=True)
            await self.jsm.update_stream(config)

    async def delete_stream(self) -> None:
        """Remove the stream and everything in it (tests, `poolwise reset`).

        nats-server (2.15) may still write a deleted file-backed stream's files for a moment after
        answering; a stream created again under the same name at once can come up holding the old
        messages. So for those this returns only after a short settle time."""
        try:
            info = await self.jsm.stream_info(self.stream)
            await self.jsm.delete_stream(self.stream)
        except NotFoundError:
            return
        if info.config.storage != StorageType.MEMORY:
            await asyncio.sleep(DELETE_SETTLE)

    # -- writing ---------------------------------------------------------------------------------

    async def append(self, envelopes: Sequence[Envelope]) -> list[Appended]:
        # Encoded through SHARED: remembered for this process's folders to read back (services.common.decodes);
        # runs of packable decisions go out as one message each (services.common.packs).
        messages = outgoing(envelopes, envelope_subject, SHARED.encode)
        items = [(self._prefixed(m.subject), m.data, {MSG_ID: m.msg_id} if envelopes[m.first].trace is None
                  else trace_headers(m.msg_id, envelopes[m.first].trace)) for m in messages]
        try:
            landed = self._appended(items, await self._publisher.publish(items))
        except AppendRefused as refused:  # name the envelope, not the message
            raise AppendRefused(refused.subject, refused.reason, messages[refused.index].first) from None
        if len(messages) == len(envelopes):
            return landed
        out: list[Appended] = []
        for message, where in zip(messages, landed, strict=True):
            out.extend([where] * message.count)
        return out

    async def append_raw(self, subject: str, data: bytes, msg_id: str | None = None) -> Appended:
        items = [(subject, bytes(data), {MSG_ID: msg_id} if msg_id else None)]
        return self._appended(items, await self._publisher.publish(items))[0]

    async def append_expecting(
        self, envelope: Envelope, subject: str, expected_last_subject_seq: int
    ) -> Appended:
        """Publish on the envelope's own subject, only if the last event on `subject` (which may be a
        wildcard) is at `expected_last_subject_seq`."""
        target = self._prefixed(envelope_subject(envelope))
        headers = {MSG_ID: envelope.id, EXPECTED_LAST_SUBJECT_SEQ: str(expected_last_subject_seq)}
        if subject != target:
            headers[EXPECTED_LAST_SUBJECT_SEQ_SUBJECT] = subject
        items = [(target, encode(envelope), headers)]
        acks = await self._publisher.publish(items)
        error = acks[0].get("error")
        if error and error.get("err_code") == WRONG_LAST_SEQUENCE:
            raise StaleWrite(subject, expected_last_subject_seq, f"{subject}: {error.get('description')}")
        return self._appended(items, acks)[0]

    @staticmethod
    def _appended(items: Sequence[tuple[str, bytes, Any]], acks: Sequence[dict[str, Any]]) -> list[Appended]:
        out: list[Appended] = []
        for index, ack in enumerate(acks):
            error = ack.get("error")
            if error:
                raise AppendRefused(items[index][0], str(error.get("description", error)), index)
            out.append(Appended(int(ack["seq"]), bool(ack.get("duplicate", False))))
        return out

    # -- reading ---------------------------------------------------------------------------------

    async def last_seq(self, subject: str | None = None) -> int:
        if subject is None:
            return int((await self.jsm.stream_info(self.stream)).state.last_seq)
        request = json.dumps({"last_by_subj": subject}).encode()
        response = await self.nc.request(f"{self._api}.STREAM.MSG.GET.{self.stream}", request, timeout=5.0)
        reply = json.loads(response.data)
        error = reply.get("error")
        if error:
            if error.get("code") == 404 and error.get("err_code") == 10037:  # no message found
                return 0
            raise RuntimeError(f"last sequence of {subject}: {error.get('description')}")
        return int(reply["message"]["seq"])

    async def read(
        self, start_seq: int = 1, subjects: Sequence[str] = (), end_seq: int | None = None
    ) -> list[Stored]:
        end = await self._asking(self.last_seq) if end_seq is None else end_seq
        out: list[Stored] = []
        losses = 0
        while not out or out[-1].seq < end:
            position = out[-1].seq if out else max(start_seq, 1) - 1
            if position >= end:
                break
            reconnects = await _connected(self.nc)
            try:
                await self._read_into(out, position, end, subjects)
                break
            except (ConsumerLost, *CUT_SHORT) as exc:
                # again from what was read (from before a message delivered late); only losses
                # without progress on a steady connection count towards giving up
                behind = exc.behind if isinstance(exc, ConsumerLost) else None
                if behind is not None:
                    del out[bisect_left([item.seq for item in out], behind):]
                if out and out[-1].seq > position:
                    losses = 0
                elif self.nc.stats["reconnects"] == reconnects:
                    losses += 1
                    if losses >= MAX_LOSSES:
                        raise
        return out

    async def _asking(self, ask: Callable[[], Awaitable[_T]]) -> _T:
        """`await ask()` (a JetStream API request), again while it is cut short by a reconnect; only
        failures on a steady connection count towards giving up."""
        failures = 0
        while True:
            reconnects = await _connected(self.nc)
            try:
                return await ask()
            except CUT_SHORT:
                if self.nc.stats["reconnects"] == reconnects:
                    failures += 1
                    if failures >= MAX_LOSSES:
                        raise
                await asyncio.sleep(0.05 * max(failures, 1))

    async def _read_into(self, out: list[Stored], after: int, end: int, subjects: Sequence[str]) -> None:
        # named in the request's subject (CONSUMER.CREATE.<stream>.<name>): a reader allowed only
        # such names (the auditor, deploy/nats/teams.conf) cannot name a service's durable in the
        # body of an unnamed create, which updates that durable (its filter, ...)
        config = ConsumerConfig(
            name=f"read-{secrets.token_hex(8)}",
            ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=after + 1, filter_subjects=list(subjects) or None, mem_storage=True,
            inactive_threshold=30.0, num_replicas=1,
        )  # fmt: skip
        info = await self.jsm.add_consumer(self.stream, config)
        if info.num_pending == 0:
            await self._delete_consumer(info.name)
            return
        puller = _Puller(self.nc, self._api, self.stream, info.name, window=self.read_window, last_cseq=0,
                         after_seq=after, heartbeat=2.0, end_seq=end)  # fmt: skip
        try:
            await puller.start()
            while True:
                for item in await puller.take(self.read_window):
                    if item.stored.seq > end:
                        return
                    out.append(item.stored)
                    if item.stored.seq == end:
                        return
                if puller.pending == 0 and not puller.items:
                    return
        finally:
            await puller.stop()
            await self._delete_consumer(info.name)

    async def _delete_consumer(self, name: str | None) -> None:
        if name:
            with contextlib.suppress(Exception):
                await self.jsm.delete_consumer(self.stream, name)

    # -- consuming -------------------------------------------------------------------------------

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
        """A durable pull consumer (ack policy all) from `after_seq + 1`; each batch is acknowledged
        (its last message) after the handler returns. A raising handler's error propagates and
        nothing of that batch is acknowledged. `linger`: see `EventLog.consume`."""
        window = max(2 * max_batch, 1024)
        position = after_seq
        losses = 0
        while True:
            info = await self._asking(partial(self._durable_at, durable, subjects, position))
            before = position
            last_cseq = info.delivered.consumer_seq if info.delivered else 0
            puller = _Puller(self.nc, self._api, self.stream, durable, window=window, last_cseq=last_cseq,
                             after_seq=position)  # fmt: skip
            try:
                await puller.start()
                while True:
                    items = await puller.take(max_batch)
                    await handler([item.stored for item in items])
                    position = items[-1].stored.seq
                    with contextlib.suppress(OutboundBufferLimitError):  # reconnecting, its buffer full:
                        await self.nc.publish(items[-1].reply, b"")  # the consumer is made again at `position`
                    if linger and len(items) < max_batch:
                        await asyncio.sleep(linger)
            except ConsumerLost as exc:
                if exc.behind is not None and exc.behind <= position:
                    raise OutOfOrderDelivery(
                        f"consumer {durable}: stream sequence {exc.behind} was delivered after {position} had been "
                        "handled") from exc
                # a reconnect always makes the consumer again (`_Puller._on_data`): only losses
                # without progress on a steady connection count towards giving up (a quiet consumer
                # would otherwise end at its tenth network blip, however far apart)
                if position > before:
                    losses = 0
                if self.nc.stats["reconnects"] == puller._reconnects:
                    losses += 1
                    if losses >= MAX_LOSSES:
                        raise
                await asyncio.sleep(0.05 * max(losses, 1))  # then recreate it at the last position handled
            finally:
                await asyncio.shield(puller.stop())

    async def _durable_at(self, durable: str, subjects: Sequence[str], after_seq: int) -> ConsumerInfo:
        """The durable consumer, positioned right after `after_seq` (recreated when it is not)."""
        try:
            info: ConsumerInfo | None = await self.jsm.consumer_info(self.stream, durable)
        except NotFoundError:
            info = None
        if info is not None:
            config = info.config
            filters = config.filter_subjects or ([config.filter_subject] if config.filter_subject else [])
            if (
                config.ack_policy == AckPolicy.ALL
                and not config.deliver_subject
                and sorted(filters) == sorted(subjects)
                and info.num_ack_pending == 0
                and not info.num_waiting
                and info.delivered is not None and info.delivered.stream_seq == after_seq
                and info.ack_floor is not None and info.ack_floor.stream_seq == after_seq
            ):
                return info
            await self.jsm.delete_consumer(self.stream, durable)
        created: ConsumerInfo = await self.jsm.add_consumer(self.stream, ConsumerConfig(
            name=durable, durable_name=durable, ack_policy=AckPolicy.ALL,
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=after_seq + 1,
            filter_subjects=list(subjects) or None, ack_wait=300.0, max_ack_pending=-1,
        ))  # fmt: skip
        return created


async def connect(url: str, **options: Any) -> JetStreamLog:
    """`JetStreamLog.connect(url)`: a log on its own connection."""
    return await JetStreamLog.connect(url, **options)
