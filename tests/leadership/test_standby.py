"""Several instances of one service on one stream, in one process (each on its own connection,
as separate processes would be): one leads, the others stand by, a standby takes over when the
leader stops or dies, and decisions go on without loss or repetition.

Instances are "killed" two ways: cancelled (a clean stop: the lease is released, the standby
takes over at once) and crashed (the connection closed first: no release, no renewal; the lease
expires after the test bucket's TTL)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections import Counter
from collections.abc import Sequence
from functools import partial
from typing import Any

import anyio
import nats
import pytest
from anyio.abc import TaskStatus
from nats.js.kv import KeyValue

from events import ClockTicked, CycleCompleted, DecodeError, Envelope, GangAdmitted, decode_all, subjects
from events.commands import Reply, TreeList
from events.config import GangTimeoutOptions
from services.admission.service import serve_admission
from services.common.jetstream import JetStreamLog
from services.common.leadership import StandingBy, run_as_leader
from services.common.lease import Lease
from services.common.lease_bucket import lease_key
from services.common.lease_renewer import connector
from services.common.log import Appended
from services.common.memlog import MemoryLog
from services.launcher import SERVICES, start_services
from services.tree.service import TreeService, serve_tree
from tests.admission.builders import gang, host, pool, tree
from tests.leadership.helpers import TEST_TTL, WAIT, eventually, lease_bucket, now_envelopes, until

pytestmark = pytest.mark.anyio

NO_TIMEOUTS = GangTimeoutOptions(default=1000, limit=1000, jitter=0)  # nothing times out during a test


class RecordingLog:
    """A term's log, noting the ids of what this instance appended."""

    def __init__(self, inner: Any, appended: set[str]) -> None:
        self.inner = inner
        self.appended = appended

    async def append(self, envelopes: Sequence[Envelope]) -> list[Appended]:
        self.appended.update(e.id for e in envelopes)
        result: list[Appended] = await self.inner.append(envelopes)
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class Instance:
    """One instance of a service under its lease, on a connection of its own."""

    def __init__(self, label: str, url: str, stream: str, key: str, service: Any, *,
                 renew_in_thread: bool = True) -> None:
        self.label = label
        self.connect = connector(url) if renew_in_thread else None
        self.url = url
        self.stream = stream
        self.key = key
        self.service = service
        self.terms = 0
        self.serving = False
        self.roles: list[str] = []
        self.appended: set[str] = set()
        self.scope = anyio.CancelScope()
        self.log: JetStreamLog | None = None
        self.error: BaseException | None = None

    async def run(self, *, task_status: TaskStatus[Any]) -> None:
        self.log = await JetStreamLog.connect(self.url, stream=self.stream)
        try:
            kv = await lease_bucket(self.log.nc)
            with self.scope:
                try:
                    await run_as_leader(self.key, self.serve, log=self.log, kv=kv, connect=self.connect,
                                        holder_id=self.label,
                                        ready_on_standby=True, on_change=self.changed, task_status=task_status)
                except Exception as exc:  # a crashed instance dies of its closed connection
                    self.error = exc
        finally:
            with anyio.CancelScope(shield=True):
                await self.log.close()

    def changed(self, name: str, state: str, holder: str | None) -> None:
        self.roles.append(state)

    async def serve(self, log: Any, *, task_status: TaskStatus[Any]) -> None:
        self.terms += 1
        self.serving = True
        try:
            await self.service(RecordingLog(log, self.appended), None, task_status=task_status)
        finally:
            self.serving = False

    def stop(self) -> None:
        self.scope.cancel()

    async def crash(self) -> None:
        """Die without a word: the connection goes, nothing is released."""
        assert self.log is not None
        await self.log.nc.close()


async def contents(log: JetStreamLog) -> list[tuple[int, Envelope]]:
    out = []
    for stored in await log.read():
        try:
            out.extend((stored.seq, e) for e in decode_all(stored.data))
        except DecodeError:
            continue
    return out


def admitted_gangs(stored: list[tuple[int, Envelope]]) -> set[str]:
    return {e.event.gang for _, e in stored if isinstance(e.event, GangAdmitted)}


async def enqueue(log: JetStreamLog, names: list[str]) -> None:
    await log.append(now_envelopes(*[gang(name, "/a", cpu=1) for name in names]))


async def all_admitted(log: JetStreamLog, names: list[str], what: str) -> None:
    async def check() -> bool:
        return set(names) <= admitted_gangs(await contents(log))

    await eventually(check, what)


async def test_one_admission_instance_decides_and_a_standby_takes_over(jetstream_log: JetStreamLog,
                                                                       nats_url: str) -> None:
    log = jetstream_log
    key = lease_key(log.stream, "admission")
    a, b, c = (Instance(label, nats_url, log.stream, key, serve_admission) for label in "ABC")
    first, gap, after, dead, last = ([f"{phase}-{i}" for i in range(8)]
                                     for phase in ("first", "gap", "after", "dead", "last"))
    with anyio.fail_after(4 * WAIT):
        async with anyio.create_task_group() as tg:
            assert await tg.start(a.run) == "admission"  # A leads
            standby = await tg.start(b.run)
            assert standby == StandingBy(key, "A")
            await log.append(now_envelopes(tree(gang_timeout=NO_TIMEOUTS), host(cpu=1000), pool("/a")))
            await enqueue(log, first)
            await all_admitted(log, first, "A to admit the first gangs")
            assert (a.terms, b.terms, b.roles) == (1, 0, ["standby"])  # B neither folded nor decided

            a.stop()  # a clean stop: A releases its lease
            await enqueue(log, gap)  # while nobody leads, or B is starting
            await until(lambda: b.roles[-1] == "leading", "B to take over")
            await enqueue(log, after)  # (see test_inputs_of_a_handover_are_decided_without_more_input)
            await all_admitted(log, gap + after, "B to admit the gangs enqueued during and after the handover")
            assert await tg.start(c.run) == StandingBy(key, "B")

            await b.crash()  # B dies: no release; its lease expires
            await until(lambda: c.roles[-1] == "leading", "C to take over from the dead B")
            await enqueue(log, dead)
            await all_admitted(log, dead, "C to admit the gangs enqueued after B died")
            await enqueue(log, last)
            await all_admitted(log, last, "C to go on deciding")
            assert (a.terms, b.terms, c.terms) == (1, 1, 1)
            assert not a.serving and not b.serving
            tg.cancel_scope.cancel()

    stored = await contents(log)
    ids = Counter(e.id for _, e in stored)
    assert [i for i, n in ids.items() if n > 1] == []
    admissions = Counter((e.event.gang, e.event.attempt) for _, e in stored if isinstance(e.event, GangAdmitted))
    assert [k for k, n in admissions.items() if n > 1] == []  # nothing decided twice
    assert admitted_gangs(stored) == set(first + gap + after + dead + last)  # nothing lost
    ticks = {seq for seq, e in stored if isinstance(e.event, ClockTicked)}
    cycles = Counter(e.event.trigger_seq for _, e in stored
                     if isinstance(e.event, CycleCompleted) and e.event.service == "admission")
    assert set(cycles) <= ticks and all(n == 1 for n in cycles.values())  # one cycle per tick at most
    # every decision and tick was published by one instance only: the one leading at the time
    assert not (a.appended & b.appended) and not (b.appended & c.appended) and not (a.appended & c.appended)
    tick_ids = {e.id for _, e in stored if isinstance(e.event, ClockTicked)}
    assert tick_ids <= a.appended | b.appended | c.appended
    assert all(tick_ids & i.appended for i in (a, b, c))  # each ticked while it led


async def test_inputs_of_a_handover_are_decided_without_more_input(jetstream_log: JetStreamLog,
                                                                     nats_url: str) -> None:
    log = jetstream_log
    key = lease_key(log.stream, "admission")
    a, b = (Instance(label, nats_url, log.stream, key, serve_admission) for label in "AB")
    gap = [f"gap-{i}" for i in range(4)]
    with anyio.fail_after(2 * WAIT):
        async with anyio.create_task_group() as tg:
            await tg.start(a.run)
            await tg.start(b.run)
            await log.append(now_envelopes(tree(gang_timeout=NO_TIMEOUTS), host(cpu=1000), pool("/a")))
            a.stop()
            await enqueue(log, gap)
            await until(lambda: b.roles[-1] == "leading", "B to take over")
            try:
                with anyio.fail_after(5.0):
                    await all_admitted(log, gap, "B to admit the gangs of the handover")
            finally:
                tg.cancel_scope.cancel()


async def test_only_the_leading_tree_instance_answers_requests(jetstream_log: JetStreamLog, nats_url: str) -> None:
    log = jetstream_log
    key = lease_key(log.stream, "tree")
    a, b = (Instance(label, nats_url, log.stream, key, serve_tree, renew_in_thread=False) for label in "AB")
    nc = await nats.connect(nats_url)
    kv = await lease_bucket(nc)

    async def ask(timeout: float = 5.0) -> bool:
        """True if someone answered, False if nobody listens."""
        try:
            msg = await nc.request(subjects.command("tree", "tree_list"), TreeList().model_dump_json().encode(),
                                   timeout=timeout)
        except nats.errors.NoRespondersError:
            return False
        assert Reply.model_validate_json(msg.data).ok
        return True

    try:
        with anyio.fail_after(4 * WAIT):
            async with anyio.create_task_group() as tg:
                assert isinstance(await tg.start(a.run), TreeService)
                assert isinstance(await tg.start(b.run), StandingBy)
                assert await ask()
                assert (a.terms, b.terms) == (1, 0)  # B never subscribed

                await take_over(kv, key)  # A's next renewal fails
                await until(lambda: "lost" in a.roles and not a.serving, "A to stop on its failed renewal")
                assert not await ask()  # A's subscription ended with its term; B still stands by

                await until(lambda: a.serving or b.serving, "the intruder's record to expire and one to lead")
                assert await eventually(ask, "the new leader to answer")
                assert a.serving != b.serving
                tg.cancel_scope.cancel()
    finally:
        await nc.close()


async def take_over(kv: KeyValue, key: str) -> None:
    await kv.put(key, b'{"holder": "intruder"}')


async def test_start_services_leads_or_stands_by_on_jetstream_and_simply_runs_on_memory(
        jetstream_log: JetStreamLog, nats_url: str) -> None:
    with anyio.fail_after(2 * WAIT):
        async with anyio.create_task_group() as tg:
            first = await start_services(tg, jetstream_log, list(SERVICES), None)
            assert isinstance(first[0], TreeService) and first[1:] == ["admission", "preemption"]
            other = await JetStreamLog.connect(nats_url, stream=jetstream_log.stream)
            try:
                second = await start_services(tg, other, list(SERVICES), None, ready_on_standby=True)
                assert [s.name for s in second] == [lease_key(jetstream_log.stream, n) for n in SERVICES]
                assert all(isinstance(s, StandingBy) for s in second)
            finally:
                tg.cancel_scope.cancel()
        await other.close()
        async with anyio.create_task_group() as tg:  # no key-value store: nothing to elect
            started = await start_services(tg, MemoryLog(), list(SERVICES), None)
            assert isinstance(started[0], TreeService) and started[1:] == ["admission", "preemption"]
            tg.cancel_scope.cancel()


async def test_a_busy_event_loop_does_not_cost_the_lease(jetstream_log: JetStreamLog, nats_url: str) -> None:
    """A leader whose event loop is blocked for longer than the TTL (a long fold or cycle) keeps
    its lease, renewed from a thread of its own: a standby polling meanwhile never gets it."""
    key = lease_key(jetstream_log.stream, "busy")
    block, stalled = anyio.Event(), anyio.Event()

    async def busy(log: Any, *, task_status: TaskStatus[str]) -> None:
        task_status.started("busy")
        await block.wait()
        time.sleep(2.5 * TEST_TTL)  # the event loop does nothing else meanwhile
        stalled.set()
        await anyio.sleep_forever()

    def standby() -> bool:
        """Another process, in effect: its own thread, event loop and connection."""
        async def poll() -> bool:
            nc = await nats.connect(nats_url)
            try:
                lease = Lease(await lease_bucket(nc), key, "standby", ttl=TEST_TTL)
                deadline = time.monotonic() + 3 * TEST_TTL
                while time.monotonic() < deadline:
                    if await lease.try_acquire():
                        await lease.release()
                        return True
                    await asyncio.sleep(0.05)
                return False
            finally:
                await nc.close()

        return asyncio.run(poll())

    roles: list[str] = []
    kv = await lease_bucket(jetstream_log.nc)
    with anyio.fail_after(WAIT), concurrent.futures.ThreadPoolExecutor(1) as pool:
        async with anyio.create_task_group() as tg:
            assert await tg.start(partial(run_as_leader, key, busy, log=jetstream_log, kv=kv,
                                          connect=connector(nats_url), holder_id="busy",
                                          on_change=lambda _n, state, _h: roles.append(state))) == "busy"
            standby_got_it = pool.submit(standby)
            await anyio.sleep(0.2)
            block.set()
            await stalled.wait()
            assert not await anyio.to_thread.run_sync(standby_got_it.result)
            assert roles == ["leading"]  # never lost, never restarted
            tg.cancel_scope.cancel()
