"""A `GangQueue` answers as a plain sorted list of its gangs would, also while its head keeps
leaving (the head moves a start index; the departed are cut off in one go later)."""

from __future__ import annotations

import random

from services.admission.domain.model import Gang
from services.admission.domain.queues import GangQueue, fifo_key_of
from tests.admission.builders import TREE

KEY = fifo_key_of(("priority", "arrival"))


def _gang(i: int, rng: random.Random) -> Gang:
    return Gang(f"g{i:05d}", TREE, "/a", f"j{i % 5}", "u", 1, rng.randint(0, 3), True, False, False, 30.0, 0.0,
                arrival=i, head_rank=rng.choice([0] * 20 + [i]))


def test_a_queue_whose_head_keeps_leaving_answers_as_a_sorted_list() -> None:
    rng = random.Random(11)
    queue = GangQueue(KEY)
    reference: list[Gang] = []  # the queue's gangs, sorted by the key
    compacted = False
    for i in range(3000):
        roll = rng.random()
        if reference and roll < 0.55:
            leaving = reference.pop(0)  # the head is admitted
            queue.remove(leaving)
        elif reference and roll < 0.6:
            leaving = reference.pop(rng.randrange(len(reference)))  # cancelled, timed out
            queue.remove(leaving)
        else:
            joining = _gang(i, rng)
            queue.push(joining)
            reference.append(joining)
            reference.sort(key=KEY)
        compacted = compacted or (queue._start == 0 and i > 200)
        assert len(queue) == len(reference)
        assert queue.head() is (reference[0] if reference else None)
        if i % 7 == 0:
            assert list(queue) == reference
            for at in (0, len(reference) // 2, len(reference) - 1):
                if 0 <= at < len(reference):
                    assert queue.position(reference[at].id) == at
                    assert queue.ahead_of(reference[at].id) is (reference[at - 1] if at else None)
            usage = {f"j{j}": rng.random() for j in range(5)}
            best = min(({g.job: g for g in reversed(reference)}.values()),
                       key=lambda g: (0 if KEY(g)[0] == 0 else 1, usage[g.job], -g.priority, g.arrival, g.id),
                       default=None)
            assert queue.head(lambda g, u=usage: u[g.job]) is best
            assert queue.ordered() == reference
    assert compacted


def test_draining_a_long_queue_from_the_head_keeps_its_order() -> None:
    rng = random.Random(5)
    queue = GangQueue(KEY)
    gangs = sorted((_gang(i, rng) for i in range(5000)), key=KEY)
    for found in gangs:
        queue.push(found)
    for at, expected in enumerate(gangs):
        assert queue.head() is expected
        if at % 1000 == 0:
            assert list(queue) == gangs[at:]
        queue.remove(expected)
    assert len(queue) == 0 and queue.head() is None and list(queue) == []
