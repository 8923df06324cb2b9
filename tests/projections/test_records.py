"""PreemptionsProjection and RejectionsProjection: one row per preempted task, per refused input."""

from __future__ import annotations

from pathlib import Path

from events import GangEnqueued, InputRejected, PreemptionRequested, TaskSpec
from projections import ProjectionStore
from projections.records import PreemptionsProjection, RejectionsProjection
from services.common.log import Stored
from tests.projections.make import T0, stored


def preemption(gang: str, *tasks: str) -> PreemptionRequested:
    return PreemptionRequested(tree="default", pool="/a", gang=gang, tasks=list(tasks),
                               reason="over non-slack entitlement since 2: cpu 14 held, 10 entitled",
                               excess={"cpu": 4.0}, entitlement={"cpu": 10.0}, allocation={"cpu": 14.0})


def test_one_row_per_task_a_preemption_names(tmp_path: Path) -> None:
    messages = [
        stored(1, preemption("g1", "g1/0", "g1/1"), source="preemption", basis=0),
        stored(2, GangEnqueued(gang="x", pool="/a", job="j", size=1, tasks=[TaskSpec(id="x/0", resources={})])),
        stored(3, preemption("g2", "g2/0", "g2/0"), source="preemption", basis=2),
    ]
    path = tmp_path / "tree.duckdb"
    with ProjectionStore(path, [PreemptionsProjection()]) as store:
        store.apply(messages[:2])
    with ProjectionStore(path, [PreemptionsProjection()]) as store:
        store.apply(messages)  # redelivered: only seq 3 is new
        store.apply(messages)
        _, rows = store.query("SELECT * FROM preemptions ORDER BY requested_seq, task")
    reason = "over non-slack entitlement since 2: cpu 14 held, 10 entitled"
    numbers = ({"cpu": 4.0}, {"cpu": 10.0}, {"cpu": 14.0}, "over_entitlement", None, [])  # for nobody known
    assert rows == [
        ("default", "/a", "g1", "g1/0", reason, T0.replace(second=1), 1, 5.0, *numbers),
        ("default", "/a", "g1", "g1/1", reason, T0.replace(second=1), 1, 5.0, *numbers),
        ("default", "/a", "g2", "g2/0", reason, T0.replace(second=3), 3, 5.0, *numbers),  # named twice: one row
    ]


def test_one_row_per_refused_input() -> None:
    refused = GangEnqueued(gang="g", pool="/nowhere", job="j", size=1, tasks=[TaskSpec(id="g/0", resources={})])
    messages = [
        stored(1, refused),
        stored(2, InputRejected(tree="default", ref="g", input_type="GangEnqueued", rule="pool_missing",
                                reason="gang g: pool /nowhere does not exist", input=refused.model_dump_json(),
                                input_id="ev-1", input_seq=1), source="admission", basis=1),
        stored(3, InputRejected(tree="default", ref="/a", input_type="PoolUpsert", rule="reservation_above_limit",
                                field="reservation", reason="resource cpu, reservation 50 exceeds limit 10"),
               source="tree"),
        Stored(4, "poolwise.task.default", b"\x00garbage", "m4"),
        stored(5, InputRejected(tree="default", ref="seq:4", input_type="unknown", rule="undecodable",
                                reason="not JSON", input="\x00garbage", input_seq=4), source="admission", basis=4),
    ]
    with ProjectionStore(":memory:", [RejectionsProjection()]) as store:
        store.apply(messages)
        store.apply(messages[::-1])
        _, rows = store.query("SELECT seq, tree, ref, input_type, rule, field, input_seq, input_id, source, "
                              "rejected_at FROM rejections ORDER BY seq")
        assert rows == [
            (2, "default", "g", "GangEnqueued", "pool_missing", None, 1, "ev-1", "admission", T0.replace(second=2)),
            (3, "default", "/a", "PoolUpsert", "reservation_above_limit", "reservation", None, None, "tree",
             T0.replace(second=3)),
            (5, "default", "seq:4", "unknown", "undecodable", None, 4, None, "admission", T0.replace(second=5)),
        ]
        _, rows = store.query("SELECT input FROM rejections WHERE seq = 5")
        assert rows == [("\ufffdgarbage",)]  # NUL is not stored
        _, rows = store.query("SELECT r.rule, e.reason FROM rejections r JOIN rejections e USING (seq) "
                              "WHERE r.input_seq = 1")
        assert rows == [("pool_missing", "gang g: pool /nowhere does not exist")]
