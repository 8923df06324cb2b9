"""How fast is JetStream from Python here: raw nats-py ways of publishing and consuming, and the
`JetStreamLog` adapter's append / read / consume, in events per second.

`await measure_raw(url, n, payload_size)` returns the numbers (it prints nothing); every
measurement runs on a stream of its own, deleted afterwards, so it is safe on a server that holds
the real log. Run it directly for a quick look: `python -m bench.raw_nats [n] [payload_size]`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from functools import partial
from typing import Any

import nats
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StorageType, StreamConfig

from events import Envelope, TaskStateChanged
from services.common.jetstream import JetStreamLog
from services.common.log import Stored

WINDOW = 4096  # publishes in flight


async def _timed(work: Callable[[], Awaitable[Any]], n: int) -> float:
    start = time.perf_counter()
    await work()
    return round(n / (time.perf_counter() - start))


async def _pipelined_publish(nc: NATS, subject: str, n: int, payload: bytes) -> None:
    """nc.publish with a reply inbox per message; PubAcks counted by one callback; WINDOW in flight."""
    inbox = nc.new_inbox() + "."
    acked = 0
    space = asyncio.Event()
    done = asyncio.Event()

    async def on_ack(msg: Msg) -> None:
        nonlocal acked
        if b'"error"' in msg.data or not msg.data:
            raise RuntimeError(f"publish refused: {msg.data!r}")
        acked += 1
        space.set()
        if acked == n:
            done.set()

    sub = await nc.subscribe(inbox + "*", cb=on_ack)
    for i in range(n):
        while i - acked >= WINDOW:
            space.clear()
            await space.wait()
        await nc.publish(subject, payload, reply=f"{inbox}{i}", headers={"Nats-Msg-Id": f"{subject}-{i}"})
    await done.wait()
    await sub.unsubscribe()


async def _publish_async(nc: NATS, subject: str, n: int, payload: bytes) -> None:
    js = nc.jetstream(publish_async_max_pending=WINDOW)
    futures = []
    for i in range(n):
        futures.append(await js.publish_async(subject, payload, headers={"Nats-Msg-Id": f"{subject}-{i}"}))
    await asyncio.gather(*futures)


async def _pull_callback(nc: NATS, stream: str, n: int) -> None:
    """Pull requests sent by hand, messages received by one subscription callback."""
    js = nc.jetstream()
    await js.add_consumer(stream, ConsumerConfig(name="pullcb", ack_policy=AckPolicy.NONE,
                                                 deliver_policy=DeliverPolicy.ALL))  # fmt: skip
    inbox = nc.new_inbox()
    got = 0
    done = asyncio.Event()

    async def on_msg(msg: Msg) -> None:
        nonlocal got
        if msg.reply:
            got += 1
            if got == n:
                done.set()

    sub = await nc.subscribe(inbox, cb=on_msg)
    request = json.dumps({"batch": n, "expires": 60_000_000_000}).encode()
    await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.pullcb", request, reply=inbox)
    await done.wait()
    await sub.unsubscribe()


async def _fetch(nc: NATS, stream: str, n: int) -> None:
    js = nc.jetstream()
    await js.add_consumer(stream, ConsumerConfig(name="fetch", ack_policy=AckPolicy.NONE,
                                                 deliver_policy=DeliverPolicy.ALL))  # fmt: skip
    sub = await js.pull_subscribe_bind("fetch", stream)
    got = 0
    while got < n:
        got += len(await sub.fetch(1000, timeout=10))
    await sub.unsubscribe()


async def _push_callback(nc: NATS, subject: str, n: int) -> None:
    """An ordered push consumer (flow control and heartbeats by nats-py) with a callback."""
    got = 0
    done = asyncio.Event()

    async def on_msg(msg: Msg) -> None:
        nonlocal got
        got += 1
        if got == n:
            done.set()

    sub = await nc.jetstream().subscribe(subject, cb=on_msg, ordered_consumer=True)
    await done.wait()
    await sub.unsubscribe()


async def _raw(nc: NATS, tag: str, n: int, payload_size: int) -> dict[str, float]:
    js = nc.jetstream()
    payload = b"x" * payload_size
    out: dict[str, float] = {}
    publishers = (("raw_publish_pipelined", _pipelined_publish), ("raw_publish_async", _publish_async))
    for name, publish in publishers:
        stream, subject = f"BENCH_{tag}_{name.upper()}", f"bench.{tag}.{name}"
        await js.add_stream(StreamConfig(name=stream, subjects=[subject], storage=StorageType.FILE,
                                         duplicate_window=600))  # fmt: skip
        try:
            out[name] = await _timed(partial(publish, nc, subject, n, payload), n)
            if publish is _pipelined_publish:
                out["raw_consume_pull_callback"] = await _timed(partial(_pull_callback, nc, stream, n), n)
                out["raw_consume_fetch"] = await _timed(partial(_fetch, nc, stream, n), n)
                out["raw_consume_push_callback"] = await _timed(partial(_push_callback, nc, subject, n), n)
        finally:
            await js.delete_stream(stream)
    return out


def _envelopes(n: int, payload_size: int, tag: str) -> list[Envelope]:
    time0 = datetime(2026, 1, 1, tzinfo=UTC)
    pad = "x" * max(0, payload_size - 190)  # an envelope of this shape is ~190 bytes without message
    return [
        Envelope(id=f"{tag}-{i}", time=time0, source="bench", event=TaskStateChanged(
            tree="bench", gang=f"g{i % 100}", task=f"t{i}", state="running", message=pad))
        for i in range(n)
    ]  # fmt: skip


async def _adapter(nc: NATS, tag: str, n: int, payload_size: int) -> dict[str, float]:
    log = JetStreamLog(nc, stream=f"BENCH_{tag}_LOG", prefix=f"bench{tag}")
    await log.ensure_stream()
    envelopes = _envelopes(n, payload_size, tag)
    out: dict[str, float] = {}
    try:
        out["adapter_append"] = await _timed(lambda: log.append(envelopes), n)
        out["adapter_read"] = await _timed(log.read, n)
        seen = 0
        done = asyncio.Event()

        async def handler(batch: Sequence[Stored]) -> None:
            nonlocal seen
            seen += len(batch)
            if seen >= n:
                done.set()

        async def consume_all() -> None:
            task = asyncio.create_task(log.consume("bench", [], 0, handler))
            try:
                await done.wait()
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

        out["adapter_consume"] = await _timed(consume_all, n)
    finally:
        await log.delete_stream()
    return out


async def measure_raw(url: str, n: int = 50_000, payload_size: int = 256) -> dict[str, float]:
    """Events per second for raw nats-py publishing / consuming and for the adapter, plus `n` and
    `payload_size`. Each number is one run: on a shared 2-core machine, repeat and take the best."""
    nc = await nats.connect(url, name="poolwise-bench")
    tag = nc.new_inbox()[-8:]
    try:
        results: dict[str, float] = {"n": n, "payload_size": payload_size}
        results.update(await _raw(nc, tag, n, payload_size))
        results.update(await _adapter(nc, tag, n, payload_size))
        return results
    finally:
        await nc.drain()


async def measure_raw_only(url: str, n: int, payload_size: int) -> dict[str, float]:
    """Only the raw nats-py numbers of `measure_raw` (no adapter), e.g. for large pack-sized payloads."""
    nc = await nats.connect(url, name="poolwise-bench")
    try:
        return await _raw(nc, nc.new_inbox()[-8:], n, payload_size)
    finally:
        await nc.drain()


if __name__ == "__main__":
    import sys

    from services.common.natsserver import EmbeddedNats, resolve_nats_url

    async def _main() -> None:
        count = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
        size = int(sys.argv[2]) if len(sys.argv) > 2 else 256
        url = resolve_nats_url(None)
        if url:
            print(json.dumps(await measure_raw(url, count, size), indent=2))
            return
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            async with EmbeddedNats(tmp) as server:
                print(json.dumps(await measure_raw(server.url, count, size), indent=2))

    asyncio.run(_main())
