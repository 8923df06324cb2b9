"""The dashboard's timeline on a real JetStream stream: read newest first, a pack of 150 moves
gives the newest 100 (newest first), what is not a decision is left out, a cycle's
EntitlementsComputed is skipped, and a later read adds only what came since, once."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from events import EntitlementsComputed, Envelope, GangMovedToQueue, encode, encode_pack, subjects
from services.common.jetstream import JetStreamLog
from services.tools.dashboard.timeline import TIMELINE, Timeline

pytestmark = pytest.mark.anyio
AT = datetime(2026, 1, 1, tzinfo=UTC)


def moved(gang: str) -> bytes:
    event = GangMovedToQueue(tree="default", gang=gang, pool="/a", queue="revocable", reason="slack")
    return encode(Envelope(id=f"m-{gang}", time=AT, source="admission", event=event))


async def test_newest_first_and_only_once(jetstream_log: JetStreamLog) -> None:
    log = jetstream_log
    decisions = subjects.decision("default", "admission")
    await log.append_raw(decisions, moved("old"))
    await log.append_raw(decisions, encode_pack([moved(f"g{i}") for i in range(150)]))
    computed = EntitlementsComputed(tree="default", capacity={"cpu": 1.0}, pools=[])
    await log.append_raw(decisions, encode(Envelope(id="e1", time=AT, source="admission", event=computed)))
    await log.append_raw(subjects.clock("default"), b"{}")  # not a decision (and not even an event)
    timeline = Timeline()
    shown = await timeline.follow(log, await log.last_seq())
    assert len(shown) == TIMELINE == 100
    assert [e["gang"] for e in shown[:3]] == ["g149", "g148", "g147"] and shown[-1]["gang"] == "g50"
    assert {(e["seq"], e["type"]) for e in shown} == {(2, "GangMovedToQueue")}
    assert shown[0]["part"] == 149 and shown[0]["text"] == "gang g149 moved to queue revocable of /a: slack"

    await log.append_raw(decisions, moved("new"))
    shown = await timeline.follow(log, await log.last_seq())
    assert [e["gang"] for e in shown[:2]] == ["new", "g149"] and len(shown) == 100
    assert len({(e["seq"], e["part"]) for e in shown}) == 100  # nothing twice
    assert await timeline.follow(log, await log.last_seq()) == shown  # nothing new: the same
