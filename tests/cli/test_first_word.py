"""`submit --wait`'s first word on a gang (`gangs_cmd.first_word`): "the admission service is not
running" only when admission never answered in the wait; one that answered and then went away
(its lease moving, a restart) had not read the gang in time."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from events.commands import Reply
from services.admission.domain.model import UNKNOWN
from services.tools.cli import gangs_cmd
from services.tools.cli.client import ServiceAbsent

pytestmark = pytest.mark.anyio

NOT_RUNNING = "the admission service is not running"


async def test_admission_that_answered_unknown_and_went_away_had_not_read_the_gang(
        monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []

    async def ask(url: str, query: BaseModel, timeout: float = gangs_cmd.REQUEST_TIMEOUT) -> Reply:
        asked.append(url)
        if len(asked) == 1:  # it answers once, not having read the gang yet, then is gone
            return Reply(ok=True, data={"state": UNKNOWN, "summary": "gang g1 is not known", "findings": []})
        raise ServiceAbsent(NOT_RUNNING)

    monkeypatch.setattr(gangs_cmd, "ask", ask)
    state, line = await gangs_cmd.first_word("nats://nowhere", "g1", "default", wait=0.5)
    assert len(asked) > 1  # (it was asked again, and was gone)
    assert state == UNKNOWN
    assert line.startswith("gang g1: not read by admission within 0.5 s") and NOT_RUNNING not in line
    assert line.endswith("(admission answered, then stopped answering)")


async def test_admission_that_never_answered_is_not_running(monkeypatch: pytest.MonkeyPatch) -> None:
    async def ask(url: str, query: BaseModel, timeout: float = gangs_cmd.REQUEST_TIMEOUT) -> Reply:
        raise ServiceAbsent(NOT_RUNNING)

    monkeypatch.setattr(gangs_cmd, "ask", ask)
    with pytest.raises(ServiceAbsent, match=NOT_RUNNING):
        await gangs_cmd.first_word("nats://nowhere", "g1", "default", wait=0.5)
