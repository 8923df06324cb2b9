"""Packs (several decisions in one log message) under the log port's contract, on both adapters:
a run of packable decisions on one subject is one message; everything else stays a message of
its own; what a pack holds reads back in order, at one position."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from events import (
    Envelope,
    GangAdmitted,
    GangMovedToQueue,
    TaskSpec,
    TaskStateChanged,
    decode_all,
    encode,
    is_pack,
)
from events import subjects as subj
from services.common.log import AppendRefused, EventLog
from services.common.memlog import MemoryLog
from services.common.packs import outgoing

pytestmark = pytest.mark.anyio

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def admitted(i: int, tree: str = "t1") -> Envelope:
    event = GangAdmitted(tree=tree, gang=f"g{i}", pool="/a", queue="pending",
                         tasks=[TaskSpec(id=f"g{i}/0", resources={"cpu": 1.0})])
    return Envelope(id=f"adm-{tree}-{i}", time=T0, source="admission", basis=7, event=event)


def moved(i: int) -> Envelope:
    event = GangMovedToQueue(tree="t1", gang=f"m{i}", pool="/a", queue="revocable", reason="does not fit")
    return Envelope(id=f"mov-{i}", time=T0, source="admission", basis=7, event=event)


def task(i: int) -> Envelope:
    event = TaskStateChanged(tree="t1", gang=f"g{i}", task=f"g{i}/0", state="running")
    return Envelope(id=f"task-{i}", time=T0, source="test", event=event)


async def test_a_run_of_decisions_on_one_subject_is_one_message(log: EventLog) -> None:
    batch = [admitted(1), moved(2), admitted(3), task(4), admitted(5), admitted(6, tree="t2")]
    landed = await log.append(batch)
    assert [a.seq for a in landed] == [1, 1, 1, 2, 3, 4]
    stored = await log.read()
    assert [s.subject for s in stored] == [subj.decision("t1", "admission"), subj.task("t1"),
                                           subj.decision("t1", "admission"), subj.decision("t2", "admission")]
    assert [is_pack(s.data) for s in stored] == [True, False, False, False]
    assert [decode_all(s.data) for s in stored] == [[admitted(1), moved(2), admitted(3)], [task(4)], [admitted(5)],
                                                    [admitted(6, tree="t2")]]
    assert stored[2].data == encode(admitted(5))  # a pack of one is the event alone
    assert stored[2].msg_id == "adm-t1-5"


async def test_sending_a_pack_again_stores_it_once(log: EventLog) -> None:
    first = await log.append([admitted(1), admitted(2)])
    again = await log.append([admitted(1), admitted(2)])
    assert [a.seq for a in again] == [a.seq for a in first] and all(a.duplicate for a in again)
    assert len(await log.read()) == 1


async def test_a_refused_pack_names_its_first_event() -> None:
    log = MemoryLog(subjects=["poolwise.task.>"])  # takes tasks, not decisions
    with pytest.raises(AppendRefused) as refused:
        await log.append([task(1), admitted(2), admitted(3)])
    assert refused.value.index == 1
    assert len(await log.read()) == 1


def test_packs_are_cut_at_the_limits() -> None:
    batch = [admitted(i) for i in range(7)]
    counts = [m.count for m in outgoing(batch, lambda e: "s", encode, max_events=3)]
    assert counts == [3, 3, 1]
    size = len(encode(admitted(0)))
    by_bytes = outgoing(batch, lambda e: "s", encode, max_bytes=2 * (size + 2) + 2)
    assert [m.count for m in by_bytes] == [2, 2, 2, 1]
    assert all(len(m.data) <= 2 * (size + 2) + 2 for m in by_bytes)
    assert [m.first for m in by_bytes] == [0, 2, 4, 6]
    assert len({m.msg_id for m in by_bytes}) == 4
