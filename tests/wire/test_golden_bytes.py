"""The bytes of every event type, as the log holds them, do not change.

The log's content and the decisions' ids depend on them: `golden_envelopes.txt` holds each
example's encoding as written by the code before the fast paths were derived from the models
(issue 22). Each is checked three ways: `events.encode` (the fast path where it writes the
event), pydantic's own `model_dump_json`, and the body a view of it writes (`view_body`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

from events import (
    EVENT_TYPES,
    ClockTicked,
    CycleCompleted,
    EntitlementsComputed,
    Envelope,
    Event,
    GangAdmitted,
    GangCancelled,
    GangEnqueued,
    GangFinished,
    GangMovedToQueue,
    GangRequeued,
    GangTimedOut,
    HostRegistered,
    HostRemoved,
    InputRejected,
    PoolConfig,
    PoolConfigChanged,
    PoolDeleted,
    PoolEntitlement,
    PoolStarvationChanged,
    PreemptionRequested,
    TaskSpec,
    TaskStateChanged,
    TreeConfigured,
    TreeOptions,
    encode,
    read_envelope,
)
from events.decisions import LendingFactor, LentPool
from events.fastencode import encode_event_body
from events.views import view_body

GOLDEN = Path(__file__).with_name("golden_envelopes.txt")
T0 = datetime(2026, 1, 1, 12, 0, 0, 250000, tzinfo=UTC)
T1 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone(timedelta(hours=5, minutes=30)))
TEXT = "t\u00e9\u2028\U0001f600\"\\/<&>"


def examples() -> list[Envelope]:
    """Envelopes of every event type: fields at their defaults, every optional field set, odd text
    and numbers (imports only `events`: it runs against older code to write the golden file)."""
    tasks = [TaskSpec(id="g.0", resources={"cpu": 1.0, "memory": 4.5e9}), TaskSpec(id=TEXT, resources={})]
    pools = [PoolEntitlement(path="/a", entitlement={"cpu": 1.5}, non_slack_entitlement={"cpu": 1.5},
                             slack_entitlement={}),
             PoolEntitlement(path="/a/b", entitlement={"cpu": 0.1, "gpu": 1e-7}, non_slack_entitlement={},
                             slack_entitlement={"gpu": 2.0}, fair_share=0.25, usage_share=1e15, demand_share=-0.0,
                             dominant_kind="gpu")]
    events: list[Event] = [
        TreeConfigured(tree="t", options=TreeOptions()),
        TreeConfigured(tree="t", options=TreeOptions(policy="hdrf", gang_retention=None, max_tasks_per_gang=7)),
        PoolConfigChanged(tree="t", path="/a", config=PoolConfig(reservation={"cpu": 2.0}, share=1.5), created=True),
        PoolConfigChanged(tree="t", path="/a", config=PoolConfig(share={"cpu": 2.0}, fifo_sort=["arrival"])),
        PoolDeleted(tree="t", path="/a"),
        HostRegistered(host="h1", resources={"cpu": 100.0, "memory": 1e12}),
        HostRegistered(host="h2", resources={"cpu": 1.0}, revocable={"cpu": 0.5}, tags=["gpu", TEXT]),
        HostRemoved(host="h1"),
        GangEnqueued(gang="g", pool="/a", job="j", size=2, tasks=tasks),
        GangEnqueued(tree="t", gang=TEXT, pool="/a", job="j", user="u", size=2**40, priority=-3, preemptible=False,
                     revocable=True, controller=True, timeout=30.5, tasks=tasks),
        GangEnqueued(gang="g", pool="/a", job="j", size=1, timeout=2e16, tasks=[TaskSpec(id="x",
                                                                                         resources={"m": 3e20})]),
        TaskStateChanged(gang="g", task="g.0", state="running"),
        TaskStateChanged(tree="t", gang="g", task="g.0", state="failed", message=TEXT),
        GangCancelled(gang="g"),
        GangCancelled(tree="t", gang="g", reason="user"),
        ClockTicked(),
        ClockTicked(tree="t"),
        EntitlementsComputed(tree="t", capacity={"cpu": 4.0}, pools=pools),
        EntitlementsComputed(tree="t", capacity={"cpu": 4.0, "gpu": 2.0}, slack_capacity={"gpu": 1.0}, pools=pools,
                             alerts=["a"], removed=["/x"], replace=False, part=2, parts=3,
                             factors=[LendingFactor(group="/", factor={"cpu": 0.5})],
                             lent=[LentPool(path="/a", given={"cpu": 1.0}, share={"cpu": 2.0}),
                                   LentPool(path="/a/b", given={"cpu": 1.0}, share={"cpu": 2.0},
                                            limit={"cpu": 3.0})]),
        CycleCompleted(tree="t", service="admission", trigger_seq=12),
        CycleCompleted(tree="t", service="preemption", trigger_seq=2**63, decisions=4),
        GangAdmitted(tree="t", gang="g", pool="/a", queue="pending", tasks=tasks),
        GangAdmitted(tree="t", gang="g", pool="/a", queue="pending", tasks=tasks, attempt=3),
        GangFinished(tree="t", gang="g", pool="/a", outcome="timed_out"),
        GangMovedToQueue(tree="t", gang="g", pool="/a", queue="non_preemptible", reason=TEXT),
        GangTimedOut(tree="t", gang="g", pool="/a", members=1, size=2, deadline=1.7e9),
        GangRequeued(tree="t", gang="g", pool="/a", reason="r"),
        GangRequeued(tree="t", gang="g", pool="/a", reason="r", cause="preempted"),
        PreemptionRequested(tree="t", pool="/a", gang="g", tasks=["g.0"], reason="over"),
        PreemptionRequested(tree="t", pool="/a", gang="g", tasks=[], reason="over", excess={"cpu": 1.0},
                            entitlement={"cpu": 2.0}, allocation={"cpu": 3.0}, grace_period=0.0),
        PoolStarvationChanged(tree="t", pool="/a", status="starving", since=5.0),
        PoolStarvationChanged(tree="t", pool="/a", status="ok", previous="starving", since=5.0, below_since=1.0,
                              kinds=["cpu"], usage={"cpu": 1.0}, entitlement={"cpu": 2.0}, demand={"cpu": 3.0}),
        InputRejected(ref="g", input_type="GangEnqueued", reason="no", rule="unknown_pool"),
        InputRejected(tree="t", ref="g", input_type="GangEnqueued", reason=TEXT, rule="r", field="size",
                      input="{}", input_id="i", input_seq=9, input_part=2),
    ]
    out = [Envelope(id=f"e{i}", time=T0, event=event) for i, event in enumerate(events)]
    out += [Envelope(id=TEXT, time=T1, source="admission", causation="c", basis=2**64, trace={"traceparent": "p"},
                     event=event) for event in events[8:10] + events[17:19] + events[20:22]]
    return out


def test_every_event_type_has_examples() -> None:
    assert {env.type for env in examples()} == set(EVENT_TYPES)


def test_every_example_encodes_to_its_golden_bytes() -> None:
    golden = GOLDEN.read_bytes().split(b"\n")[:-1]
    made = examples()
    assert len(golden) == len(made)
    for env, expected in zip(made, golden, strict=True):
        assert encode(env) == expected, env.type
        assert env.model_dump_json(exclude_none=True).encode() == expected, env.type
        body = env.event.model_dump_json(exclude_none=True).encode()
        assert encode_event_body(env.event) in (None, body), env.type
        view = read_envelope(expected)
        read = view.to_model() if hasattr(view, "to_model") else view  # a view, or pydantic's model
        assert read.model_dump_json(exclude_none=True).encode() == expected, env.type
        assert view_body(view.event) in (None, body), env.type


if __name__ == "__main__":  # python tests/wire/test_golden_bytes.py > tests/wire/golden_envelopes.txt
    import sys

    for envelope in examples():
        sys.stdout.buffer.write(encode(envelope) + b"\n")
