"""The wire contract: round trips, typed errors naming field and rule, upcasters."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from events import (
    CURRENT_VERSIONS,
    EVENT_TYPES,
    ClockTicked,
    DecodeError,
    DerivedIds,
    Envelope,
    GangEnqueued,
    PoolConfig,
    PoolConfigChanged,
    TaskSpec,
    at_seconds,
    decode,
    derived_id,
    encode,
    subjects,
)
from events.upcasters import upcast


def _gang(**over: Any) -> GangEnqueued:
    base: dict[str, Any] = dict(gang="g1", pool="/a", job="j1", size=2,
                                tasks=[TaskSpec(id="g1/0", resources={"cpu": 1.5}),
                                       TaskSpec(id="g1/1", resources={"cpu": 1.5})])
    base.update(over)
    return GangEnqueued(**base)


def _env(event: Any, **over: Any) -> Envelope:
    return Envelope(id=over.pop("id", "e1"), time=at_seconds(over.pop("at", 12.5)), source="test", event=event, **over)


def test_round_trip_keeps_every_field() -> None:
    env = _env(_gang(priority=7, preemptible=False, timeout=10), causation="c0", basis=41)
    back = decode(encode(env))
    assert back == env
    assert back.seconds == 12.5
    assert isinstance(back.event, GangEnqueued) and back.event.tasks[1].resources == {"cpu": 1.5}


def test_every_event_type_has_type_and_version_and_is_frozen() -> None:
    for name, cls in EVENT_TYPES.items():
        assert cls.model_fields["type"].default == name
        assert CURRENT_VERSIONS[name] >= 1
        assert cls.model_config.get("frozen") is True
        assert cls.model_config.get("extra") == "forbid"


def test_models_forbid_unknown_fields_and_mutation() -> None:
    with pytest.raises(ValidationError):
        GangEnqueued.model_validate({**_gang().model_dump(), "colour": "red"})
    gang = _gang()
    with pytest.raises(ValidationError):
        gang.pool = "/b"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("mutate", "field", "rule"),
    [
        (lambda d: d["event"]["tasks"][0]["resources"].update(cpu=-1), "event.tasks.0.resources.cpu",
         "greater_than_equal"),
        (lambda d: d["event"].update(size=0), "event.size", "greater_than_equal"),
        (lambda d: d["event"].pop("pool"), "event.pool", "missing"),
        (lambda d: d["event"].update(extra=1), "event.extra", "extra_forbidden"),
        (lambda d: d["event"].update(type="GangExploded"), "event.type", "unknown_type"),
        (lambda d: d["event"].update(version=9), "event.version", "unknown_version"),
        (lambda d: d.update(time="yesterday"), "time", "datetime_from_date_parsing"),
    ],
)
def test_malformed_events_name_field_and_rule(mutate: Any, field: str, rule: str) -> None:
    raw = json.loads(encode(_env(_gang())))
    mutate(raw)
    with pytest.raises(DecodeError) as info:
        decode(json.dumps(raw).encode())
    assert info.value.field == field
    assert info.value.rule == rule
    assert field in str(info.value)


def test_not_json_is_a_typed_error() -> None:
    with pytest.raises(DecodeError) as info:
        decode(b"\xff{not json")
    assert info.value.rule == "json"


def test_upcaster_chain_runs_to_current_version() -> None:
    table = {
        ("PoolConfigChanged", 1): lambda d: {**d, "version": 2, "note": "v2"},
        ("PoolConfigChanged", 2): lambda d: {**{k: v for k, v in d.items() if k != "note"}, "version": 3},
    }
    out = upcast({"type": "PoolConfigChanged", "version": 1, "tree": "t"}, 3, table)
    assert out == {"type": "PoolConfigChanged", "version": 3, "tree": "t"}
    with pytest.raises(KeyError, match="no upcaster from PoolConfigChanged v3"):
        upcast({"type": "PoolConfigChanged", "version": 3}, 4, table)


def test_derived_ids_are_stable_and_distinct() -> None:
    assert derived_id("admission", 41, "g1") == derived_id("admission", 41, "g1")
    assert derived_id("admission", 41, "g1") != derived_id("admission", 42, "g1")
    assert len(derived_id("x")) == 32


def test_subjects_route_each_event() -> None:
    assert subjects.for_event("GangEnqueued", "default", "sdk") == "poolwise.gang.default"
    assert subjects.for_event("HostRegistered", None, "tree") == "poolwise.hosts"
    assert subjects.for_event("GangAdmitted", "t2", "admission") == "poolwise.decision.t2.admission"
    assert subjects.for_event("InputRejected", None, "tree") == "poolwise.rejected._"
    assert subjects.for_event("PoolConfigChanged", "default", "tree") == "poolwise.config.default"


def test_json_schema_covers_every_event() -> None:
    schema = json.dumps(Envelope.model_json_schema())
    for name in EVENT_TYPES:
        assert name in schema


def test_union_fields_are_named_without_the_member_type() -> None:
    env = _env(PoolConfigChanged(tree="default", path="/a", config=PoolConfig(share=2.0)))
    raw = json.loads(encode(env))
    raw["event"]["config"]["share"] = "lots"
    with pytest.raises(DecodeError) as info:
        decode(json.dumps(raw).encode())
    assert info.value.field == "event.config.share"


# -- packs ----------------------------------------------------------------------------------------


def _admitted(i: int) -> Envelope:
    from events import GangAdmitted, TaskSpec

    event = GangAdmitted(tree="t1", gang=f"g{i}", pool="/a", queue="pending",
                         tasks=[TaskSpec(id=f"g{i}/0", resources={"cpu": 1.0})])
    return Envelope(id=f"adm-{i}", time=at_seconds(1_767_225_600), source="admission", basis=3, event=event)


def test_a_pack_reads_back_as_its_events_in_order() -> None:
    from events import decode_all, encode_pack

    envelopes = [_admitted(i) for i in range(3)]
    data = encode_pack([encode(e) for e in envelopes])
    assert data.startswith(b"[") and data.count(b",\n") == 2
    assert decode_all(data) == envelopes
    assert decode_all(encode(envelopes[0])) == [envelopes[0]]  # one event: a list of one


def test_a_pack_in_another_json_layout_reads_the_same() -> None:
    import json

    from events import decode_all

    envelopes = [_admitted(i) for i in range(2)]
    pretty = json.dumps([json.loads(encode(e)) for e in envelopes], indent=2).encode()
    assert decode_all(pretty) == envelopes


def test_a_pack_with_an_input_or_a_bad_event_is_malformed_as_a_whole() -> None:
    from events import decode_all, encode_pack

    good = encode(_admitted(1))
    with pytest.raises(DecodeError) as caught:
        decode_all(encode_pack([good, encode(_env(ClockTicked(tree="t")))]))
    assert (caught.value.field, caught.value.rule) == ("[1].event.type", "not_packable")
    with pytest.raises(DecodeError) as caught:
        decode_all(encode_pack([good, good.replace(b'"queue":"pending"', b'"queue":7')]))
    assert caught.value.field is not None and caught.value.field.startswith("[1].")
    with pytest.raises(DecodeError) as caught:
        decode_all(b"[]")
    assert caught.value.rule == "json"
    with pytest.raises(DecodeError):
        decode_all(b"[1, 2")


@pytest.mark.parametrize("parts", [(), ("admission", 7), ("admission", 7, "tr\u00e9e"), ("preemption", 0, "t")])
def test_derived_ids_are_derived_id(parts: tuple[object, ...]) -> None:
    ids = DerivedIds(*parts)
    for key in ("cycle", "admitted:g:1", "x\x1fy", "\u00fcber"):
        assert ids(key) == derived_id(*parts, key)


def test_a_tree_that_never_forgets_stays_so_through_the_log() -> None:
    """`gang_retention: None` ("never forgotten") is written as null: the log is encoded with
    exclude_none, and before, the field was left out and read back as its default, 3600 s."""
    from events import TreeOptions
    from events.inputs import TreeConfigured

    never = decode(encode(_env(TreeConfigured(tree="t", options=TreeOptions(gang_retention=None)))))
    assert isinstance(never.event, TreeConfigured)
    assert never.event.options.gang_retention is None
    assert b'"gang_retention":null' in encode(never)
    kept = decode(encode(_env(TreeConfigured(tree="t", options=TreeOptions(gang_retention=120.0)))))
    assert isinstance(kept.event, TreeConfigured)
    assert kept.event.options.gang_retention == 120.0
    # the default's bytes are as before (a log written before this change reads the same)
    assert b'"gang_retention":3600.0' in encode(_env(TreeConfigured(tree="t", options=TreeOptions())))
