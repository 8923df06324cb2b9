"""`events.views`: msgspec views of the gang events. Whenever `read_envelope` gives a view, pydantic
must accept the same bytes and build a model of equal values (`view.to_model() == decode(data)`),
for valid envelopes of every shape and for mutated ones; whatever pydantic refuses, reading refuses
with pydantic's error; and what folds or projects a view must come out as it does from the model."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import Field, ValidationError

from bench.workload import Workload, config_events, envelope, gang_event
from events import (
    ClockTicked,
    DecodeError,
    EntitlementsComputed,
    Envelope,
    Event,
    GangAdmitted,
    GangEnqueued,
    GangMovedToQueue,
    PoolEntitlement,
    TaskSpec,
    decode,
    decode_all,
    encode,
    encode_pack,
    event_class,
    read_envelope,
    with_views,
)
from events import views as views_module
from events.inputs import GangCancelled, TaskStateChanged
from events.views import (
    VIEWS,
    EntitlementsComputedView,
    EnvelopeView,
    GangAdmittedView,
    GangEnqueuedView,
    GangMovedToQueueView,
    TaskEnvelopeView,
    TaskSpecView,
    TaskStateChangedView,
    as_model,
    view_body,
    view_of,
)
from projections.event_log import body

PoolEntitlementView = VIEWS[PoolEntitlement]

TIME = datetime(2026, 1, 1, 12, 0, 0, 250000, tzinfo=UTC)


def read(data: bytes, tasks: bool = True) -> Any:
    """`read_envelope(data, tasks)` typed as what it gives: a view or a model. (`read_envelope`
    says `Envelope`: the readers of the log read both alike; these tests tell them apart.)"""
    return read_envelope(data, tasks)


def is_a(value: object, cls: type, exactly: bool = False) -> bool:
    """`isinstance(value, cls)` (`exactly`: `type(value) is cls`) without narrowing `value`'s static
    type to `_View`, whose attributes are its model's, read at run time."""
    return type(value) is cls if exactly else isinstance(value, cls)


def _decoded_or_error(data: bytes) -> Envelope | DecodeError:
    try:
        return decode(data)
    except DecodeError as exc:
        return exc


def _read_or_error(data: bytes) -> Envelope | DecodeError:
    try:
        return read_envelope(data)  # (views of the gang events and of task reports)
    except DecodeError as exc:
        return exc


def _same_as_pydantic(data: bytes) -> bool:
    """Reading `data` gives what pydantic gives: a view of equal values, the model itself, or the
    same refusal. Returns whether a view was given."""
    expected = _decoded_or_error(data)
    found = _read_or_error(data)
    if isinstance(expected, DecodeError):
        assert isinstance(found, DecodeError), f"a view of what pydantic refuses: {data!r}"
        assert (found.field, found.rule, found.message) == (expected.field, expected.rule, expected.message)
        return False
    assert not isinstance(found, DecodeError), f"refused what pydantic reads: {data!r}"
    if not isinstance(found, EnvelopeView):
        assert found == expected
        return False
    assert found.to_model() == expected, data
    # attribute by attribute, as the folds read them
    for name in Envelope.model_fields:
        if name != "event":
            assert getattr(found, name) == getattr(expected, name), name
    assert found.type == expected.type and found.seconds == expected.seconds
    for name in type(expected.event).model_fields:
        value, wanted = getattr(found.event, name), getattr(expected.event, name)
        if name == "tasks":
            assert [(t.id, t.resources) for t in value] == [(t.id, t.resources) for t in wanted]
        elif name == "pools":
            assert [type(p) for p in value] == [PoolEntitlementView] * len(wanted)
            for pool, model in zip(value, wanted, strict=True):
                for field in PoolEntitlement.model_fields:
                    assert getattr(pool, field) == getattr(model, field), field
                    assert type(getattr(pool, field)) is type(getattr(model, field)), field
        else:
            assert value == wanted and type(value) is type(wanted), name
    assert event_class(found.event) is type(expected.event)
    fast = view_body(found.event)
    assert fast is None or fast == body(expected.event).encode()
    return True


# --- valid envelopes ---------------------------------------------------------------------------------

ids = st.text(min_size=1, max_size=12)
# (a view holds floats below 1e16 only: test_floats_msgspec_writes_otherwise_are_read_by_pydantic)
amounts = st.floats(min_value=0, max_value=1e16, exclude_max=True) | st.integers(0, 10**6).map(float)
specs = st.builds(TaskSpec, id=ids, resources=st.dictionaries(st.text(max_size=6), amounts, max_size=4))
ints = st.integers(-(2**63), 2**63 - 1)
enqueued = st.builds(
    GangEnqueued, tree=st.text(max_size=8), gang=ids, pool=st.text(max_size=10), job=st.text(max_size=6),
    user=st.text(max_size=6), size=st.integers(1, 2**62), priority=ints, preemptible=st.booleans(),
    revocable=st.booleans(), controller=st.booleans(),
    timeout=st.none() | st.floats(min_value=0, max_value=1e16, exclude_max=True),
    tasks=st.lists(specs, min_size=1, max_size=3))
admitted = st.builds(GangAdmitted, tree=st.text(max_size=8), gang=st.text(max_size=8), pool=st.text(max_size=8),
                     queue=st.text(max_size=8), tasks=st.lists(specs, max_size=3), attempt=ints)
moved = st.builds(GangMovedToQueue, tree=st.text(max_size=8), gang=st.text(max_size=8), pool=st.text(max_size=8),
                  queue=st.sampled_from(["non_preemptible", "controller", "revocable", "pending"]),
                  reason=st.text(max_size=20))
times = st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30),
                     timezones=st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30)),
                                                timezone(timedelta(hours=-8))]))
finite = (st.floats(min_value=-1e16, max_value=1e16, exclude_min=True, exclude_max=True)
          | st.integers(-10**6, 10**6).map(float))
vectors = st.dictionaries(st.text(max_size=6), finite, max_size=3)
pools = st.builds(PoolEntitlement, path=st.text(max_size=10), entitlement=vectors, non_slack_entitlement=vectors,
                  slack_entitlement=vectors, fair_share=finite, usage_share=finite, demand_share=finite,
                  dominant_kind=st.none() | st.text(max_size=6))
computed = st.builds(EntitlementsComputed, tree=st.text(max_size=8), capacity=vectors, slack_capacity=vectors,
                     pools=st.lists(pools, max_size=3), alerts=st.lists(st.text(max_size=12), max_size=2))
TASK_STATES = ["pending", "ready", "placing", "placed", "launching", "running", "succeeded", "failed", "killed",
               "lost", "preempted"]
reported = st.builds(TaskStateChanged, tree=st.text(max_size=8), gang=st.text(max_size=8), task=st.text(max_size=8),
                     state=st.sampled_from(TASK_STATES), message=st.none() | st.text(max_size=20))
envelopes = st.builds(Envelope, id=st.text(min_size=1, max_size=40), time=times, source=st.text(max_size=10),
                      causation=st.none() | st.text(max_size=8), basis=st.none() | ints,
                      trace=st.none() | st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=2),
                      event=enqueued | admitted | moved | computed | reported)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(envelopes)
def test_a_valid_gang_envelope_reads_as_a_view_of_the_model_pydantic_reads(env: Envelope) -> None:
    data = encode(env)
    assert _same_as_pydantic(data)
    assert read(data).to_model() == env
    if isinstance(env.event, TaskStateChanged):  # asked for, a task report is pydantic's model
        assert type(read(data, tasks=False)) is Envelope and read(data, tasks=False) == env
    else:
        assert read(data, tasks=False).to_model() == env


def test_the_bench_workload_reads_as_views_with_one_time_per_pack() -> None:
    w = Workload(leaves=10)
    parts = [encode(envelope(gang_event(w, i), f"id{i}", 1_767_225_600.5, source="sdk:bench")) for i in range(50)]
    views: list[Any] = decode_all(encode_pack(parts), read_envelope)
    assert [type(e) for e in views] == [TaskEnvelopeView] * 50  # (an `EnvelopeView`: task reports may be read too)
    without_tasks: list[Any] = decode_all(encode_pack(parts), lambda d: read_envelope(d, tasks=False))
    assert [type(e) for e in without_tasks] == [EnvelopeView] * 50
    assert len({id(e.time) for e in views}) == 1  # the pack's events share one datetime
    assert [e.to_model() for e in views] == decode_all(encode_pack(parts))
    assert views[7].event.tasks[1].resources == {"cpu": 1.0, "memory": 4.0}
    assert views[7].seconds == 1_767_225_600.5


def test_other_events_are_pydantic_models() -> None:
    for event in (ClockTicked(tree="t"), GangCancelled(gang="g")):
        data = encode(Envelope(id="x", time=TIME, event=event))
        for found in (read_envelope(data), read_envelope(data, tasks=True)):
            assert type(found) is Envelope and found == decode(data)


def test_a_task_report_is_a_view_unless_asked_for_the_model() -> None:
    from events.views import read_with_tasks

    for message in (None, "lost its host", ""):
        event = TaskStateChanged(tree="t", gang="g", task="g/0", state="running", message=message)
        data = encode(Envelope(id="x", time=TIME, source="executor", event=event))
        assert type(read(data, tasks=False)) is Envelope
        assert type(read(data)) is TaskEnvelopeView
        view: Any = read_with_tasks(data)
        assert is_a(view, TaskEnvelopeView, exactly=True) and is_a(view.event, TaskStateChangedView, exactly=True)
        assert is_a(view, EnvelopeView) and view.to_model() == decode(data)
        assert event_class(view.event) is TaskStateChanged and view.type == "TaskStateChanged"
        assert view_body(view.event) == body(event).encode() == event.model_dump_json(exclude_none=True).encode()
        assert view.event.model_dump_json() == event.model_dump_json()
        assert encode(view) == data


# --- mutated envelopes: a view only where pydantic reads the same values ------------------------------

ODD_VALUES: list[Any] = [None, "", "1", "x", 0, 1, -1, 2, 1.0, 2.5, -0.0, 1e300, True, False, [], {}, [1], {"a": 1},
                         2**63, 2**64 + 1, -(2**63) - 1, 10**30, "2026-01-01T00:00:00Z", "pending", "GangEnqueued"]


def _mutants(value: Any, rng: random.Random) -> list[Any]:
    """Copies of the JSON value `value` with one thing changed somewhere in it."""
    out: list[Any] = []
    if isinstance(value, dict):
        for key in list(value):
            for _ in range(2):
                changed = dict(value)
                changed[key] = rng.choice(ODD_VALUES)
                out.append(changed)
            dropped = dict(value)
            del dropped[key]
            out.append(dropped)
            out += [{**value, key: inner} for inner in _mutants(value[key], rng)]
        out.append({**value, "unknown": 1})
    elif isinstance(value, list):
        if value:
            out.append(value[1:])
            out += [[inner, *value[1:]] for inner in _mutants(value[0], rng)]
        out.append([*value, rng.choice(ODD_VALUES)])
    return out


def _samples() -> list[dict[str, Any]]:
    tasks = [TaskSpec(id="t0", resources={"cpu": 1.5, "gpu": 0.0}), TaskSpec(id="t1", resources={})]
    events = [GangEnqueued(gang="g", pool="/a", job="j", size=3, timeout=30.0, tasks=tasks),
              GangEnqueued(tree="t", gang="g", pool="/a", job="j", user="u", size=1, priority=-5, tasks=tasks[:1]),
              GangAdmitted(tree="t", gang="g", pool="/a", queue="pending", tasks=tasks, attempt=2),
              GangAdmitted(tree="t", gang="g", pool="/a", queue="pending", tasks=[]),
              GangMovedToQueue(tree="t", gang="g", pool="/a", queue="controller", reason="why"),
              TaskStateChanged(tree="t", gang="g", task="g/0", state="running"),
              TaskStateChanged(gang="g", task="g/1", state="lost", message="host gone"),
              EntitlementsComputed(tree="t", capacity={"cpu": 8.0, "gpu": 1.0}, slack_capacity={"cpu": 2.0},
                                   pools=[PoolEntitlement(path="/a", entitlement={"cpu": 4.5},
                                                          non_slack_entitlement={"cpu": 4.0},
                                                          slack_entitlement={"cpu": 0.5}, fair_share=0.5,
                                                          usage_share=0.25, demand_share=1.0, dominant_kind="cpu"),
                                          PoolEntitlement(path="/b", entitlement={}, non_slack_entitlement={},
                                                          slack_entitlement={})],
                                   alerts=["over"])]
    return [json.loads(encode(Envelope(id="e", time=TIME, source="s", causation="c", basis=4, trace={"a": "b"},
                                       event=e))) for e in events]


def test_mutated_envelopes_read_as_pydantic_reads_them() -> None:
    rng = random.Random(7)
    views = refusals = 0
    for sample in _samples():
        for mutant in _mutants(sample, rng):
            data = json.dumps(mutant).encode()
            if _same_as_pydantic(data):
                views += 1
            elif isinstance(_decoded_or_error(data), DecodeError):
                refusals += 1
    assert views > 90 and refusals > 250, (views, refusals)  # both sides of the line were walked


@pytest.mark.parametrize("text", [
    '"2026-01-01T00:00:00.1234567Z"',  # pydantic truncates a 7th decimal, msgspec would round
    '"2026-01-01T00:00:00.9999999Z"', '"2026-01-01T00:00Z"', '"2026-01-01T00:00:00,5Z"', '"2026-01-01 00:00:00Z"',
    '"2026-01-01t00:00:00z"', '"2026-01-01T00:00:00"', '"2026-02-30T00:00:00Z"', '"2026-01-01T00:00:60Z"',
    '"2026-01-01T00:00:00+05:30"', '"2026-01-01T00:00:00-00:00"', '"2026-01-01T00:00:00+23:59"', "1767225600",
    '"2026-01-01T00:00:00.000001Z"', '"2026-01-01T00:00:00.5Z"', '"0001-01-01T00:00:00Z"',
    '"2026-01-01T00:00:00+05:99"', '"2026-01-01T00:00:00+05:60"', '"2026-01-01T00:00:00-24:00"'])
def test_times_read_as_pydantic_reads_them(text: str) -> None:
    data = ('{"id":"e","time":' + text + ',"event":{"type":"GangMovedToQueue","tree":"t","gang":"g","pool":"/a",'
            '"queue":"pending","reason":"r"}}').encode()
    _same_as_pydantic(data)


@pytest.mark.parametrize("raw", [
    b'"gang":"a","gang":"b"',  # duplicate keys: the last, in both
    b'"gang":"\\ud800"',  # a lone surrogate
    b'"gang":"\\u0067"',
    b'"size":1e999', b'"size":2.0', b'"size":"2"', b'"size":true', b'"size":18446744073709551616',
    b'"timeout":1e999', b'"timeout":-0.0', b'"timeout":1e16', b'"timeout":NaN', b'"timeout":Infinity',
    b'"priority":-9223372036854775809', b'"preemptible":1', b'"version":1.0', b'"version":2',
])
def test_odd_json_reads_as_pydantic_reads_it(raw: bytes) -> None:
    head = b'{"id":"e","time":"2026-01-01T00:00:00Z","event":{"type":"GangEnqueued","pool":"/a","job":"j",'
    tail = b',"tasks":[{"id":"t","resources":{"cpu":1e17}}]}}'
    fields = {b'"gang"': b'"gang":"g"', b'"size"': b'"size":1'}
    body_ = b",".join([raw, *(v for k, v in fields.items() if not raw.startswith(k))])
    _same_as_pydantic(head + body_ + tail)


@pytest.mark.parametrize("raw", [
    b'"state":"bogus"', b'"state":"Running"', b'"state":null', b'"state":1', b'"message":1', b'"message":null',
    b'"message":""', b'"task":null', b'"task":""', b'"gang":7', b'"tree":null', b'"version":1.0', b'"version":2',
    b'"version":"1"', b'"task":"a","task":"b"', b'"task":"\\ud800"', b'"extra":1',
])
def test_odd_task_reports_read_as_pydantic_reads_them(raw: bytes) -> None:
    fields = {b'"gang"': b'"gang":"g"', b'"task"': b'"task":"g/0"', b'"state"': b'"state":"running"'}
    body_ = b",".join([raw, *(v for k, v in fields.items() if not raw.startswith(k))])
    _same_as_pydantic(b'{"id":"e","time":"2026-01-01T00:00:00Z","event":{"type":"TaskStateChanged",' + body_ + b"}}")


@pytest.mark.parametrize("raw", [
    b'"fair_share":1e999', b'"fair_share":-1e999', b'"fair_share":"0.5"', b'"fair_share":true', b'"fair_share":1',
    b'"fair_share":NaN', b'"fair_share":2e16', b'"dominant_kind":null', b'"dominant_kind":1',
    b'"entitlement":{"cpu":-1.5}', b'"entitlement":{"cpu":"1"}', b'"entitlement":{"cpu":1e999}',
    b'"entitlement":{"cpu":123456789012345678}', b'"path":"/l1e2"', b'"path":null',
])
def test_odd_entitlements_read_as_pydantic_reads_them(raw: bytes) -> None:
    fields = {b'"path"': b'"path":"/a"', b'"entitlement"': b'"entitlement":{"cpu":1.0}',
              b'"fair_share"': b'"fair_share":0.5'}
    pool = b",".join([raw, *(v for k, v in fields.items() if not raw.startswith(k))])
    data = (b'{"id":"e","time":"2026-01-01T00:00:00Z","event":{"type":"EntitlementsComputed","tree":"t",'
            b'"capacity":{"cpu":2.0},"pools":[{' + pool + b',"non_slack_entitlement":{},"slack_entitlement":{}}]}}')
    _same_as_pydantic(data)


def test_entitlements_are_written_as_pydantic_writes_them() -> None:
    pools = [PoolEntitlement(path="/a", entitlement={"cpu": 1.5}, non_slack_entitlement={}, slack_entitlement={}),
             PoolEntitlement(path="/b", entitlement={}, non_slack_entitlement={}, slack_entitlement={},
                             dominant_kind="cpu")]
    for event in [EntitlementsComputed(tree="t", capacity={"cpu": 2.0}, pools=pools),
                  EntitlementsComputed(tree="t,1e2", capacity={"cpu": 2.0}, pools=pools),  # a name like a number
                  EntitlementsComputed(tree="t1e2", capacity={"cpu": 1e15}, pools=pools)]:
        view = read(encode(Envelope(id="e", time=TIME, event=event)))
        assert is_a(view, EnvelopeView) and is_a(view.event, EntitlementsComputedView, exactly=True)
        assert view_body(view.event) is not None
        assert body(view.event) == body(event) == event.model_dump_json(exclude_none=True)
        assert '"dominant_kind":null' not in body(view.event) and '"dominant_kind":"cpu"' in body(view.event)
        assert encode(view) == encode(Envelope(id="e", time=TIME, event=event))


@pytest.mark.parametrize("amount", [1e16, 2e16, -1e16, 1.7976931348623157e308])
def test_floats_msgspec_writes_otherwise_are_read_by_pydantic(amount: float) -> None:
    """A view holds only floats both write alike (below 1e16: pydantic writes 1e+16, msgspec 1e16)."""
    events: list[Event] = [
        GangEnqueued(gang="g", pool="/a", job="j", size=1, tasks=[TaskSpec(id="t", resources={"mem": abs(amount)})]),
        EntitlementsComputed(tree="t", capacity={"cpu": amount}, pools=[]),
        GangEnqueued(gang="g", pool="/a", job="j", size=1, timeout=abs(amount), tasks=[TaskSpec(id="t",
                                                                                          resources={})]),
    ]
    for event in events:
        found = read_envelope(encode(Envelope(id="e", time=TIME, event=event)))
        assert type(found) is Envelope and found.event == event
        assert body(found.event) == event.model_dump_json(exclude_none=True)
    below = GangEnqueued(gang="g", pool="/a", job="j", size=1, tasks=[TaskSpec(id="t", resources={"m": 9.9e15})])
    assert isinstance(read_envelope(encode(Envelope(id="e", time=TIME, event=below))), EnvelopeView)


def test_views_off_reads_pydantic_models(monkeypatch: pytest.MonkeyPatch) -> None:
    data = encode(Envelope(id="e", time=TIME, event=GangMovedToQueue(tree="t", gang="g", pool="/a", queue="pending",
                                                                       reason="r")))
    assert isinstance(read_envelope(data), EnvelopeView)
    monkeypatch.setattr(views_module, "ENABLED", False)
    assert type(read_envelope(data)) is Envelope


# --- what the rest of poolwise needs of a view -----------------------------------------------------------

def test_tables_keyed_by_model_find_views_and_task_views_become_specs() -> None:
    table: dict[Any, str] = with_views({GangEnqueued: "enq", ClockTicked: "tick"})
    assert table[GangEnqueuedView] == "enq" and table[ClockTicked] == "tick" and GangAdmittedView not in table
    view = TaskSpecView(id="t", resources={"cpu": 2.0})
    spec: object = as_model(view)
    assert type(spec) is TaskSpec and spec == TaskSpec(id="t", resources={"cpu": 2.0})
    assert spec.model_dump_json() == '{"id":"t","resources":{"cpu":2.0}}'
    assert as_model(spec) is spec
    assert event_class(ClockTicked()) is ClockTicked
    moved: Any = GangMovedToQueueView(tree="t", gang="g", pool="/a", queue="pending", reason="r")
    assert event_class(moved) is GangMovedToQueue and moved.type == "GangMovedToQueue"


def test_a_field_added_to_a_model_is_in_its_view_with_no_other_edit() -> None:
    """A view is derived from its model alone: a model with one more optional field (here a
    throwaway copy of `GangMovedToQueue`) gets a view that reads it, with its default and its
    constraint, and writes its body as pydantic does."""
    class Wider(GangMovedToQueue):
        note: str | None = Field(default=None, min_length=2)
        weight: float = Field(default=1.0, ge=0)

    view = view_of(Wider)
    assert view.__struct_fields__ == (*GangMovedToQueueView.__struct_fields__, "note", "weight")
    decoder = msgspec.json.Decoder(view)
    for event in (Wider(tree="t", gang="g", pool="/a", queue="pending", reason="r"),
                  Wider(tree="t", gang="g", pool="/a", queue="pending", reason="r", note="hi", weight=2.5)):
        data = event.model_dump_json(exclude_none=True).encode()
        found = decoder.decode(data)
        assert (found.note, found.weight) == (event.note, event.weight)  # type: ignore[attr-defined]
        assert found.to_model() == event
        assert msgspec.json.encode(found).replace(b',"note":null', b"") == data
    for refused in (b'"note":"x"', b'"weight":-1.0', b'"weight":1e999', b'"other":1'):
        data = b'{"type":"GangMovedToQueue","tree":"t","gang":"g","pool":"/a","queue":"pending","reason":"r",' \
            + refused + b"}"
        with pytest.raises(msgspec.ValidationError):
            decoder.decode(data)
        with pytest.raises(ValidationError):
            Wider.model_validate_json(data)


def _log(w: Workload) -> list[bytes]:
    """A log as the services write it: config, then rounds of an enqueue pack (with refused gangs
    in it), a tick, and the cycle's decisions (packed as `services.common.packs` packs them)."""
    from services.admission.domain.decide import decide_tree
    from services.admission.domain.state import AdmissionState
    from services.admission.envelopes import decision_envelope
    from services.common.packs import outgoing

    state = AdmissionState()
    out: list[bytes] = []

    def add(data: bytes) -> None:
        out.append(data)
        for env in decode_all(data):
            state.apply(env.event, len(out), env.seconds)

    for i, event in enumerate(config_events(w)):
        add(encode(envelope(event, f"c{i}", 1_767_225_600.0, source="tree")))
    for r in range(4):
        now = 1_767_225_601.0 + r
        events: list[Any] = [gang_event(w, r * 60 + i) for i in range(60)]
        events.append(GangEnqueued(tree=w.tree, gang=f"bad{r}", pool=w.leaf(0), job="j", size=1,
                                   tasks=[TaskSpec(id=f"bad{r}.0", resources={"tpu": 1.0})]))  # unknown kind
        add(encode_pack([encode(envelope(e, f"g{r}.{i}", now, source="sdk")) for i, e in enumerate(events)]))
        add(encode(envelope(ClockTicked(tree=w.tree), f"t{r}", now, source="admission:clock")))
        tick = len(out)
        assert state.take_due() == [w.tree]
        decisions = [decision_envelope("admission", o.event, o.key, tick, "tick", env_time(now))
                     for o in decide_tree(state, w.tree, tick)]
        for message in outgoing(decisions, lambda e: "poolwise.decision", encode):
            add(message.data)
    return out


def env_time(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)


def test_folding_views_decides_as_folding_models() -> None:
    """Admission (its fold, refusals and cycles) and preemption fold the same log read both ways:
    the same announcements, cycles, passes and gang states."""
    from services.admission.domain.decide import decide_tree
    from services.admission.domain.state import AdmissionState
    from services.preemption.domain.state import PreemptionState

    w = Workload(gangs=240, leaves=8, fill=0.6)
    log = _log(w)

    def fold(reader: Any) -> tuple[list[str], list[str], list[str], list[Any]]:
        admission, preemption = AdmissionState(), PreemptionState()
        announced: list[str] = []
        cycles: list[str] = []
        passes: list[str] = []
        for seq, data in enumerate(log, start=1):
            for env in decode_all(data, reader):
                announced += [o.event.model_dump_json() for o in admission.apply(env.event, seq, env.seconds)]
                passes += [o.event.model_dump_json() for o in preemption.apply(env.event, seq, env.seconds)]
                cycles += [o.event.model_dump_json() for tree in admission.take_due()
                           for o in decide_tree(admission, tree, seq)]
        gangs = sorted((g.id, g.state, g.attempt, [t.state for t in g.tasks])
                       for g in admission.runtime(w.tree).gangs.values())
        return announced, cycles, passes, gangs

    by_models = fold(decode)
    by_views = fold(read_envelope)
    assert by_views == by_models
    announced, cycles, passes, gangs = by_views
    assert sum('"rule":"unknown_kind"' in a for a in announced) == 4  # a refusal quotes a view's model
    assert sum('"type":"GangAdmitted"' in c for c in cycles) > 50 and passes
    assert {state for _, state, _, _ in gangs} >= {"admitted", "pending", "rejected"}


# --- a pack read at once (events.read_pack) is read as its parts are --------------------------------

def _all_or_error(data: bytes, whole: bool) -> list[Any] | tuple[str | None, str, str]:
    from events import read_pack

    try:
        read = decode_all(data, read_envelope, read_pack if whole else None)
    except DecodeError as exc:
        return (exc.field, exc.rule, exc.message)
    return [as_model(e) if isinstance(e, EnvelopeView) else e for e in read]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.builds(Envelope, id=st.text(min_size=1, max_size=20), time=times, source=st.text(max_size=6),
                          basis=st.none() | ints, event=enqueued | admitted | moved), min_size=2, max_size=5))
def test_a_pack_read_at_once_is_read_as_its_parts(envs: list[Envelope]) -> None:
    from events import read_pack

    data = encode_pack([encode(e) for e in envs])
    assert read_pack(data) is not None
    assert _all_or_error(data, True) == _all_or_error(data, False) == envs


def test_odd_packs_read_at_once_are_read_as_their_parts() -> None:
    from events import read_pack

    rng = random.Random(11)
    parts = [encode(Envelope(id=f"e{i}", time=TIME, event=e)) for i, e in enumerate([
        GangMovedToQueue(tree="t", gang="g", pool="/a", queue="pending", reason="r"),
        GangAdmitted(tree="t", gang="g", pool="/a", queue="pending", tasks=[TaskSpec(id="t0", resources={})]),
        EntitlementsComputed(tree="t", capacity={}, pools=[])])]
    packs = [encode_pack(parts[:2]), encode_pack(parts), encode_pack(parts[1:]), b"[]", b"[ " + parts[0] + b" ]",
             b"[" + parts[0] + b", " + parts[1] + b"]", encode_pack([parts[0], b'{"id":"x"}'])]
    whole = 0
    for sample in [json.loads(parts[0]), json.loads(parts[1])]:
        for mutant in _mutants(sample, rng):
            packs.append(encode_pack([parts[0], json.dumps(mutant).encode()]))
    for data in packs:
        if read_pack(data) is not None:
            whole += 1
        assert _all_or_error(data, True) == _all_or_error(data, False), data
    assert whole > 10  # some of them were read at once (and the others part by part: refused or models)
    assert read_pack(encode_pack(parts)) is None  # an EntitlementsComputed may not be packed: refused part by part
    assert read_pack(b"[]") is None


def test_shared_decodes_read_a_pack_at_once_unless_its_parts_are_shared() -> None:
    from services.common.decodes import SharedDecodes

    mine = [Envelope(id=f"m{i}", time=TIME, event=GangMovedToQueue(tree="t", gang=f"g{i}", pool="/a",
                                                                    queue="pending", reason="r")) for i in range(3)]
    theirs = encode_pack([encode(Envelope(id=f"t{i}", time=TIME, event=e.event)) for i, e in enumerate(mine)])
    shared = SharedDecodes()
    with shared.user():
        own = encode_pack([shared.encode(e) for e in mine])  # this process wrote it: its parts are taken back
        assert shared.decode_pack(own) is None
        assert [shared.decode(p) for p in own[1:-1].split(b",\n")] == mine
        read = shared.decode_pack(theirs)
        assert read is not None and [as_model(e) for e in read] == decode_all(theirs)
        with shared.user():  # two folders in this process: each part is kept for the other
            assert shared.decode_pack(theirs) is None


def test_folding_task_report_views_decides_as_folding_models() -> None:
    """Admission and preemption fold a whole-lifecycle log (four task reports a gang) and odd task
    reports (a task nobody knows, a transition the rules refuse, a forgotten-free late report)
    read as views (`read_with_tasks`) and as models: the same decisions, refusals quoting the same."""
    import anyio

    from events.views import read_with_tasks
    from services.admission.folder import AdmissionFolder
    from services.common.folding import fold_batch
    from services.common.log import Stored
    from services.common.memlog import MemoryLog
    from services.preemption.folder import PreemptionFolder
    from tests.replay.biglog import TREE, build

    async def make() -> list[Stored]:
        log = MemoryLog()
        await build(log, 40, per_round=10, leaves=3)
        odd = [TaskStateChanged(tree=TREE, gang="g1", task="nobody", state="running"),
               TaskStateChanged(tree=TREE, gang="g1", task="g1.0", state="pending", message="back?"),
               TaskStateChanged(tree=TREE, gang="g39", task="g39.1", state="failed", message="oom"),
               TaskStateChanged(tree="elsewhere", gang="g", task="t", state="running")]
        await log.append([Envelope(id=f"odd{i}", time=TIME, source="executor", event=e) for i, e in enumerate(odd)])
        return await log.read(1)

    messages = anyio.run(make, backend="asyncio")
    read_back: list[Any] = [e for m in messages for e in decode_all(m.data, read_with_tasks)]
    assert sum(1 for e in read_back if type(e) is TaskEnvelopeView) > 150

    def fold(reader: Any) -> list[bytes]:
        out: list[bytes] = []
        for folder in (AdmissionFolder(), PreemptionFolder()):
            out += [encode(d) for d in fold_batch(folder, messages, 0, reader).decisions]
        return out

    by_models, by_views = fold(decode), fold(read_with_tasks)
    assert by_views == by_models
    assert sum(b'"type":"InputRejected"' in d for d in by_views) >= 3
    assert any(b"back?" in d for d in by_views)  # a refusal quotes the view's model


def test_every_view_pickles_by_name() -> None:
    """Snapshots pickle the folds' state, views in it: each view class is found by its name."""
    import pickle

    for view in (*VIEWS.values(), TaskEnvelopeView):
        assert pickle.loads(pickle.dumps(view)) is view


def test_every_event_view_has_its_body_written_by_view_body() -> None:
    """`projections.event_log.body` writes a view's event with `view_body` and never needs its
    model: every event view is one `view_body` writes (its nulls known), holding only floats
    both writers write alike."""
    events = [model for model in views_module.VIEWS if views_module._tag(model) is not None]
    assert events
    assert all(views_module.VIEWS[model] in views_module._BODIES for model in events)
