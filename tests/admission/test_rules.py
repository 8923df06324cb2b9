"""Refusals of admission's inputs (rules.py, DOMAIN §4, §5): each names its rule and numbers, and a
refused input changes nothing."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest

from events import Event, GangEnqueued, InputRejected, TaskSpec, at_seconds, decode, encode, encode_pack
from events.envelope import Envelope
from services.admission.folder import AdmissionFolder
from services.common.folding import fold_batch
from services.common.log import Stored
from tests.admission.builders import (
    admitted,
    cancel,
    delete_pool,
    finished,
    gang,
    pool,
    refusal,
    rejected,
    task,
    world,
)


def _refused(events: Sequence[Event], ref: str, rule: str, *fragments: str) -> InputRejected:
    found = refusal(e for e in events if isinstance(e, InputRejected))
    assert (found.ref, found.rule) == (ref, rule), found.reason
    for fragment in fragments:
        assert fragment in found.reason, f"{fragment!r} not in {found.reason!r}"
    return found


# --- where a new gang goes --------------------------------------------------------------------------


def test_a_gang_for_a_missing_pool_is_refused_and_its_id_is_used_up() -> None:
    log = world(pool("/a"))
    out = log.feed(gang("g", "/nope"))
    _refused(out, "g", "pool_missing", "pool /nope does not exist")
    assert finished(out) == {"g": "rejected"}
    assert log.gang("g").state == "rejected"
    assert log.rt.tasks == {} and log.rt.jobs == {}
    # later members of that gang id are refused too
    _refused(log.feed(gang("g", "/a")), "g", "gang_closed", "rejected")


def test_a_gang_for_a_pool_with_children_is_refused() -> None:
    log = world(pool("/org"), pool("/org/a"), pool("/org/b"))
    _refused(log.feed(gang("g", "/org")), "g", "pool_not_leaf", "/org is not a leaf", "/org/a, /org/b")


def test_a_gang_for_a_deleted_pool_is_refused() -> None:
    log = world(pool("/a"), pool("/b"))
    log.feed(delete_pool("/a"))
    _refused(log.feed(gang("g", "/a")), "g", "pool_missing", "/a does not exist")
    assert admitted(log.tick(0)) == []


def test_an_unknown_resource_kind_is_refused() -> None:
    log = world(pool("/a"))
    out = log.feed(gang("g", "/a", resources={"cpu": 1, "gpu": 1}))
    _refused(out, "g", "unknown_kind", "unknown resource kind gpu", "has cpu")
    assert "/a" not in log.rt.queues


def test_a_negative_amount_is_refused_by_the_codec_and_the_stream_moves_on() -> None:
    body = GangEnqueued(gang="neg", pool="/a", job="neg", size=1,
                        tasks=[TaskSpec(id="neg/0", resources={"cpu": 1})]).model_dump()
    body["tasks"][0]["resources"]["cpu"] = -2
    raw = json.dumps({"id": "in-1", "time": at_seconds(0).isoformat(), "source": "sdk", "event": body}).encode()
    ok = Envelope(id="in-2", time=at_seconds(0), source="sdk", event=gang("fine", "/a"))
    log = world(pool("/a"))
    folder = AdmissionFolder(log.state)
    base = log.seq
    result = fold_batch(folder, [Stored(base + 1, "poolwise.gang.default", raw),
                                 Stored(base + 2, "poolwise.gang.default", encode(ok))], base)
    (rejection,) = [d.event for d in result.decisions]
    assert isinstance(rejection, InputRejected)
    assert rejection.tree == "default" and rejection.ref == "in-1" and rejection.input_type == "GangEnqueued"
    assert rejection.field == "event.tasks.0.resources.cpu" and rejection.rule == "greater_than_equal"
    assert rejection.input_seq == base + 1
    assert "neg" not in log.rt.gangs  # nothing of it was folded
    assert log.gang("fine").state == "pending" and result.last_seq == base + 2


def test_a_pack_of_inputs_is_folded_part_by_part_and_a_refusal_names_its_part() -> None:
    """A submitter's `enqueue_many` lands as one message (events.encode_pack): each gang is
    decided on its own; the refusals of parts 1 and 2 name them and get ids of their own."""
    gangs = [gang("p0", "/a"), gang("p1", "/nope"), gang("p2", "/a", resources={"cpu": 1, "gpu": 1}),
             gang("p3", "/a")]
    envelopes = [Envelope(id=f"in-{i}", time=at_seconds(0), source="sdk", event=g) for i, g in enumerate(gangs)]
    log = world(pool("/a"))
    folder = AdmissionFolder(log.state)
    base = log.seq
    pack = encode_pack([encode(e) for e in envelopes])
    result = fold_batch(folder, [Stored(base + 1, "poolwise.gang.default", pack)], base)
    refusals = [d for d in result.decisions if isinstance(d.event, InputRejected)]
    assert [(r.event.ref, r.event.rule, r.event.input_seq, r.event.input_part) for r in refusals] == [
        ("p1", "pool_missing", base + 1, 1), ("p2", "unknown_kind", base + 1, 2)]
    assert len({r.id for r in refusals}) == 2 and all(r.basis == base + 1 for r in refusals)
    assert [log.gang(g).state for g in ("p0", "p1", "p2", "p3")] == ["pending", "rejected", "rejected", "pending"]
    # the first part's refusal keeps the id a message of one event gets
    alone = fold_batch(AdmissionFolder(world(pool("/a")).state),
                       [Stored(base + 1, "poolwise.gang.default", encode(envelopes[1]))], base).decisions
    assert alone[0].event.input_part is None and alone[0].id != refusals[0].id


def test_a_pack_with_a_malformed_input_is_refused_whole_naming_the_part() -> None:
    good = Envelope(id="in-0", time=at_seconds(0), source="sdk", event=gang("ok", "/a"))
    bad = json.loads(encode(Envelope(id="in-1", time=at_seconds(0), source="sdk", event=gang("bad", "/a"))))
    bad["event"]["size"] = 0
    log = world(pool("/a"))
    base = log.seq
    pack = encode_pack([encode(good), json.dumps(bad, separators=(",", ":")).encode()])
    result = fold_batch(AdmissionFolder(log.state), [Stored(base + 1, "poolwise.gang.default", pack)], base)
    (rejection,) = [d.event for d in result.decisions]
    assert isinstance(rejection, InputRejected)
    assert (rejection.field, rejection.rule, rejection.input_seq) == ("[1].event.size", "greater_than_equal", base + 1)
    assert "ok" not in log.rt.gangs and "bad" not in log.rt.gangs  # nothing of the message was folded


def test_the_wire_model_refuses_negative_amounts() -> None:
    envelope = Envelope(id="x", time=at_seconds(0), source="sdk", event=gang("g", "/a"))
    data = json.loads(encode(envelope))
    data["event"]["tasks"][0]["resources"]["cpu"] = -0.5
    with pytest.raises(Exception, match="greater_than_equal"):
        decode(json.dumps(data))


def test_a_gang_above_the_pools_limit_is_refused_with_the_numbers() -> None:
    log = world(pool("/org", limit={"cpu": 10}), pool("/org/a"))  # /org/a inherits limit 10
    _refused(log.feed(gang("g", "/org/a", tasks=3, cpu=4)), "g", "above_limit",
             "needs cpu 12, above the limit 10 of pool /org/a")
    assert "g" not in log.rt.jobs.get("/org/a", {})


def test_max_jobs_at_the_pool_counts_running_and_waiting_jobs() -> None:
    log = world(pool("/a", max_jobs=2))
    log.feed(gang("j1", "/a"), gang("j2", "/a", tasks=1, size=2))  # j2 is still waiting: it counts
    out = log.feed(gang("j3", "/a"))
    _refused(out, "j3", "max_jobs", "job j3 would be job 3 in pool /a, above its max_jobs 2")
    assert rejected(log.feed(gang("j1-more", "/a", job="j1"))) == []  # j1 is already one of the two
    # a job whose gangs are all finished no longer counts
    log.tick(1)
    log.feed(task("j1/0", "succeeded"), task("j1-more/0", "succeeded"), at=2)
    assert rejected(log.feed(gang("j4", "/a"))) == []


def test_max_jobs_at_an_ancestor_counts_every_leaf_below() -> None:
    log = world(pool("/org", max_jobs=2), pool("/org/a"), pool("/org/b"))
    log.feed(gang("x", "/org/a"), gang("y", "/org/b"))
    _refused(log.feed(gang("z", "/org/a")), "z", "max_jobs", "in pool /org, above its max_jobs 2")


def test_tree_default_max_jobs_per_pool() -> None:
    log = world(pool("/a"), max_jobs_per_pool=1)
    log.feed(gang("j1", "/a"))
    _refused(log.feed(gang("j2", "/a")), "j2", "max_jobs", "max_jobs 1")


# --- members of a gang ------------------------------------------------------------------------------


def test_more_members_than_size_at_once_are_refused() -> None:
    log = world(pool("/a"))
    _refused(log.feed(gang("g", "/a", tasks=3, size=2)), "g", "too_many_members", "3 members for a gang of size 2")


def test_members_beyond_size_later_are_refused_and_the_gang_waits_on() -> None:
    log = world(pool("/a"))
    log.feed(gang("g", "/a", tasks=2, size=3))
    out = log.feed(gang("g", "/a", tasks=2, size=3, first=2))
    _refused(out, "g", "too_many_members", "2 + 2 members exceed its size 3")
    assert log.gang("g").state == "waiting" and len(log.gang("g").tasks) == 2
    assert "g/2" not in log.rt.tasks


def test_members_for_a_complete_gang_are_refused() -> None:
    log = world(pool("/a"))
    log.feed(gang("g", "/a", tasks=2))
    _refused(log.feed(gang("g", "/a", tasks=1, size=2, first=2)), "g", "too_many_members", "already has all 2")


@pytest.mark.parametrize("close", ["admitted", "timed_out", "cancelled", "done"])
def test_members_for_a_closed_gang_are_refused(close: str) -> None:
    log = world(pool("/a"))
    log.feed(gang("g", "/a", tasks=1, size=2, timeout=5))
    if close == "timed_out":
        log.tick(6)
    elif close == "cancelled":
        log.feed(cancel("g"))
    else:
        log.feed(gang("g", "/a", tasks=1, size=2, first=1))
        log.tick(1)
        if close == "done":
            log.feed(task("g/0", "succeeded"), task("g/1", "succeeded"), at=2)
    assert log.gang("g").state == close
    _refused(log.feed(gang("g", "/a", tasks=1, size=2, first=7)), "g", "gang_closed",
             f"gang g is {close}")


def test_a_size_that_disagrees_with_the_first_members_is_refused() -> None:
    log = world(pool("/a"))
    log.feed(gang("g", "/a", tasks=1, size=3))
    _refused(log.feed(gang("g", "/a", tasks=1, size=4, first=1)), "g", "size_mismatch",
             "size 4 disagrees with the first members' size 3")
    assert len(log.gang("g").tasks) == 1


def test_an_unknown_kind_in_later_members_is_refused() -> None:
    log = world(pool("/a"))
    log.feed(gang("g", "/a", tasks=1, size=2))
    _refused(log.feed(gang("g", "/a", tasks=1, size=2, first=1, resources={"disk": 1})), "g", "unknown_kind")


def test_a_task_id_already_used_is_refused() -> None:
    log = world(pool("/a"))
    log.feed(gang("g", "/a"))
    twin = GangEnqueued(gang="h", pool="/a", job="h", size=1, tasks=[TaskSpec(id="g/0", resources={"cpu": 1})])
    _refused(log.feed(twin), "h", "duplicate_task", "task id g/0 is already used")
    inside = GangEnqueued(gang="k", pool="/a", job="k", size=2,
                          tasks=[TaskSpec(id="k/0", resources={"cpu": 1})] * 2)
    _refused(log.feed(inside), "k", "duplicate_task", "k/0")
    log.feed(gang("w", "/a", tasks=1, size=2))
    later = GangEnqueued(gang="w", pool="/a", job="w", size=2, tasks=[TaskSpec(id="w/0", resources={"cpu": 1})])
    _refused(log.feed(later), "w", "duplicate_task", "w/0")


@pytest.mark.parametrize("close", ["waiting", "pending", "admitted", "cancelled"])
def test_members_sent_again_are_a_repeat_or_a_conflict_whatever_the_gangs_state(close: str) -> None:
    """The same gang and member ids again (a resubmission after JetStream's duplicate window, or
    with other content: another event id) are refused as what they are, not by the gang's state."""
    log = world(pool("/a"))
    log.feed(gang("g", "/a", tasks=2, size=3 if close == "waiting" else 2, cpu=1, priority=3))
    if close == "admitted":
        log.tick(1)
    elif close == "cancelled":
        log.feed(cancel("g"))
    assert log.gang("g").state == close
    size = 3 if close == "waiting" else 2
    _refused(log.feed(gang("g", "/a", tasks=2, size=size, cpu=1, priority=3)), "g", "duplicate_task",
             "gang g: member g/0 was enqueued before (the same members sent again: nothing changes)")
    _refused(log.feed(gang("g", "/a", tasks=2, size=size, cpu=4, priority=3)), "g", "member_conflict",
             "gang g: member g/0 was enqueued before with other content (resources cpu 1 then, cpu 4 now)")
    _refused(log.feed(gang("g", "/a", tasks=1, first=1, size=size, cpu=1, priority=5)), "g", "member_conflict",
             "gang g: member g/1 was enqueued before with other content (priority 3 then, 5 now)")
    assert [t.resources for t in log.gang("g").tasks] == [{"cpu": 1}, {"cpu": 1}]  # nothing changed
    assert log.gang("g").state == close


def test_a_task_id_of_another_gang_names_that_gang() -> None:
    log = world(pool("/a"))
    log.feed(gang("g", "/a"))
    twin = GangEnqueued(gang="h", pool="/a", job="h", size=1, tasks=[TaskSpec(id="g/0", resources={"cpu": 2})])
    _refused(log.feed(twin), "h", "duplicate_task", "task id g/0 is already used (a member of gang g)")


# --- task reports -------------------------------------------------------------------------------------




def test_backward_transitions_are_refused_and_change_nothing() -> None:
    log = world(pool("/a"))
    log.feed(gang("g", "/a", tasks=2))
    log.tick(0)
    log.feed(task("g/0", "running"), at=1)
    _refused(log.feed(task("g/0", "placed"), at=2), "g/0", "backward_transition", "running -> placed goes backward")
    _refused(log.feed(task("g/0", "pending")), "g/0", "backward_transition", "running -> pending")
    assert log.task("g/0").state == "running" and log.task("g/0").started_at == 1


def test_leaving_a_terminal_state_is_refused() -> None:
    log = world(pool("/a"))
    log.feed(gang("g", "/a", tasks=2))
    log.tick(0)
    log.feed(task("g/0", "succeeded"))
    out = log.feed(task("g/0", "running"))
    _refused(out, "g/0", "task_finished", "already succeeded: succeeded -> running is not a transition")
    assert log.ledger("/a").allocation == {"cpu": 1.0}  # released once, not twice


def test_a_repeated_report_of_the_same_state_is_accepted_and_changes_nothing() -> None:
    log = world(pool("/a"))
    log.feed(gang("g", "/a"))
    log.tick(0)
    log.feed(task("g/0", "running"), at=1)
    assert rejected(log.feed(task("g/0", "running"), at=5)) == []
    assert log.task("g/0").started_at == 1


@pytest.mark.parametrize("state", ["waiting", "pending"])
def test_a_task_report_for_a_gang_not_admitted_is_refused(state: str) -> None:
    log = world(pool("/a", limit={"cpu": 1}))
    log.feed(gang("fill", "/a"))
    log.tick(0)
    log.feed(gang("g", "/a", tasks=1, size=1 if state == "pending" else 2))
    assert log.gang("g").state == state
    _refused(log.feed(task("g/0", "running")), "g/0", "gang_not_admitted",
             f"its gang g is {state}; a task leaves pending only by admission")
    assert log.task("g/0").state == "pending"


def test_a_report_for_an_unknown_task_or_the_wrong_gang_is_refused() -> None:
    log = world(pool("/a"))
    log.feed(gang("g", "/a"), gang("h", "/a"))
    log.tick(0)
    _refused(log.feed(task("nope/0", "running")), "nope/0", "unknown_task")
    _refused(log.feed(task("g/0", "running", gang_id="h")), "g/0", "wrong_gang", "belongs to gang g, not h")


# --- cancel ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("end", ["done", "cancelled", "timed_out", "rejected"])
def test_cancel_of_a_finished_gang_is_refused(end: str) -> None:
    log = world(pool("/a"))
    if end == "rejected":
        log.feed(gang("g", "/nope"))
    elif end == "timed_out":
        log.feed(gang("g", "/a", tasks=1, size=2, timeout=1))
        log.tick(2)
    else:
        log.feed(gang("g", "/a"))
        log.tick(0)
        log.feed(task("g/0", "succeeded") if end == "done" else cancel("g"))
    assert log.gang("g").state == end
    _refused(log.feed(cancel("g"), at=3), "g", "cancel_finished", f"gang g is already {end}")


def test_cancel_of_an_unknown_gang_is_refused() -> None:
    log = world(pool("/a"))
    _refused(log.feed(cancel("ghost")), "ghost", "unknown_gang", "no such gang")
