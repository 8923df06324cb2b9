"""`poolwise demo --data-dir` waits for the tree service's read models before it stops
(`demo_cmd.read_models_settled`): it asks their lowest checkpoint over SQL, as `poolwise sql`
asks, until it reaches the log's end, and says where they stopped when they do not in time. A
stand-in for the tree service answers here, so the read models' lag is chosen, not hoped for."""

from __future__ import annotations

import json
from typing import Any

import nats
import pytest

from events import ClockTicked, Envelope, at_seconds, subjects
from events.commands import Reply
from services.common.jetstream import JetStreamLog
from services.tools.cli.demo_cmd import CHECKPOINTS, read_models_settled

pytestmark = [pytest.mark.anyio, pytest.mark.nats]


async def test_settled_once_the_checkpoint_reaches_the_logs_end(fresh_stream: str) -> None:
    url = fresh_stream
    log = await JetStreamLog.connect(url)
    try:
        for i in range(3):
            await log.append([Envelope(id=f"tick-{i}", time=at_seconds(i), source="test", event=ClockTicked())])
    finally:
        await log.close()
    held = [1]
    asked: list[dict[str, Any]] = []
    nc = await nats.connect(url)

    async def answer(msg: Any) -> None:
        asked.append(json.loads(msg.data))
        await msg.respond(Reply(ok=True, data={"columns": ["held"], "rows": [[held[0]]]}).model_dump_json().encode())

    try:
        await nc.subscribe(subjects.command("tree", "sql"), cb=answer)
        assert await read_models_settled(url, patience=0.5) == (1, 3)  # behind: where they stopped
        assert asked[0]["sql"] == CHECKPOINTS and asked[0]["format"] == "rows"
        held[0] = 3
        assert await read_models_settled(url, patience=10) is None
    finally:
        await nc.close()
