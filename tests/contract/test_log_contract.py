"""The log port's contract, run against both adapters: `MemoryLog` and `JetStreamLog` on a real
nats-server (a fresh stream per test). Whatever one adapter does, the other must do too."""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import anyio
import pytest

from events import (
    DecodeError,
    Envelope,
    GangCancelled,
    HostRegistered,
    PoolConfig,
    PoolConfigChanged,
    TaskStateChanged,
    decode,
    encode,
)
from events import subjects as subj
from services.common.jetstream import JetStreamLog
from services.common.log import AppendRefused, EventLog, StaleWrite, Stored
from services.common.natsserver import EmbeddedNats

pytestmark = pytest.mark.anyio

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SAFETY = 120  # seconds: a hung test fails instead of hanging the run (not a timing assertion)


def task(i: int, tree: str = "t1", id_prefix: str = "task") -> Envelope:
    event = TaskStateChanged(tree=tree, gang=f"g{i % 7}", task=f"k{i}", state="running")
    return Envelope(id=f"{id_prefix}-{tree}-{i}", time=T0, source="test", event=event)


def cancel(i: int, tree: str = "t1") -> Envelope:
    event = GangCancelled(tree=tree, gang=f"g{i}")
    return Envelope(id=f"cancel-{tree}-{i}", time=T0, source="cli", event=event)


def config(i: int, tree: str = "t1") -> Envelope:
    event = PoolConfigChanged(tree=tree, path=f"/p{i}", config=PoolConfig(share=1.0))
    return Envelope(id=f"config-{tree}-{i}", time=T0, source="tree", event=event)


def host(i: int) -> Envelope:
    event = HostRegistered(host=f"h{i}", resources={"cpu": 8.0})
    return Envelope(id=f"host-{i}", time=T0, source="cli", event=event)


async def collect(
    log: EventLog, durable: str, subjects: Sequence[str], after_seq: int, want: int, max_batch: int = 1000
) -> list[list[Stored]]:
    """Run `consume` until at least `want` events were handed out; the batches as handed out."""
    batches: list[list[Stored]] = []
    count = 0
    with anyio.fail_after(SAFETY):
        async with anyio.create_task_group() as tg:

            async def handler(batch: Sequence[Stored]) -> None:
                nonlocal count
                batches.append(list(batch))
                count += len(batch)
                if count >= want:
                    tg.cancel_scope.cancel()

            tg.start_soon(partial(log.consume, durable, subjects, after_seq, handler, max_batch=max_batch))
    return batches


def seqs(items: Sequence[Stored]) -> list[int]:
    return [s.seq for s in items]


def flat(batches: Sequence[Sequence[Stored]]) -> list[Stored]:
    return [s for batch in batches for s in batch]


# -- append ---------------------------------------------------------------------------------------


async def test_append_returns_increasing_seqs_from_one(log: EventLog) -> None:
    assert await log.last_seq() == 0
    first = await log.append([task(1), cancel(1), host(1)])
    assert [a.seq for a in first] == [1, 2, 3]
    assert not any(a.duplicate for a in first)
    second = await log.append([task(2)])
    assert second[0].seq == 4
    assert await log.append([]) == []
    assert await log.last_seq() == 4


async def test_append_puts_each_event_on_its_subject(log: EventLog) -> None:
    await log.append([task(1), cancel(1), host(1), config(1)])
    stored = await log.read()
    assert [s.subject for s in stored] == [subj.task("t1"), subj.gang("t1"), subj.HOSTS, subj.config("t1")]
    assert [s.msg_id for s in stored] == ["task-t1-1", "cancel-t1-1", "host-1", "config-t1-1"]
    assert decode(stored[0].data) == task(1)
    assert stored[1].data == encode(cancel(1))


async def test_duplicate_id_is_stored_once_and_reported(log: EventLog) -> None:
    [original] = await log.append([task(1)])
    again = await log.append([task(1), task(2), task(2)])
    assert again[0].seq == original.seq and again[0].duplicate
    assert not again[1].duplicate
    assert again[2].seq == again[1].seq and again[2].duplicate
    assert seqs(await log.read()) == [1, 2]


async def test_append_raw_stores_bytes_as_given(log: EventLog) -> None:
    a = await log.append_raw(subj.gang("t1"), b"\xff not json", msg_id="raw-1")
    b = await log.append_raw(subj.gang("t1"), b"\xff not json", msg_id="raw-1")
    c = await log.append_raw(subj.gang("t1"), b"no id")
    d = await log.append_raw(subj.gang("t1"), b"no id")
    assert (a.seq, b.seq, b.duplicate) == (1, 1, True)
    assert (c.seq, d.seq, d.duplicate) == (2, 3, False)
    stored = await log.read()
    assert stored[0].data == b"\xff not json" and stored[0].msg_id == "raw-1"
    assert stored[1].msg_id is None


async def test_subject_outside_the_stream_is_refused(log: EventLog) -> None:
    with pytest.raises(AppendRefused) as refused:
        await log.append_raw("elsewhere.entirely", b"{}", msg_id="x")
    assert refused.value.subject == "elsewhere.entirely"
    assert await log.last_seq() == 0


# -- optimistic concurrency -------------------------------------------------------------------------


async def test_append_expecting_checks_the_subjects_last_sequence(log: EventLog) -> None:
    subject = subj.config("t1")
    await log.append([task(1)])  # another subject: does not count
    first = await log.append_expecting(config(1), subject, 0)
    assert first.seq == 2
    with pytest.raises(StaleWrite) as stale:
        await log.append_expecting(config(2), subject, 0)
    assert stale.value.subject == subject and stale.value.expected == 0
    assert await log.last_seq() == 2  # nothing stored
    await log.append([task(2)])
    second = await log.append_expecting(config(2), subject, first.seq)
    assert second.seq == 4
    assert await log.last_seq(subject) == 4
    with pytest.raises(StaleWrite):
        await log.append_expecting(config(3), subject, first.seq)


async def test_append_expecting_on_a_wildcard_subject(log: EventLog) -> None:
    await log.append([config(1, tree="a")])
    assert await log.last_seq(f"{subj.PREFIX}.config.*") == 1
    with pytest.raises(StaleWrite):
        await log.append_expecting(config(1, tree="b"), f"{subj.PREFIX}.config.*", 0)
    appended = await log.append_expecting(config(1, tree="b"), f"{subj.PREFIX}.config.*", 1)
    assert appended.seq == 2


async def test_last_seq_of_a_subject(log: EventLog) -> None:
    await log.append([task(1), cancel(1), task(2), host(1)])
    assert await log.last_seq() == 4
    assert await log.last_seq(subj.task("t1")) == 3
    assert await log.last_seq(subj.gang("t1")) == 2
    assert await log.last_seq(subj.gang("none")) == 0
    assert await log.last_seq(f"{subj.PREFIX}.>") == 4


# -- read -----------------------------------------------------------------------------------------


async def test_read_ranges_and_filters(log: EventLog) -> None:
    mixed = [e for i in range(10) for e in (task(i), cancel(i, tree="t2"), host(i))]
    await log.append(mixed)  # seqs 1..30: task t1 at 1,4,7..; gang t2 at 2,5,8..; hosts at 3,6,9..
    assert seqs(await log.read()) == list(range(1, 31))
    assert seqs(await log.read(25)) == list(range(25, 31))
    assert seqs(await log.read(5, end_seq=9)) == [5, 6, 7, 8, 9]
    assert seqs(await log.read(subjects=[subj.task("t1")])) == list(range(1, 31, 3))
    assert seqs(await log.read(subjects=[f"{subj.PREFIX}.gang.*"], end_seq=11)) == [2, 5, 8, 11]
    two_subjects = [subj.HOSTS, subj.task("t1")]
    assert seqs(await log.read(10, subjects=two_subjects, end_seq=16)) == [10, 12, 13, 15, 16]
    assert seqs(await log.read(subjects=[f"{subj.PREFIX}.>"], end_seq=3)) == [1, 2, 3]
    assert await log.read(31) == []
    assert await log.read(9, end_seq=8) == []
    assert await log.read(subjects=[subj.clock("t1")]) == []
    assert seqs(await log.read(28, subjects=[subj.task("t1")], end_seq=29)) == [28]
    assert seqs(await log.read(29, subjects=[subj.task("t1")])) == []
    assert seqs(await log.read(0, end_seq=2)) == [1, 2]


async def test_read_of_many_events(log: EventLog) -> None:
    await log.append([task(i) for i in range(3000)])
    stored = await log.read()
    assert seqs(stored) == list(range(1, 3001))
    assert decode(stored[-1].data) == task(2999)


# -- consume --------------------------------------------------------------------------------------


async def test_consume_delivers_in_order_in_batches(log: EventLog) -> None:
    await log.append([task(i) for i in range(25)])
    batches = await collect(log, "c1", [], 0, 25, max_batch=10)
    assert all(1 <= len(b) <= 10 for b in batches)
    assert seqs(flat(batches)) == list(range(1, 26))


async def test_consume_filters_subjects(log: EventLog) -> None:
    await log.append([e for i in range(10) for e in (task(i), cancel(i), host(i))])
    batches = await collect(log, "c1", [f"{subj.PREFIX}.gang.*", subj.HOSTS], 0, 20)
    got = flat(batches)
    assert seqs(got) == [s for s in range(1, 31) if s % 3 != 1]
    assert {s.subject for s in got} == {subj.gang("t1"), subj.HOSTS}


async def batches_around(log: EventLog, then: Callable[[], Awaitable[None]], total: int,
                         linger: float = 0.0) -> list[list[Stored]]:
    """The batches a consumer from the start gets of the log's events: once the first batch has
    come, `then()` runs (appending more); it stops after `total` events."""
    batches: list[list[Stored]] = []
    with anyio.fail_after(SAFETY):
        async with anyio.create_task_group() as tg:
            arrived = anyio.Event()

            async def handler(batch: Sequence[Stored]) -> None:
                batches.append(list(batch))
                arrived.set()
                if sum(map(len, batches)) >= total:
                    tg.cancel_scope.cancel()

            tg.start_soon(partial(log.consume, "c1", [], 0, handler, linger=linger))
            await arrived.wait()
            await then()
    return batches


async def test_consume_waits_for_new_events(log: EventLog) -> None:
    await log.append([task(0)])

    async def five_more() -> None:
        await log.append([task(i) for i in range(1, 6)])

    batches = await batches_around(log, five_more, 6)
    assert seqs(flat(batches)) == [1, 2, 3, 4, 5, 6]


async def test_a_lingering_consumer_takes_what_came_during_its_pause_as_one_batch(log: EventLog) -> None:
    # one event, then five appended one by one (five messages, 10 ms apart) while the consumer
    # pauses after its short first batch: they come as one batch (without the pause, as they come)
    await log.append([task(0)])

    async def one_by_one() -> None:
        for i in range(1, 6):
            await log.append([task(i)])
            await anyio.sleep(0.01)

    batches = await batches_around(log, one_by_one, 6, linger=2.0)
    assert [seqs(b) for b in batches] == [[1], [2, 3, 4, 5, 6]]


async def test_consume_resumes_after_the_checkpoint(log: EventLog) -> None:
    await log.append([task(i) for i in range(30)])
    first = flat(await collect(log, "c1", [], 0, 10, max_batch=10))
    committed = first[-1].seq
    await log.append([task(i) for i in range(30, 40)])
    rest = flat(await collect(log, "c1", [], committed, 40 - committed, max_batch=7))
    assert seqs(rest) == list(range(committed + 1, 41))
    assert set(seqs(first)).isdisjoint(seqs(rest))


async def test_consume_moves_the_durable_to_the_callers_checkpoint(log: EventLog) -> None:
    await log.append([task(i) for i in range(20)])
    flat(await collect(log, "c1", [], 0, 20))  # the durable consumer acknowledged everything
    back = flat(await collect(log, "c1", [], 5, 15))  # the caller's checkpoint says 5: it is the truth
    assert seqs(back) == list(range(6, 21))
    await log.append([task(i) for i in range(20, 30)])
    ahead = flat(await collect(log, "c1", [], 25, 5))  # and ahead of the consumer: skip to it
    assert seqs(ahead) == list(range(26, 31))


class Boom(Exception):
    pass


async def test_a_raising_handler_gets_the_batch_again(log: EventLog) -> None:
    await log.append([task(i) for i in range(12)])
    seen: list[list[int]] = []

    async def failing(batch: Sequence[Stored]) -> None:
        seen.append(seqs(batch))
        raise Boom

    with anyio.fail_after(SAFETY), pytest.raises(Boom):
        await log.consume("c1", [], 0, failing, max_batch=5)
    assert seen == [[1, 2, 3, 4, 5]]
    again = flat(await collect(log, "c1", [], 0, 12, max_batch=5))
    assert seqs(again) == list(range(1, 13))


async def test_a_malformed_message_is_delivered_as_bytes(log: EventLog) -> None:
    await log.append([task(1)])
    await log.append_raw(subj.gang("t1"), b"{not json", msg_id="bad-1")
    await log.append([task(2)])
    got = flat(await collect(log, "c1", [], 0, 3))
    assert [s.data for s in got][1] == b"{not json"
    with pytest.raises(DecodeError):
        decode(got[1].data)
    assert decode(got[2].data) == task(2)


async def test_twenty_thousand_events_through_append_and_consume(log: EventLog) -> None:
    n = 20_000
    for start in range(0, n, 5000):
        appended = await log.append([task(i) for i in range(start, start + 5000)])
        assert [a.seq for a in appended] == list(range(start + 1, start + 5001))
    batches = await collect(log, "bulk", [f"{subj.PREFIX}.task.*"], 0, n)
    got = flat(batches)
    assert seqs(got) == list(range(1, n + 1))
    assert all(len(b) <= 1000 for b in batches)
    assert decode(got[12345].data) == task(12345)


# -- JetStream only: the adapter rides out a server restart ----------------------------------------


@pytest.mark.nats
async def test_jetstream_log_survives_a_server_restart(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = EmbeddedNats(tmp_path, port=port).start()
    try:
        log = await JetStreamLog.connect(server.url, timeout=3.0)
        await log.ensure_stream()
        n, chunk = 6000, 500
        got: list[Stored] = []
        with anyio.fail_after(SAFETY):
            async with anyio.create_task_group() as tg:

                async def handler(batch: Sequence[Stored]) -> None:
                    got.extend(batch)
                    if len(got) >= n:
                        tg.cancel_scope.cancel()

                tg.start_soon(partial(log.consume, "c1", [], 0, handler, max_batch=100))
                for start in range(0, n, chunk):
                    if start == n // 2:
                        await anyio.to_thread.run_sync(server.stop)
                        await anyio.to_thread.run_sync(server.start)
                    while True:
                        try:
                            await log.append([task(i) for i in range(start, start + chunk)])
                            break
                        except Exception:  # e.g. nats-py's buffer is full while it reconnects: retry
                            await anyio.sleep(0.2)
        assert seqs(got) == list(range(1, n + 1))
        assert {decode(s.data).id for s in got} == {task(i).id for i in range(n)}
        assert await log.last_seq() == n
        await log.close()
    finally:
        server.stop()
