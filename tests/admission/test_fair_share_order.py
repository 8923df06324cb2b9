"""The order a fair_share pool takes its queue in (`cycle.in_order`), against its definition: take
the least (requeued at the head first, job usage, priority desc, arrival, id) over every gang left,
count it as admitted (its job's usage grows by its dominant share), again. `in_order` does it with
a heap of jobs; the orders must be the same, gang for gang, whatever the ties."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from services.admission.domain.cycle import dominant_share, in_order
from services.admission.domain.model import Gang
from services.admission.domain.runtime import TreeRuntime
from services.tree.domain.effective import EffectivePool

CAPACITY = {"cpu": 100.0, "memory": 400.0}


def by_definition(gangs: list[Gang], usage: dict[str, float]) -> list[Gang]:
    remaining, ordered = list(gangs), []
    while remaining:
        best = min(remaining, key=lambda g: (0 if g.head_rank else 1, usage.get(g.job, 0.0), -g.priority,
                                             g.arrival, g.id))
        ordered.append(best)
        remaining.remove(best)
        usage[best.job] = usage.get(best.job, 0.0) + dominant_share(best.resources, CAPACITY)
    return ordered


def gang(index: int, job: int, priority: int, arrival: int, head: int, cpu: float, memory: float) -> Gang:
    return Gang(f"g{index:03d}", "t", "/a", f"j{job}", "u", 1, priority, True, False, False, 30.0, 0.0,
                head_rank=head, arrival=arrival, resources={"cpu": cpu, "memory": memory}, state="pending",
                number=index + 1)


gangs = st.lists(st.tuples(st.integers(0, 4), st.integers(-1, 2), st.integers(1, 6), st.integers(0, 2),
                           st.sampled_from([0.0, 1.0, 2.0, 0.5]), st.sampled_from([0.0, 4.0, 1.0])),
                 max_size=40)
held = st.lists(st.tuples(st.integers(0, 4), st.sampled_from([1.0, 3.0]), st.sampled_from([2.0, 8.0])), max_size=8)


@settings(max_examples=300)
@given(gangs, held)
def test_in_order_is_the_least_key_taken_again_and_again(queued: list[tuple[int, int, int, int, float, float]],
                                                          admitted: list[tuple[int, float, float]]) -> None:
    rt = TreeRuntime("t")
    for index, (job, cpu, memory) in enumerate(admitted):  # what the pool's jobs hold already
        g = gang(100 + index, job, 0, 0, 0, cpu, memory)
        g.state = "admitted"
        rt.admitted.setdefault("/a", {})[g.id] = g
    queue = [gang(i, *spec) for i, spec in enumerate(queued)]
    view = EffectivePool("/a", {}, {}, {}, mode="fair_share")
    totals: dict[str, dict[str, float]] = {}
    for g in sorted(rt.admitted.get("/a", {}).values(), key=lambda g: g.number):
        for kind, amount in g.resources.items():
            totals.setdefault(g.job, {})[kind] = totals.get(g.job, {}).get(kind, 0.0) + amount
    usage = {job: dominant_share(v, CAPACITY) for job, v in totals.items()}
    assert [g.id for g in in_order(rt, view, queue, CAPACITY)] == [g.id for g in by_definition(queue, usage)]


def test_a_job_using_less_goes_first_then_they_take_turns() -> None:
    rt = TreeRuntime("t")
    big = gang(90, 1, 0, 0, 0, 50.0, 0.0)  # job j1 holds half the cpu already
    big.state = "admitted"
    rt.admitted["/a"] = {big.id: big}
    queue = [gang(0, 1, 0, 1, 0, 10.0, 0.0), gang(1, 1, 0, 2, 0, 10.0, 0.0), gang(2, 2, 0, 3, 0, 10.0, 0.0),
             gang(3, 2, 0, 4, 0, 10.0, 0.0), gang(4, 3, 5, 5, 0, 10.0, 0.0)]
    view = EffectivePool("/a", {}, {}, {}, mode="fair_share")
    # j2 and j3 use nothing: j3's gang first (priority 5), then j2's (0.1 of the cpu after it), then
    # j2's second (j2 at 0.1 < j1's 0.5), then j1's two (0.5, 0.6 against j2's 0.2 and j3's 0.1)
    assert [g.id for g in in_order(rt, view, queue, {"cpu": 100.0})] == ["g004", "g002", "g003", "g000", "g001"]
