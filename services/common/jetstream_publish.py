"""`Publisher`: pipelined JetStream publishes for the log's appends, which land in order.

- Each message is published with a reply inbox of its own, many in flight (a bounded window), and
  the PubAcks are counted in one wildcard-subscription callback; a publish left unanswered is sent
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
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from itertools import count
from typing import Any

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.errors import OutboundBufferLimitError

from services.common.jetstream_reconnect import TICK, connected
from services.common.nats_client import MSG_ID, status_of, subscribe_direct

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


def atomic_chunks(items: Sequence[_Item]) -> list[Sequence[_Item]]:
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


class Publisher:
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
        for chunk in atomic_chunks(items):
            landed = await self._publish_atomic(chunk) if self.atomic and len(chunk) > 1 else None
            acks.extend(landed if landed is not None else await self._publish_each(chunk))
        return acks

    def _one_write(self, items: Sequence[_Item]) -> bool:
        """Whether `items`, sent message by message, reach the socket in one write: then a cut
        connection loses a tail of them, sent again in order, and nothing of theirs lands in
        between. nats-py buffers what is published, and its flusher task writes the buffer out;
        `publish` gives way to that task only once the buffer passes the client's `pending_size`
        (it then waits for a flush), and `_send` only when the window is full. An atomic batch
        costs nats-server far more CPU than plain publishes on a file-stored stream (it stages the
        batch: docs/performance.md), so the appends that need none (a cycle's few messages under a
        steady load) are sent plainly."""
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
            reconnects = await connected(self._nc)
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
                reconnects = await connected(self._nc)
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

