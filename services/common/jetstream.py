"""`JetStreamLog`: the event log port over NATS JetStream (nats-py).

Throughput comes from never waiting on one message at a time: `append` pipelines its publishes
and lands them in order (`services.common.jetstream_publish`); `read` and `consume` drive pull
consumers that hand out messages straight from nats-py's protocol parser
(`services.common.jetstream_pull`), made again from the last position handled after a reconnect
(`services.common.jetstream_reconnect`); the stream and consumers are set up by
`services.common.jetstream_setup`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from functools import partial
from typing import Any

from nats.aio.client import Client as NATS
from nats.errors import OutboundBufferLimitError
from nats.js.manager import JetStreamManager

from events import Envelope, encode
from events.subjects import PREFIX, STREAM, STREAM_SUBJECTS
from services.common.connection import connect_nats
from services.common.decodes import SHARED
from services.common.jetstream_publish import Publisher
from services.common.jetstream_pull import ConsumerLost, Puller
from services.common.jetstream_reconnect import CUT_SHORT, MAX_LOSSES, asking, connected
from services.common.jetstream_setup import delete_stream, durable_at, ensure_stream, reader_config
from services.common.log import Appended, AppendRefused, BatchHandler, StaleWrite, Stored
from services.common.memlog import envelope_subject
from services.common.nats_client import MSG_ID
from services.common.packs import outgoing

EXPECTED_LAST_SUBJECT_SEQ = "Nats-Expected-Last-Subject-Sequence"
EXPECTED_LAST_SUBJECT_SEQ_SUBJECT = "Nats-Expected-Last-Subject-Sequence-Subject"
WRONG_LAST_SEQUENCE = 10071
CONNECT_WITHIN = 10.0  # seconds a service waits for NATS at start before it gives up with one line


class OutOfOrderDelivery(RuntimeError):
    """A consumer delivered a message for the first time after later ones had been handled: the
    handler cannot take it in order any more. The service ends (and its supervisor starts it
    again, rebuilding its state from the log) rather than go on without it."""


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
        self._publisher = Publisher(nc, window, timeout, retries)
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
        """Create the stream, or bring it up to date (`jetstream_setup.ensure_stream`); a publish
        that found atomic batches off tries them again."""
        self._publisher.atomic = True
        await ensure_stream(self.jsm, self.stream, self.subjects, replicas=replicas,
                            duplicate_window=duplicate_window, memory=memory)

    async def delete_stream(self) -> None:
        """Remove the stream and everything in it (tests, `poolwise reset`; see `jetstream_setup.delete_stream`)."""
        await delete_stream(self.jsm, self.stream)

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
        end = await asking(self.nc, self.last_seq) if end_seq is None else end_seq
        out: list[Stored] = []
        losses = 0
        while not out or out[-1].seq < end:
            position = out[-1].seq if out else max(start_seq, 1) - 1
            if position >= end:
                break
            reconnects = await connected(self.nc)
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

    async def _read_into(self, out: list[Stored], after: int, end: int, subjects: Sequence[str]) -> None:
        config = reader_config(f"read-{secrets.token_hex(8)}", after, subjects)
        info = await self.jsm.add_consumer(self.stream, config)
        if info.num_pending == 0:
            await self._delete_consumer(info.name)
            return
        puller = Puller(self.nc, self._api, self.stream, info.name, window=self.read_window, last_cseq=0,
                        after_seq=after, heartbeat=2.0, end_seq=end)  # fmt: skip
        try:
            await puller.start()
            while True:
                taken = await puller.take(self.read_window)
                if taken[-1].seq >= end:  # (in order of stream sequence: what lies past `end` is left)
                    out += taken[:bisect_right([item.seq for item in taken], end)]
                    return
                out += taken
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
            info = await asking(self.nc, partial(durable_at, self.jsm, self.stream, durable, subjects, position))
            before = position
            last_cseq = info.delivered.consumer_seq if info.delivered else 0
            puller = Puller(self.nc, self._api, self.stream, durable, window=window, last_cseq=last_cseq,
                            after_seq=position)  # fmt: skip
            try:
                await puller.start()
                while True:
                    items = await puller.take(max_batch)
                    await handler(items)
                    position = items[-1].seq
                    with contextlib.suppress(OutboundBufferLimitError):  # reconnecting, its buffer full:
                        await self.nc.publish(puller.reply, b"")  # the consumer is made again at `position`
                    if linger and len(items) < max_batch:
                        await asyncio.sleep(linger)
            except ConsumerLost as exc:
                if exc.behind is not None and exc.behind <= position:
                    raise OutOfOrderDelivery(
                        f"consumer {durable}: stream sequence {exc.behind} was delivered after {position} had been "
                        "handled") from exc
                # a reconnect always makes the consumer again (`Puller._on_run`): only losses
                # without progress on a steady connection count towards giving up (a quiet consumer
                # would otherwise end at its tenth network blip, however far apart)
                if position > before:
                    losses = 0
                if self.nc.stats["reconnects"] == puller.reconnects:
                    losses += 1
                    if losses >= MAX_LOSSES:
                        raise
                await asyncio.sleep(0.05 * max(losses, 1))  # then recreate it at the last position handled
            finally:
                await asyncio.shield(puller.stop())


async def connect(url: str, **options: Any) -> JetStreamLog:
    """`JetStreamLog.connect(url)`: a log on its own connection."""
    return await JetStreamLog.connect(url, **options)
