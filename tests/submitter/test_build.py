"""The SDK's events and ids, without a server: the same submission gets the same id; bad input
is refused with the field and the rule, before anything is sent."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import anyio
import pytest

from events import GangEnqueued, TaskSpec
from services.common.memlog import MemoryLog
from services.sdk import (
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
    assert envelope(enqueue(), source="cli").id == first.id  # who sends it is not its content


@pytest.mark.parametrize("other", [
    {"resources": {"cpu": 3}}, {"resources": {"cpu": 2, "memory": 1}}, {"priority": 1}, {"size": 3},
    {"job": "other"}, {"user": "bob"}, {"preemptible": False}, {"timeout": 30.0}, {"pool": "/ATG/x"},
])
def test_the_same_gang_and_member_ids_with_other_content_is_another_id(other: dict[str, object]) -> None:
    assert [t.id for t in enqueue(**other).tasks] == ["g1/0", "g1/1"]
    assert event_id(enqueue(**other)) != event_id(enqueue())


def test_the_same_content_written_otherwise_is_the_same_id() -> None:
    assert event_id(enqueue(resources={"cpu": 2})) == event_id(enqueue(resources={"cpu": 2.0}))
    as_tasks = enqueue(count=None, resources=None, tasks=[{"id": "g1/0", "resources": {"cpu": 2}},
                                                          TaskSpec(id="g1/1", resources={"cpu": 2})])
    assert event_id(as_tasks) == event_id(enqueue())


def test_task_state_and_cancel_ids() -> None:
    running = task_state_event(task="g1/0", gang="g1", state="running")
    assert event_id(running) == event_id(task_state_event(task="g1/0", gang="g1", state="running"))
    assert event_id(running) != event_id(task_state_event(task="g1/0", gang="g1", state="placed"))
    assert event_id(running, attempt=1) != event_id(running, attempt=2)
    assert event_id(running) != event_id(task_state_event(task="g1/0", gang="g1", state="running", message="why"))
    # an id covers its content: a cancel with another reason is another event (it was one id per gang)
    assert event_id(cancel_event(gang="g1")) == event_id(cancel_event(gang="g1"))
    assert event_id(cancel_event(gang="g1")) != event_id(cancel_event(gang="g1", reason="other words"))


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


@pytest.mark.anyio
async def test_on_a_log_other_content_under_the_same_ids_is_a_new_event() -> None:
    log = MemoryLog()
    client = Submitter(log=log)
    first = await client.enqueue(gang="g1", pool="/ATG", count=2, resources={"cpu": 1})
    other = await client.enqueue(gang="g1", pool="/ATG", count=2, resources={"cpu": 4})
    assert (other.duplicate, other.seq, other.id != first.id) == (False, first.seq + 1, True)
    assert len(await log.read()) == 2  # both stored: admission refuses the second (member_conflict)


@pytest.mark.anyio
async def test_a_gang_too_large_for_one_message_is_refused_before_anything_is_sent() -> None:
    log = MemoryLog()  # a log without a server: nats-server's default limit, 1 MiB
    client = Submitter(log=log)
    with pytest.raises(SubmitError) as caught:
        await client.enqueue(gang="big", pool="/ATG", count=40_000, resources={"cpu": 1, "memory": 2})
    error = caught.value
    assert (error.field, error.rule) == ("tasks", "message_too_large")
    message = str(error)
    assert message.startswith("tasks: gang big: its 40000 members take ")
    assert "above the 1048576 bytes" in message and "[message_too_large]" in message
    assert "several enqueues with the same gang id and size=40000" in message
    with pytest.raises(SubmitError, match="message_too_large"):  # checked before any of several is sent
        await client.enqueue_many([{"gang": "small", "pool": "/ATG", "count": 1, "resources": {"cpu": 1}},
                                   {"gang": "big", "pool": "/ATG", "count": 40_000, "resources": {"cpu": 1}}])
    assert await log.read() == []
    # the advice works: the same gang in parts of the members said, same size, each fits
    found = re.search(r"about (\d+) members each", message)
    assert found is not None, message
    each = int(found[1])
    for first in range(0, 40_000, each):
        await client.enqueue(gang="big", pool="/ATG", size=40_000, count=min(each, 40_000 - first),
                             first_member=first, resources={"cpu": 1, "memory": 2})
    assert len(await log.read()) == -(-40_000 // each) > 1


@pytest.mark.anyio
async def test_a_deadline_is_a_positive_number_of_seconds_and_a_bad_url_a_publish_error() -> None:
    with pytest.raises(ValueError, match="timeout: a deadline in seconds above 0"):
        Submitter("nats://127.0.0.1:4222", timeout=0)
    with pytest.raises(PublishError, match=re.escape("an empty NATS server URL in 'nats://127.0.0.1:4222,'")):
        await Submitter("nats://127.0.0.1:4222,").connect()
