"""The lease itself, on a real nats-server: one holder at a time, handed over on release or expiry,
kept by renewals, lost when its record is deleted or taken, and the fence in front of a term's
publishes (waits while validity is in doubt, drops once the lease is lost)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import nats
import pytest
from nats.aio.msg import Msg
from nats.js.errors import NotFoundError
from nats.js.kv import KeyValue

from services.common.lease import Lease, LeaseLost, new_holder_id
from services.common.term_connection import TermConnection
from tests.leadership.helpers import TEST_TTL, WAIT, eventually, lease_bucket, unique_key, until

pytestmark = pytest.mark.anyio


@pytest.fixture
async def kv(nats_url: str) -> AsyncIterator[KeyValue]:
    nc = await nats.connect(nats_url)
    try:
        yield await lease_bucket(nc)
    finally:
        await nc.close()


def two(kv: KeyValue) -> tuple[Lease, Lease]:
    key = unique_key("svc")
    return Lease(kv, key, "a", ttl=TEST_TTL), Lease(kv, key, "b", ttl=TEST_TTL)


async def test_one_holder_at_a_time_and_a_release_hands_it_over(kv: KeyValue) -> None:
    a, b = two(kv)
    assert await a.try_acquire()
    assert a.held and a.valid
    assert not await b.try_acquire()
    assert b.leader == "a" and not b.held
    assert await a.renew() is True
    assert not await b.try_acquire()
    await a.release()
    assert not a.held
    assert await b.try_acquire()  # a deleted record (a tombstone) is taken at once
    assert not await a.try_acquire()
    assert a.leader == "b"


async def test_an_abandoned_lease_expires_and_its_old_holder_cannot_renew_it(kv: KeyValue) -> None:
    a, b = two(kv)
    assert await a.try_acquire()  # and then a dies: no renewal, no release
    with anyio.fail_after(WAIT):
        await b.acquire()
    assert b.held
    assert await a.renew() is False


async def test_a_lease_that_expired_with_nobody_taking_it_is_taken_again(kv: KeyValue) -> None:
    a, b = two(kv)
    assert await a.try_acquire()  # and then a renewal comes too late: the record expires

    async def expired() -> bool:
        try:
            await kv.get(a.name)
        except NotFoundError:
            return True
        return False

    await eventually(expired, "the record to expire")
    assert await a.renew() is True  # nobody took it meanwhile: ours again, the service goes on
    assert a.valid
    assert not await b.try_acquire()


async def test_renewals_keep_it_past_the_ttl(kv: KeyValue) -> None:
    a, b = two(kv)
    assert await a.try_acquire()
    lost = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(a.keep, lost.set)
        deadline = anyio.current_time() + 1.5 * TEST_TTL
        while anyio.current_time() < deadline:
            assert not await b.try_acquire()
            assert b.leader == "a"
            await anyio.sleep(TEST_TTL / 4)
        assert not lost.is_set() and a.held
        tg.cancel_scope.cancel()


async def test_an_owned_record_at_a_later_revision_is_a_renewal_that_landed(kv: KeyValue) -> None:
    a, _ = two(kv)
    assert await a.try_acquire()
    assert a.revision is not None
    # a renewal reached the server but its answer did not: the record is ours, one revision on
    await kv.update(a.name, a._record, last=a.revision)
    assert await a.renew() is True  # refused at the old revision, but the record is ours: renewed from there
    assert await a.renew() is True


@pytest.mark.parametrize("how", ["deleted", "taken"])
async def test_a_holder_whose_record_is_deleted_or_taken_loses_it(kv: KeyValue, how: str) -> None:
    a, _ = two(kv)
    assert await a.try_acquire()
    lost = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(a.keep, lost.set)
        if how == "deleted":
            await kv.delete(a.name)
        else:
            await kv.put(a.name, b'{"holder": "intruder"}')
        with anyio.fail_after(WAIT):
            await lost.wait()
    assert not a.held and not a.valid
    with pytest.raises(LeaseLost):
        await a.wait_valid()


async def test_the_fence_waits_while_in_doubt_and_drops_once_lost(kv: KeyValue, nats_url: str) -> None:
    a, _ = two(kv)
    assert await a.try_acquire()
    nc = await nats.connect(nats_url)
    try:
        received: list[bytes] = []

        async def on_msg(msg: Msg) -> None:
            received.append(msg.data)

        await nc.subscribe("leadership.test.fence", cb=on_msg)
        await nc.flush()
        term = TermConnection(nc, a)
        await term.publish("leadership.test.fence", b"valid")
        await until(lambda: received == [b"valid"], "the first publish")

        a.valid_until = 0.0  # as after a stall past the deadline: nobody can be sure any more
        done = anyio.Event()

        async def publish_in_doubt() -> None:
            await term.publish("leadership.test.fence", b"after renewal")
            done.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(publish_in_doubt)
            await anyio.sleep(0.2)
            assert not done.is_set() and received == [b"valid"]  # held back
            assert await a.renew() is True  # proven ours all along: it goes out
            with anyio.fail_after(WAIT):
                await done.wait()
        await until(lambda: len(received) == 2, "the held-back publish")
        assert received[1] == b"after renewal"

        await kv.delete(a.name)
        assert await a.renew() is False
        a.lose()
        await term.publish("leadership.test.fence", b"after loss")  # dropped
        with pytest.raises(LeaseLost):
            await term.request("leadership.test.fence", b"?", timeout=1.0)
        await nc.flush()
        await anyio.sleep(0.2)
        assert received == [b"valid", b"after renewal"]
    finally:
        await nc.close()


async def test_a_terms_subscriptions_end_with_it(kv: KeyValue, nats_url: str) -> None:
    a = Lease(kv, unique_key("svc"), new_holder_id(), ttl=TEST_TTL)
    assert await a.try_acquire()
    nc = await nats.connect(nats_url)
    try:
        term = TermConnection(nc, a)

        async def answer(msg: Msg) -> None:
            await msg.respond(b"here")

        await term.subscribe("leadership.test.ask", cb=answer)
        assert (await nc.request("leadership.test.ask", b"", timeout=5.0)).data == b"here"
        await term.end()
        with pytest.raises(nats.errors.NoRespondersError):
            await nc.request("leadership.test.ask", b"", timeout=5.0)
    finally:
        await a.release()
        await nc.close()


async def test_stopping_the_renewals_survives_a_lost_cancellation() -> None:
    """A cancellation can be swallowed (Python 3.11's `asyncio.wait_for`, under nats-py's requests,
    loses one that arrives with the reply): stopping sends it again until the renewals' thread
    has ended. Sent once, a service that failed at start waited for that thread forever."""
    import asyncio
    import threading
    from typing import Any, cast

    from services.common.lease_renewer import LeaseRenewer

    entered = threading.Event()
    cancelled: list[int] = []

    async def connect() -> Any:
        for _ in range(2):
            try:
                entered.set()
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                cancelled.append(1)  # the first one is swallowed
        raise asyncio.CancelledError

    lease = Lease(cast(KeyValue, None), "lost-cancel", new_holder_id())
    renewer = LeaseRenewer(lease, connect, "bucket", lambda: None, lambda: True)
    renewer.start()
    with anyio.fail_after(WAIT):
        while not entered.is_set():  # set from the renewals' thread
            await anyio.sleep(0.01)
        await renewer.stop()
    assert len(cancelled) == 2
