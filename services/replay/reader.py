"""The thin shell of `poolwise replay`: read a whole log, then `verify` it (pure)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from services.common.log import EventLog, Stored
from services.replay.verify import Report, verify

if TYPE_CHECKING:
    from services.common.jetstream import JetStreamLog


async def read_log(log: EventLog) -> list[Stored]:
    """Every message of the log, in order (one snapshot: up to the last sequence when called)."""
    return await log.read(1)


async def verify_log(log: EventLog) -> Report:
    messages = await read_log(log)
    return await anyio.to_thread.run_sync(verify, messages)


class NoLog(Exception):
    """The server has no poolwise stream to read."""


async def verify_jetstream(log: JetStreamLog) -> Report:
    """Verify the log of `log`'s stream; `NoLog` when the server does not have it."""
    from nats.js.errors import NotFoundError

    try:
        await log.last_seq()
    except NotFoundError:
        raise NoLog(f"no stream {log.stream} on this server: nothing was ever recorded there") from None
    return await verify_log(log)


async def verify_url(url: str) -> Report:
    """Verify the log of the poolwise stream on the NATS server at `url`."""
    from services.common.jetstream import JetStreamLog

    log = await JetStreamLog.connect(url, name="poolwise-replay")
    try:
        return await verify_jetstream(log)
    finally:
        with anyio.CancelScope(shield=True):
            await log.close()


async def verify_data_dir(data_dir: Path) -> Report:
    """Verify the log kept in `data_dir` by `poolwise up`, while no server runs on it: start a private
    one on its store for the time of the read."""
    from services.common.natsserver import EmbeddedNats

    async with EmbeddedNats(data_dir) as server:
        return await verify_url(server.url)
