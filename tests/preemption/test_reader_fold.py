"""Preemption's copy of admission's fold (`AdmissionState(reader=True)`) keeps queue order only
where preemption reads it (pools with `preempt_lower_priority`) and marks no slot waiters; it
must still agree with admission's fold on everything else, and answer every queue question the
same (an `UnorderedQueue` sorts when asked), also when the option comes and goes."""

from __future__ import annotations

import random
from typing import Any

from events import Event, PoolConfig, PoolConfigChanged, TreeConfigured, TreeOptions
from services.admission.domain.model import Gang
from services.admission.domain.queues import GangQueue, UnorderedQueue, fifo_key_of
from services.admission.domain.state import AdmissionState
from services.preemption.domain.state import PreemptionState
from tests.admission.builders import TREE, Log, cancel, gang, pool, preempt, task, without_slot_waits, world


def _reader_of(log: Log) -> AdmissionState:
    reader = AdmissionState(reader=True)
    for entry in log.entries:
        reader.apply(entry.event, entry.seq, entry.time)
    return reader


def _set(path: str, **config: Any) -> PoolConfigChanged:
    return PoolConfigChanged(tree=TREE, path=path, config=PoolConfig(**config))


def test_preemption_folds_with_a_reader_copy() -> None:
    assert PreemptionState().admission.reader and not AdmissionState().reader


def test_the_reader_fold_agrees_with_admission_as_options_come_and_go() -> None:
    log = world(pool("/a", reservation={"cpu": 10}), pool("/b", reservation={"cpu": 10}, preempt_lower_priority=True),
                pool("/c", fifo_sort=["pending_tasks", "priority"], max_running_jobs=2),
                capacity={"cpu": 30})
    rng = random.Random(7)
    steps: list[Event] = []
    for i in range(60):
        to = rng.choice(["/a", "/b", "/c"])
        steps.append(gang(f"g{i}", to, tasks=rng.randint(1, 3), cpu=rng.choice([1.0, 2.0, 4.0]),
                          priority=rng.randint(0, 3), job=f"j{i % 7}"))
    checks = 0
    for i, event in enumerate(steps):
        log.feed(event)
        if i % 7 == 3:
            log.tick(float(i))
        if i == 20:  # the option comes to /a and /c (their queues keep their order from now on), goes from /b
            log.feed(_set("/a", reservation={"cpu": 10}, preempt_lower_priority=True),
                     _set("/b", reservation={"cpu": 10}),
                     _set("/c", fifo_sort=["pending_tasks", "priority"], max_running_jobs=2,
                          preempt_lower_priority=True))
        if i == 35:  # the tree's options change (every queue is looked at again)
            log.feed(TreeConfigured(tree=TREE, options=TreeOptions(resources=["cpu"])))
        if i == 45:
            admitted = [g for g in log.rt.gangs.values() if g.state == "admitted"][:3]
            for found in admitted:
                log.feed(preempt(found.id, found.pool, found.tasks[0].id))
            for found in [g for g in log.rt.gangs.values() if g.state == "pending"][:2]:
                log.feed(cancel(found.id))
            for found in [g for g in log.rt.gangs.values() if g.state == "admitted"][:2]:
                log.feed(*(task(t.id, "running", found.id) for t in found.tasks))
        reader = _reader_of(log)
        assert without_slot_waits(reader) == without_slot_waits(log.state)
        for path, queues in log.rt.queues.items():
            theirs = reader.runtime(TREE).queues[path]
            view_has_option = path in ("/a", "/c") if i >= 20 else path == "/b"
            assert isinstance(theirs["pending"], UnorderedQueue) != view_has_option, (i, path)
            for name, queue in queues.items():
                assert [g.id for g in theirs[name].ordered()] == [g.id for g in queue.ordered()]
                assert len(theirs[name]) == len(queue)
                checks += 1
    assert checks > 100


def test_an_unordered_queue_answers_as_a_gang_queue() -> None:
    rng = random.Random(3)
    key = fifo_key_of(("priority", "arrival"))
    ordered, unordered = GangQueue(key), UnorderedQueue(key)
    inside: list[Gang] = []
    for i in range(400):
        if inside and rng.random() < 0.4:
            leaving = inside.pop(rng.randrange(len(inside)))
            ordered.remove(leaving)
            unordered.remove(leaving)
        else:
            found = Gang(f"g{i}", TREE, "/a", f"j{i % 5}", "u", 1, rng.randint(0, 3), True, False, False, 30.0, 0.0,
                         arrival=rng.randint(0, 50), head_rank=rng.choice([0, 0, 0, i]))
            inside.append(found)
            ordered.push(found)
            unordered.push(found)
        if i % 9 == 0:
            assert [g.id for g in unordered] == [g.id for g in ordered] == [g.id for g in unordered.ordered()]
            assert len(unordered) == len(ordered)
            assert (unordered.head() or inside[0]).id == (ordered.head() or inside[0]).id
            usage = {f"j{j}": rng.random() for j in range(5)}
            assert unordered.head(lambda g, u=usage: u[g.job]) is ordered.head(
                lambda g, u=usage: u[g.job])
            for probe in inside[:5]:
                assert probe.id in unordered
                assert unordered.position(probe.id) == ordered.position(probe.id)
                assert unordered.ahead_of(probe.id) is ordered.ahead_of(probe.id)
