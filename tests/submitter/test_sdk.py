"""The SDK on a real nats-server: a retried call is stored once, and the sync wrapper works from
code that is not async."""

from __future__ import annotations

import anyio
import pytest

from events import GangCancelled, GangEnqueued, TaskStateChanged
from services.sdk import Submitter, SyncSubmitter
from tests.submitter.system import events

pytestmark = pytest.mark.anyio


async def test_same_enqueue_twice_is_one_event_in_the_log(fresh_stream: str) -> None:
    async with Submitter(fresh_stream, source="sdk:test") as client:
        first = await client.enqueue(gang="g1", pool="/ATG", count=4, resources={"cpu": 2, "memory": 100},
                                     job="j", priority=3)
        again = await client.enqueue(gang="g1", pool="/ATG", count=4, resources={"cpu": 2, "memory": 100},
                                     job="j", priority=3)
    async with Submitter(fresh_stream) as other:  # a retry from another process: same id still
        third = await other.enqueue(gang="g1", pool="/ATG", count=4, resources={"cpu": 2, "memory": 100},
                                    job="j", priority=3)
    assert (first.duplicate, again.duplicate, third.duplicate) == (False, True, True)
    assert first.seq == again.seq == third.seq
    enqueued = [e for e in await events(fresh_stream) if isinstance(e.event, GangEnqueued)]
    assert len(enqueued) == 1
    (stored,) = enqueued
    assert (stored.id, stored.source) == (first.id, "sdk:test")
    assert isinstance(stored.event, GangEnqueued)
    assert [t.id for t in stored.event.tasks] == ["g1/0", "g1/1", "g1/2", "g1/3"]
    assert (stored.event.job, stored.event.priority, stored.event.size) == ("j", 3, 4)


async def test_members_one_by_one_are_separate_events(fresh_stream: str) -> None:
    async with Submitter(fresh_stream) as client:
        a = await client.enqueue(gang="g", pool="/ATG", size=2, tasks=[{"id": "w0", "resources": {"gpu": 1}}])
        b = await client.enqueue(gang="g", pool="/ATG", size=2, tasks=[{"id": "w1", "resources": {"gpu": 1}}])
        await client.task_state("w0", gang="g", state="running", attempt=1)
        await client.task_state("w0", gang="g", state="running", attempt=1)
        await client.cancel("g", reason="done with it")
    assert (a.duplicate, b.duplicate, b.seq) == (False, False, a.seq + 1)
    kinds = [type(e.event) for e in await events(fresh_stream)]
    assert kinds == [GangEnqueued, GangEnqueued, TaskStateChanged, GangCancelled]


async def test_sync_submitter_from_plain_code(fresh_stream: str) -> None:
    def submit() -> tuple[bool, bool]:
        with SyncSubmitter(fresh_stream, source="sdk:sync") as client:
            first = client.enqueue(gang="s1", pool="/ATG", count=1, resources={"cpu": 1})
            again = client.enqueue(gang="s1", pool="/ATG", count=1, resources={"cpu": 1})
            client.cancel("s1")
            return first.duplicate, again.duplicate

    assert await anyio.to_thread.run_sync(submit) == (False, True)
    stored = await events(fresh_stream)
    assert [type(e.event) for e in stored] == [GangEnqueued, GangCancelled]
    assert {e.source for e in stored} == {"sdk:sync"}
