"""The admission benchmark decides every gang of a tiny workload (correctness, never timing)."""

from __future__ import annotations

from bench.admission import bench_admission, wrap_and_encode
from bench.workload import Workload, config_events, gang_event, gang_payload_size
from events import GangEnqueued, PoolConfigChanged, decode
from services.admission.domain.decide import decide_tree
from services.admission.domain.state import AdmissionState


def test_the_workload_puts_every_gang_on_a_configured_leaf() -> None:
    w = Workload(gangs=40, leaves=10, group_size=4, hosts=3)
    events = config_events(w)
    leaves = {e.path for e in events if isinstance(e, PoolConfigChanged) and e.path.count("/") == 2}
    assert leaves == set(w.leaf_paths()) and len(leaves) == 10
    gangs = [gang_event(w, i) for i in range(w.gangs)]
    assert {g.pool for g in gangs} == leaves
    assert all(isinstance(g, GangEnqueued) and len(g.tasks) == g.size == 2 for g in gangs)
    assert len({g.gang for g in gangs}) == 40
    assert gang_payload_size(w) > 200


def test_a_tight_cluster_admits_part_and_holds_the_rest() -> None:
    w = Workload(gangs=300, leaves=6, hosts=2, fill=0.5)
    speed = bench_admission(w, max_cycles=10)
    assert speed.cycles, "at least one cycle ran"
    assert 0 < speed.admitted < w.gangs
    assert speed.admitted + speed.pending_left == w.gangs  # moved gangs stay pending in another queue
    last = speed.cycles[-1]
    assert (last.admitted, last.moved) == (0, 0) or len(speed.cycles) == 10
    assert speed.fold_per_s > 0 and speed.decode_per_s > 0 and speed.wrap_encode_per_s > 0


def test_a_roomy_cluster_admits_every_gang() -> None:
    w = Workload(gangs=120, leaves=5, hosts=2, fill=2.0, non_preemptible=0.0)
    speed = bench_admission(w)
    assert speed.admitted == w.gangs and speed.pending_left == 0 and speed.moved == 0
    assert speed.overall_gangs_per_s > 0


def test_wrapped_decisions_decode_back() -> None:
    w = Workload(gangs=10, leaves=2, hosts=1, fill=2.0)
    state = AdmissionState()
    seq = 0
    for event in [*config_events(w), *(gang_event(w, i) for i in range(w.gangs))]:
        seq += 1
        state.apply(event, seq, 1.0)
    outcomes = decide_tree(state, w.tree, seq)
    encoded = wrap_and_encode(outcomes, seq, 1.0)
    types = [decode(data).type for data in encoded]
    assert types[0] == "EntitlementsComputed" and types[-1] == "CycleCompleted"
    assert types.count("GangAdmitted") == 10
