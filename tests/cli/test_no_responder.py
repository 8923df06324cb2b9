"""A command asks again for a moment while no service answers (on a cluster, a service started a
moment ago is not known to every node yet), then says the service is not running."""

from __future__ import annotations

import time

import anyio
import nats
import pytest

from events import subjects
from events.commands import PoolList, Reply
from services.tools.cli.args import InputError
from services.tools.cli.client import NO_RESPONDER_PATIENCE, request


@pytest.mark.anyio
async def test_a_service_that_answers_a_moment_late_is_waited_for(nats_url: str) -> None:
    nc = await nats.connect(nats_url)
    asked: list[bytes] = []

    async def answer(msg: nats.aio.msg.Msg) -> None:
        asked.append(msg.data)
        await msg.respond(Reply(ok=True, data=["/late"]).model_dump_json().encode())

    async def subscribe_late() -> None:
        await anyio.sleep(0.5)
        await nc.subscribe(subjects.command("tree", "pool_list"), cb=answer)
        await nc.flush()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(subscribe_late)
            reply = await request(nats_url, "tree", PoolList())
        assert reply.data == ["/late"]
        assert len(asked) == 1  # asked again only while nobody was there to be asked
    finally:
        await nc.close()


@pytest.mark.anyio
async def test_no_service_at_all_is_said_after_the_patience(nats_url: str) -> None:
    began = time.monotonic()
    with pytest.raises(InputError, match="the preemption service is not running"):
        await request(nats_url, "preemption", PoolList())
    assert time.monotonic() - began >= NO_RESPONDER_PATIENCE  # (asked again meanwhile)
