"""`poolwise submit --wait` while admission has no answerer for a moment (issue 19, found by
following deploy/README.md's one-machine cluster): after a NATS node was killed, the lease bucket
lost its leader, every service lost its lease and took it again some seconds later, and meanwhile
`submit --wait` said `error: the admission service is not running` (exit 2) for a gang that was
stored and then admitted. The wait asks again until its deadline instead; a service that never
answers is still said, once the wait is over."""

from __future__ import annotations

from typing import Any

import nats
import pytest
from pydantic import BaseModel

from events import subjects
from events.commands import Reply
from services.admission.commands import SERVICE, ExplainQuery
from services.tools.cli import client, gangs_cmd
from services.tools.cli.client import ServiceAbsent

pytestmark = [pytest.mark.anyio, pytest.mark.nats]

ADMITTED = {"state": "admitted", "summary": "admitted from queue pending of pool /a", "findings": []}


async def test_the_wait_asks_again_while_admission_has_no_answerer(nats_url: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    nc = await nats.connect(nats_url)
    absent: list[str] = []

    async def answer(msg: Any) -> None:
        await msg.respond(Reply(ok=True, data=ADMITTED).model_dump_json().encode())

    real_ask = gangs_cmd.ask

    async def ask(url: str, query: BaseModel, timeout: float = gangs_cmd.REQUEST_TIMEOUT) -> Reply:
        try:
            return await real_ask(url, query, timeout)
        except ServiceAbsent as exc:  # nobody answered (the real server said so): now admission comes back
            absent.append(str(exc))
            await nc.subscribe(subjects.command(SERVICE, ExplainQuery(gang="g").op), cb=answer)
            await nc.flush()
            raise

    monkeypatch.setattr(gangs_cmd, "ask", ask)
    try:
        state, line = await gangs_cmd.first_word(nats_url, "g2", "default", wait=60)
    finally:
        await nc.close()
    assert absent and "the admission service is not running" in absent[0]
    assert (state, line) == ("admitted", "gang g2: admitted: admitted from queue pending of pool /a")


async def test_no_answerer_for_the_whole_wait_is_still_said(nats_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client, "NO_RESPONDER_PATIENCE", 0.0)  # each ask says so at once: several in the wait
    with pytest.raises(ServiceAbsent, match="the admission service is not running"):
        await gangs_cmd.first_word(nats_url, "g3", "default", wait=3)
