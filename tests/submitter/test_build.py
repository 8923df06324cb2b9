"""The SDK's events and ids, without a server: the same submission gets the same id; bad input
is refused with the field and the rule, before anything is sent."""

from __future__ import annotations

from datetime import UTC, datetime

import anyio
import pytest

from events import GangEnqueued, TaskSpec
from services.common.memlog import MemoryLog
from services.submitter import (
    PublishError,
    SubmitError,
    Submitter,
    cancel_event,
    enqueue_event,
    envelope,
    event_id,
    task_state_event,
)


def enqueue(**options: object) -> GangEnqueued:
    base: dict[str, object] = {"gang": "g1", "pool": "/ATG", "count": 2, "resources": {"cpu": 2}}
    base.update(options)
    return enqueue_event(**base)  # type: ignore[arg-type]


def test_count_and_resources_make_numbered_members() -> None:
    event = enqueue(count=3, first_member=2, resources={"cpu": 2, "memory": 100})
    assert [t.id for t in event.tasks] == ["g1/2", "g1/3", "g1/4"]
    assert all(t.resources == {"cpu": 2, "memory": 100} for t in event.tasks)
    assert (event.size, event.job, event.user, event.tree) == (3, "g1", "anonymous", "default")


def test_tasks_as_given_with_missing_ids_filled_in() -> None:
    event = enqueue_event(gang="g", pool="/P", size=4, tasks=[TaskSpec(id="a", resources={"cpu": 1}),
                                                              {"resources": {"gpu": 1}}])
    assert [t.id for t in event.tasks] == ["a", "g/1"]
    assert event.size == 4


def test_flags_are_carried() -> None:
    event = enqueue(job="j", user="alice", priority=7, preemptible=False, revocable=True, controller=True,
                    timeout=12.5, tree="batch")
    assert (event.job, event.user, event.priority, event.preemptible, event.revocable, event.controller,
            event.timeout, event.tree) == ("j", "alice", 7, False, True, True, 12.5, "batch")


def test_same_submission_same_id_and_different_members_differ() -> None:
    first = envelope(enqueue(), time=datetime(2024, 1, 1, tzinfo=UTC))
    again = envelope(enqueue(), time=datetime(2024, 1, 2, tzinfo=UTC))
    assert first.id == again.id
    assert event_id(enqueue(first_member=2)) != first.id  # the next members of the same gang
    assert event_id(enqueue(gang="g2")) != first.id
    assert event_id(enqueue(tree="other")) != first.id


def test_task_state_and_cancel_ids() -> None:
    running = task_state_event(task="g1/0", gang="g1", state="running")
    assert event_id(running) == event_id(task_state_event(task="g1/0", gang="g1", state="running"))
    assert event_id(running) != event_id(task_state_event(task="g1/0", gang="g1", state="placed"))
    assert event_id(running, attempt=1) != event_id(running, attempt=2)
    assert event_id(cancel_event(gang="g1")) == event_id(cancel_event(gang="g1", reason="other words"))


@pytest.mark.parametrize(("options", "message"), [
    ({"count": 0}, "count: a gang has at least one member, got 0"),
    ({"resources": {"cpu": -1}}, "tasks.0.resources.cpu: Input should be greater than or equal to 0"),
    ({"count": None, "resources": None}, "give tasks=[...], or count and resources"),
    ({"tasks": [{"resources": {"cpu": 1}}]}, "give either tasks=[...] or count and resources, not both"),
    ({"count": 3, "size": 2}, "size: 3 members for a gang of size 2"),
    ({"size": 0}, "size: Input should be greater than or equal to 1"),
    ({"tree": "a.b"}, "tree: 'a.b' is not a tree name"),
    ({"timeout": -1.0}, "timeout: Input should be greater than or equal to 0"),
    ({"gang": ""}, "gang: String should have at least 1 character"),
])
def test_bad_input_is_refused_with_field_and_rule(options: dict[str, object], message: str) -> None:
    with pytest.raises(SubmitError) as caught:
        enqueue(**options)
    assert str(caught.value).startswith(message)


def test_duplicate_member_ids_and_bad_task_states_are_refused() -> None:
    with pytest.raises(SubmitError, match="task id x is given twice"):
        enqueue_event(gang="g", pool="/P", tasks=[{"id": "x", "resources": {}}, {"id": "x", "resources": {}}])
    with pytest.raises(SubmitError, match="'runing' is not a task state"):
        task_state_event(task="t", gang="g", state="runing")


@pytest.mark.anyio
async def test_on_a_log_the_same_enqueue_is_stored_once() -> None:
    log = MemoryLog()
    client = Submitter(log=log, source="sdk:test")
    first = await client.enqueue(gang="g1", pool="/ATG", count=2, resources={"cpu": 1})
    await anyio.sleep(0.01)  # a later wall clock: the envelope differs, its id does not
    again = await client.enqueue(gang="g1", pool="/ATG", count=2, resources={"cpu": 1})
    assert (first.duplicate, again.duplicate, again.seq, again.id) == (False, True, first.seq, first.id)
    assert first.subject == "poolwise.gang.default"
    assert len(await log.read()) == 1


@pytest.mark.anyio
async def test_a_log_that_refuses_the_subject_is_a_publish_error() -> None:
    client = Submitter(log=MemoryLog(subjects=("poolwise.hosts",)))
    with pytest.raises(PublishError, match="not stored"):
        await client.cancel("g1")


@pytest.mark.anyio
async def test_unreachable_server_is_a_publish_error_not_a_hang() -> None:
    with anyio.fail_after(20), pytest.raises(PublishError, match=r"cannot reach NATS at nats://127\.0\.0\.1:1 "):
        async with Submitter("nats://127.0.0.1:1", connect_timeout=1.0):
            pass


def test_a_submitter_needs_somewhere_to_publish() -> None:
    with pytest.raises(ValueError, match="needs a NATS URL"):
        Submitter()
