"""The SDK never waits forever: every call has a deadline (`Submitter(timeout=...)`) and raises
`PublishError` when NATS is gone, while the connection keeps reconnecting in the background, to
any server of its URL list, so a call made once NATS is back succeeds. On real nats-servers,
stopped and started again on the same port."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import anyio
import pytest

from services.common.connection import connect_nats
from services.common.jetstream import JetStreamLog
from services.common.natsserver import EmbeddedNats
from services.sdk import PublishError, Submitter, SyncSubmitter

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]

DEADLINE = 3.0  # the clients' timeout here
BOUND = 60.0  # what the test allows any step (a hang fails it, it does not hang the suite)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def start(data_dir: Path, port: int) -> EmbeddedNats:
    server = EmbeddedNats(data_dir, port=port).start()
    log = await JetStreamLog.connect(server.url)
    try:
        await log.ensure_stream()  # file-stored: still there when the server starts again on the store
    finally:
        await log.close()
    return server


async def test_a_call_while_nats_is_gone_raises_and_a_call_once_it_is_back_succeeds(tmp_path: Path) -> None:
    port = free_port()
    server = await start(tmp_path, port)
    try:
        client = Submitter(server.url, timeout=DEADLINE)
        async with client:
            first = await client.enqueue(gang="g1", pool="/ATG", count=2, resources={"cpu": 1})
            server.stop()
            started = time.monotonic()
            with anyio.fail_after(BOUND), pytest.raises(PublishError) as caught:
                await client.enqueue(gang="g2", pool="/ATG", count=2, resources={"cpu": 1})
            assert time.monotonic() - started < BOUND
            assert str(caught.value).startswith(f"NATS is unreachable at nats://127.0.0.1:{port}: not stored "
                                                f"within 3 s"), caught.value
            with anyio.fail_after(BOUND), pytest.raises(PublishError, match="unreachable"):
                await client.cancel("g1")  # every call, not only the first after the loss
            server = await start(tmp_path, port)  # `poolwise up` again, on the same port
            with anyio.fail_after(BOUND):
                while True:  # the client reconnects on its own, once a second: a loaded machine may take a while
                    try:
                        again = await client.enqueue(gang="g2", pool="/ATG", count=2, resources={"cpu": 1})
                        break
                    except PublishError:
                        continue
            assert again.seq == first.seq + 1  # the same client, its connection back
    finally:
        server.stop()


async def test_the_sync_client_has_the_same_deadline(tmp_path: Path) -> None:
    port = free_port()
    server = await start(tmp_path, port)

    def submit() -> tuple[int, str, int]:
        with SyncSubmitter(server.url, timeout=DEADLINE) as client:
            first = client.enqueue(gang="s1", pool="/ATG", count=1, resources={"cpu": 1})
            server.stop()
            with pytest.raises(PublishError) as caught:
                client.enqueue(gang="s2", pool="/ATG", count=1, resources={"cpu": 1})
            server.start()
            deadline = time.monotonic() + BOUND
            while True:  # (as above: the reconnect may take more than one call's deadline on a loaded machine)
                try:
                    return first.seq, str(caught.value), client.enqueue(gang="s2", pool="/ATG", count=1,
                                                                        resources={"cpu": 1}).seq
                except PublishError:
                    if time.monotonic() > deadline:
                        raise

    try:
        with anyio.fail_after(BOUND):
            first, refusal, second = await anyio.to_thread.run_sync(submit)
    finally:
        server.stop()
    assert refusal.startswith(f"NATS is unreachable at nats://127.0.0.1:{port}"), refusal
    assert second == first + 1


async def test_any_server_of_a_list_will_do(fresh_stream: str) -> None:
    unreachable = f"nats://127.0.0.1:{free_port()}"
    async with Submitter(f"{unreachable}, {fresh_stream}", timeout=DEADLINE, connect_timeout=10) as client:
        receipt = await client.enqueue(gang="l1", pool="/ATG", count=1, resources={"cpu": 1})
    assert not receipt.duplicate
    nc = await connect_nats([unreachable, fresh_stream], timeout=10)
    try:
        assert nc.is_connected
    finally:
        await nc.close()


async def test_an_unreachable_list_is_named_whole_without_passwords() -> None:
    one, two = free_port(), free_port()
    with anyio.fail_after(BOUND), pytest.raises(ConnectionError) as caught:
        await connect_nats(f"nats://127.0.0.1:{one},nats://svc:secret@127.0.0.1:{two}", timeout=1.0)
    assert str(caught.value) == (f"cannot reach NATS at nats://127.0.0.1:{one},nats://svc:***@127.0.0.1:{two} "
                                 f"within 1 s")


@pytest.mark.parametrize(("url", "message"), [
    ("", "no NATS server URL in ''"),
    ("nats://127.0.0.1:4222,,nats://127.0.0.1:4223", "an empty NATS server URL in"),
    ("nats://127.0.0.1:4222,nats://127.0.0.1:port", "NATS URL 'nats://127.0.0.1:port' is not valid"),
])
async def test_a_malformed_list_is_one_line_naming_it(url: str, message: str) -> None:
    with pytest.raises(ConnectionError, match=message):
        await connect_nats(url, timeout=1.0)


async def test_closing_right_after_nats_went_away_does_not_wait(tmp_path: Path) -> None:
    """Every call was acknowledged: nothing to drain. (A drain waited about 10 s for a server gone
    a moment ago, and, cut short by a deadline, left asyncio an unretrieved exception to print.)"""
    server = await start(tmp_path, free_port())
    client = Submitter(server.url, timeout=30.0)
    try:
        await client.enqueue(gang="q1", pool="/ATG", count=1, resources={"cpu": 1})
        server.stop()
        started = time.monotonic()
        with anyio.fail_after(BOUND):
            await client.close()
        assert time.monotonic() - started < 5.0  # at once (it took ~10 s), well within the deadline
    finally:
        server.stop()


async def test_a_lost_server_is_replaced_by_another_of_the_list(tmp_path: Path) -> None:
    """Connected to one server of a list, the client reconnects to another when that one goes."""
    first, second = await start(tmp_path / "a", free_port()), await start(tmp_path / "b", free_port())
    servers = {first.url: first, second.url: second}
    try:
        async with Submitter(f"{first.url},{second.url}", timeout=DEADLINE) as client:
            await client.enqueue(gang="r1", pool="/ATG", count=1, resources={"cpu": 1})
            assert client._owned is not None
            connected = client._owned.nc.connected_url
            assert connected is not None
            lost = f"nats://{connected.hostname}:{connected.port}"
            servers[lost].stop()
            with anyio.fail_after(BOUND):
                while True:
                    try:
                        receipt = await client.enqueue(gang="r2", pool="/ATG", count=1, resources={"cpu": 1})
                        break
                    except PublishError:
                        continue
            now = client._owned.nc.connected_url
            assert now is not None and f"nats://{now.hostname}:{now.port}" != lost
            assert receipt.seq == 1  # the other server's stream: its first event
    finally:
        first.stop()
        second.stop()
