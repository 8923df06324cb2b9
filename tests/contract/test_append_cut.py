"""An append of many messages lands whole and in order even when the connection is cut in the middle
of it (JetStream only: the memory log has no connection to lose).

A proxy between the log and a real nats-server cuts the connection once a given number of bytes
went through it in one direction: the chunk in hand is dropped, both sides are aborted, and
nats-py reconnects (through the proxy again) and sends what it buffered meanwhile. Sent message
by message, the messages lost with the cut were sent again after those published during the
reconnect had landed: the append landed out of order (seen in 4 of 4 tries at this size before
atomic batches). Cutting the answers instead (server to client) loses PubAcks of a batch that did
land: the batch sent again is refused as duplicates and each message is answered with where it is.
An append small enough to reach the socket in one write is sent message by message (a tail of it is
lost, and sent again in order); a larger one in atomic batches.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import nats
import pytest
from nats.js.api import StorageType, StreamConfig

from events import Envelope, GangCancelled, decode
from events import subjects as subj
from services.common.jetstream import JetStreamLog
from services.common.jetstream_publish import atomic_chunks
from services.common.natsserver import EmbeddedNats
from tests.cutting_proxy import CuttingProxy

pytestmark = pytest.mark.anyio

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SAFETY = 120  # seconds: a hung test fails instead of hanging the run (not a timing assertion)
PAD = "x" * 20_000  # large messages, so that an append is still being written when the cut comes


def cancels(batch: int, n: int) -> list[Envelope]:
    return [Envelope(id=f"cut-{batch}-{i}", time=T0, source="test",
                     event=GangCancelled(tree="t1", gang=f"g{batch}-{i}", reason=PAD)) for i in range(n)]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[EmbeddedNats]:
    nats = EmbeddedNats(tmp_path).start()
    try:
        yield nats
    finally:
        nats.stop()


async def appended_through_cuts(server: EmbeddedNats, upstream: bool, rounds: int = 3, n: int = 400,
                                cut: int = 500_000) -> None:
    proxy = CuttingProxy(int(server.url.rsplit(":", 1)[1]))
    await proxy.start()
    log = await JetStreamLog.connect(f"nats://127.0.0.1:{proxy.port}", timeout=2.0)
    try:
        await log.ensure_stream(memory=True)
        expected: list[str] = []
        with anyio.fail_after(SAFETY):
            for batch in range(rounds):
                envelopes = cancels(batch, n)
                expected += [e.id for e in envelopes]
                proxy.cut(cut if upstream else 60, upstream=upstream)
                while True:
                    try:
                        landed = await log.append(envelopes)
                        break
                    except Exception:  # nats-py's buffer is full while it reconnects: the caller retries
                        await anyio.sleep(0.2)
                assert not log._publisher._waiting  # no PubAck is waited for any more: the window is whole
                seqs = [a.seq for a in landed]
                assert seqs == list(range(seqs[0], seqs[0] + n)), "the append landed whole and in order"
            proxy.cut(300_000, upstream=False)  # and reading it all back is cut too
            stored = await log.read(0)
        assert proxy.cuts == rounds + 1
        assert [decode(s.data).id for s in stored] == expected  # each once, in the order appended
        assert [s.seq for s in stored] == list(range(1, len(expected) + 1))
    finally:
        await log.close()
        proxy.close()


@pytest.mark.nats
async def test_an_append_cut_on_its_way_lands_whole_and_in_order(server: EmbeddedNats) -> None:
    await appended_through_cuts(server, upstream=True)  # 8 MB: in atomic batches


@pytest.mark.nats
async def test_a_small_append_cut_on_its_way_lands_in_order(server: EmbeddedNats) -> None:
    await appended_through_cuts(server, upstream=True, n=30, cut=300_000)  # 600 KB: one write, message by message


@pytest.mark.nats
async def test_an_append_whose_answers_are_cut_lands_once(server: EmbeddedNats) -> None:
    await appended_through_cuts(server, upstream=False)


@pytest.mark.nats
async def test_a_stream_without_atomic_batches_takes_appends_message_by_message(server: EmbeddedNats) -> None:
    log = await JetStreamLog.connect(server.url, timeout=2.0)
    try:
        await log.jsm.add_stream(StreamConfig(name=log.stream, subjects=list(log.subjects), storage=StorageType.MEMORY))
        envelopes = cancels(0, 120)  # 2.4 MB: more than one write, so an atomic batch is tried first
        landed = await log.append(envelopes)
        assert [a.seq for a in landed] == list(range(1, 121))
        assert not log._publisher.atomic  # refused as disabled: the stream's own choice, kept
        assert [decode(s.data).id for s in await log.read(0)] == [e.id for e in envelopes]
        await log.ensure_stream(memory=True)  # turns atomic batches on for the stream, and the publisher tries again
        assert (await log.jsm.stream_info(log.stream)).config.allow_atomic
        assert [a.seq for a in await log.append(cancels(1, 120))] == list(range(121, 241))
        assert log._publisher.atomic
    finally:
        await log.close()


def test_atomic_batches_hold_at_most_a_thousand_messages_and_8_mib() -> None:
    small = [("s", b"x" * 10, None)] * 2500
    assert [len(c) for c in atomic_chunks(small)] == [1000, 1000, 500]
    big = [("s", b"x" * (3 * 1024 * 1024), None)] * 5  # two fit in 8 MiB, three do not
    assert [len(c) for c in atomic_chunks(big)] == [2, 2, 1]
    huge = [("s", b"x" * (9 * 1024 * 1024), None)] * 2  # alone above the limit: a batch of one each
    assert [len(c) for c in atomic_chunks(huge)] == [1, 1]


@pytest.mark.nats
async def test_nats_py_does_not_give_way_within_a_small_append(server: EmbeddedNats) -> None:
    """What `_one_write` stands on: a run of small publishes does not let the client's flusher
    task (or anything else) run in between, so they all reach the socket in one write. A nats-py
    that yields inside `publish` fails this, and small appends could then land out of order."""
    log = await JetStreamLog.connect(server.url, timeout=2.0)
    try:
        ran: list[int] = []
        asyncio.get_running_loop().call_soon(ran.append, 1)
        for i in range(200):
            await log.nc.publish("nowhere.poolwise.test", b"x" * 1000, reply=f"r.{i}", headers={"Nats-Msg-Id": str(i)})
        assert ran == []  # nothing else ran while publishing
        assert log._publisher._one_write([("s", b"x" * 1000, None)] * 200)
        assert not log._publisher._one_write([("s", b"x" * 20_000, None)] * 200)  # 4 MB: not in one write
    finally:
        await log.close()


@pytest.mark.nats
async def test_an_append_waits_for_batches_left_open_by_cuts(server: EmbeddedNats,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches cut short stay open on the server until it drops them (after 10 s), and a stream
    takes at most 50 open at a time: an append meanwhile waits and lands as an atomic batch, not
    message by message (where a cut could reorder it)."""
    log = await JetStreamLog.connect(server.url, timeout=2.0)
    raw = await nats.connect(server.url)
    try:
        await log.ensure_stream(memory=True)
        for k in range(50):  # fifty producers that died in the middle of a batch
            await raw.publish(subj.gang("t1"), b"{}", headers={"Nats-Batch-Id": f"open{k}", "Nats-Batch-Sequence": "1",
                                                               "Nats-Msg-Id": f"open{k}"})
        await raw.flush()
        each: list[int] = []
        plain = log._publisher._publish_each

        async def counted(items: Sequence[Any]) -> list[dict[str, Any]]:
            each.append(len(items))
            return await plain(items)

        monkeypatch.setattr(log._publisher, "_publish_each", counted)
        with anyio.fail_after(SAFETY):
            landed = await log.append(cancels(0, 120))
        assert [a.seq for a in landed] == list(range(1, 121))  # the open batches never landed
        assert each == []
    finally:
        await raw.close()
        await log.close()
