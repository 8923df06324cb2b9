"""The models admission builds without validating again (`domain/trusted.py`, `envelopes.py`) are
the models validation builds from the same values: equal, the same fields set and field order,
encoded to the same bytes (how they are built, and what of pydantic that relies on, is tested in
tests/events/test_trusted.py)."""

from __future__ import annotations

from typing import Any

import pytest

from events import (
    ClockTicked,
    CycleCompleted,
    EntitlementsComputed,
    Envelope,
    Event,
    GangAdmitted,
    GangFinished,
    InputRejected,
    PoolEntitlement,
    TaskSpec,
    at_seconds,
    decode,
    encode,
)
from events.base import Frozen
from events.decisions import LendingFactor, LentPool
from services.admission.domain.state import Outcome
from services.admission.domain.trusted import (
    entitlements_computed,
    gang_admitted,
    gang_finished,
    lending_factor,
    lent_pool,
    pool_entitlement,
)
from services.admission.envelopes import decision_envelope, decision_envelopes
from services.admission.folder import seconds_of
from services.common.folding import decision_envelope as validated_envelope


def _same(built: Frozen, validated: Frozen) -> None:
    assert built == validated
    assert list(built.__dict__) == list(validated.__dict__)
    assert built.model_fields_set == validated.model_fields_set
    assert built.model_dump_json(exclude_none=True) == validated.model_dump_json(exclude_none=True)


@pytest.mark.parametrize("attempt", [1, 7])
def test_gang_admitted_is_what_validation_builds(attempt: int) -> None:
    specs = [TaskSpec(id="g/0", resources={"cpu": 1.5, "memory": 4}), TaskSpec(id="g/1", resources={})]
    values: dict[str, Any] = {"tree": "t", "gang": "g", "pool": "/a/b", "queue": "pending", "tasks": list(specs),
                              "attempt": attempt}
    _same(gang_admitted("t", "g", "/a/b", "pending", list(specs), attempt), GangAdmitted.model_validate(values))


@pytest.mark.parametrize("outcome", ["done", "cancelled", "timed_out", "rejected"])
def test_gang_finished_is_what_validation_builds(outcome: Any) -> None:
    validated = GangFinished(tree="t", gang="g\u00e9", pool="/a/b", outcome=outcome)
    _same(gang_finished("t", "g\u00e9", "/a/b", outcome), validated)
    validated = GangFinished(tree="t", gang="g", pool="/p", outcome=outcome)
    assert encode(Envelope(id="x", time=at_seconds(1.5), event=gang_finished("t", "g", "/p", outcome))) == \
        encode(Envelope(id="x", time=at_seconds(1.5), event=validated))


@pytest.mark.parametrize("dominant", [None, "cpu"])
def test_pool_entitlement_is_what_validation_builds(dominant: str | None) -> None:
    values: dict[str, Any] = {"path": "/a/b", "entitlement": {"cpu": 2.5, "gpu": 0.0},
                              "non_slack_entitlement": {"cpu": 2.0, "gpu": 0.0},
                              "slack_entitlement": {"cpu": 0.5, "gpu": 0.0}, "fair_share": 0.25, "usage_share": 0.0,
                              "demand_share": 0.125, "dominant_kind": dominant}
    copies: dict[str, Any] = {k: dict(v) if isinstance(v, dict) else v for k, v in values.items()}
    built = pool_entitlement(**copies)
    _same(built, PoolEntitlement.model_validate(values))


@pytest.mark.parametrize("alerts", [[], ["reservations exceed capacity"]])
def test_entitlements_computed_is_what_validation_builds(alerts: list[str]) -> None:
    pools = [PoolEntitlement(path="/", entitlement={"cpu": 4.0}, non_slack_entitlement={"cpu": 4.0},
                             slack_entitlement={"cpu": 0.0}, fair_share=1.0),
             PoolEntitlement(path="/a", entitlement={"cpu": 1.5}, non_slack_entitlement={"cpu": 1.0},
                             slack_entitlement={"cpu": 0.5}, dominant_kind="cpu")]
    values: dict[str, Any] = {"tree": "t", "capacity": {"cpu": 4.0}, "slack_capacity": {"cpu": 0.5},
                              "pools": pools, "alerts": alerts}
    built = entitlements_computed("t", {"cpu": 4.0}, {"cpu": 0.5}, list(pools), list(alerts))
    _same(built, EntitlementsComputed.model_validate(values))


def test_a_v3_part_and_its_lent_pools_and_factors_are_what_validation_builds() -> None:
    """A large tree's part (`EntitlementsComputed` v3): its lent pools' parts and its factors."""
    pool = PoolEntitlement(path="/a/b", entitlement={"cpu": 1.5}, non_slack_entitlement={"cpu": 1.5},
                           slack_entitlement={"cpu": 0.0}, fair_share=0.375, dominant_kind="cpu")
    part = lent_pool("/a/b", {"cpu": 0.5, "gpu": 0.0}, {"cpu": 2.0, "gpu": 1.0}, {"cpu": 3.0})
    _same(part, LentPool.model_validate({"path": "/a/b", "given": {"cpu": 0.5, "gpu": 0.0},
                                         "share": {"cpu": 2.0, "gpu": 1.0}, "limit": {"cpu": 3.0}}))
    factor = lending_factor("/a", {"cpu": 0.5, "gpu": 0.0})
    _same(factor, LendingFactor.model_validate({"group": "/a", "factor": {"cpu": 0.5, "gpu": 0.0}}))
    values: dict[str, Any] = {"tree": "t", "capacity": {"cpu": 4.0}, "slack_capacity": {}, "pools": [pool],
                              "alerts": [], "removed": ["/x"], "replace": False, "part": 1, "parts": 2,
                              "factors": [factor], "lent": [part]}
    built = entitlements_computed("t", {"cpu": 4.0}, {}, [pool], [], ["/x"], False, 1, 2, [factor], [part])
    _same(built, EntitlementsComputed.model_validate(values))
    later = entitlements_computed("t", {"cpu": 4.0}, {}, [pool], [], [], False, 2, 2, None, [part])
    _same(later, EntitlementsComputed.model_validate({**{k: v for k, v in values.items() if k != "factors"},
                                                      "removed": [], "part": 2}))


EVENTS: list[Event] = [
    gang_admitted("t", "g", "/a", "revocable", [TaskSpec(id="g/0", resources={"cpu": 1})], 2),
    GangFinished(tree="t", gang="g", pool="/a", outcome="done"),
    InputRejected(tree="t", ref="g", input_type="GangEnqueued", reason="no", rule="pool_missing", input="{}",
                  input_seq=4),
    EntitlementsComputed(tree="t", capacity={"cpu": 4}, pools=[PoolEntitlement(
        path="/a", entitlement={"cpu": 1}, non_slack_entitlement={"cpu": 1}, slack_entitlement={})]),
    CycleCompleted(tree="t", service="admission", trigger_seq=9, decisions=3),
    ClockTicked(),  # no tree: the id leaves it out
]


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: e.type)
def test_a_decision_envelope_is_what_validation_builds(event: Event) -> None:
    time = at_seconds(1_767_225_600.125)
    built = decision_envelope("admission", event, "key:1", 42, "cause", time)
    validated = validated_envelope("admission", event, "key:1", 42, "cause", time)
    _same(built, validated)
    assert built.id == validated.id
    assert decode(encode(built)) == built


def test_decision_envelopes_are_decision_envelopes_in_order() -> None:
    """The envelopes of many decisions (ids hashed from a prefix kept per tree) are those made one
    by one: events of several trees and of none, in their order."""
    time = at_seconds(1_767_225_600.5)
    others = [gang_admitted("u", "g", "/a", "pending", [TaskSpec(id="g/0", resources={"cpu": 1.0})], 1),
              gang_admitted("t", "h", "/b", "pending", [TaskSpec(id="h/0", resources={"cpu": 2.0})], 3)]
    decided = [Outcome(event, f"key:{i}") for i, event in enumerate([*EVENTS, *others])]
    built = decision_envelopes("admission", decided, 42, "cause", time)
    one_by_one = [decision_envelope("admission", o.event, o.key, 42, "cause", time) for o in decided]
    assert [e.id for e in built] == [e.id for e in one_by_one]
    for made, expected in zip(built, one_by_one, strict=True):
        _same(made, expected)


@pytest.mark.parametrize("seconds", [0.0, 1_767_225_600.123456, 1e9 + 0.5, 12.000001])
def test_seconds_of_an_envelope(seconds: float) -> None:
    envelope = Envelope(id="x", time=at_seconds(seconds), event=ClockTicked())
    for copy in (envelope, decode(encode(envelope))):
        assert seconds_of(copy) == copy.seconds
        assert seconds_of(copy) == copy.seconds  # the kept answer


def test_the_positional_builders_are_made_fast_and_build_what_the_builders_build() -> None:
    """`positional` writes a function per model; it falls back to the builder (slower, right) only
    when it cannot agree with it: this fails if admission's per-gang models lose the fast path."""
    from services.admission import envelopes
    from services.admission.domain import trusted

    for build in (trusted._fast_admitted, trusted._fast_finished, trusted._fast_spec, envelopes._envelope):
        assert getattr(build, "positional", False)
    assert trusted._SPEC_VIEW_FIELDS
    spec = TaskSpec(id="g/0", resources={"cpu": 1.0})
    _same(trusted._fast_spec("g/0", {"cpu": 1.0}), spec)
    view = decode(encode(Envelope(id="x", time=at_seconds(1.0), event=GangAdmitted(
        tree="t", gang="g", pool="/p", queue="pending", tasks=[spec])))).event.tasks[0]
    _same(trusted.task_spec(view), spec)


def test_positional_falls_back_to_the_builder_where_it_cannot_agree() -> None:
    """A field with a default factory not given, or a validator: the builder's instance, by keyword."""
    from pydantic import Field, field_validator

    from services.admission.domain.trusted import positional

    class Factory(Frozen):
        a: str
        b: list[str] = Field(default_factory=list)

    class Checked(Frozen):
        a: str

        @field_validator("a")
        @classmethod
        def _upper(cls, value: str) -> str:
            return value.upper()

    build = positional(Factory, ("a",))
    assert not getattr(build, "positional", False)
    assert build("x") == Factory(a="x") and build("x").model_fields_set == {"a"}
    checked = positional(Checked, ("a",))
    assert not getattr(checked, "positional", False) and checked("x").a == "X"
    made = positional(Factory, ("a", "b"))
    assert getattr(made, "positional", False) and made("x", ["y"]) == Factory(a="x", b=["y"])


@pytest.mark.parametrize("count", [1, 2, 3, 4, 5, 6, 7])
def test_positional_of_any_count_of_names_builds_what_the_builder_builds(count: int) -> None:
    """Of 2, 4 or 6 names `positional` writes the values in one statement (a closure per count), of
    any other count in a loop: each builds the builder's instance (defaults in place before,
    between and after the names given, the fields set, a set of its own per instance), and
    refuses too few values."""
    from pydantic import create_model

    from events.trusted import builder
    from services.admission.domain.trusted import positional

    fields: dict[str, Any] = {"type": (str, "wide"), "version": (int, 1)}
    for n in range(count):
        fields[f"f{n}"] = (str, ...)
        if n == 1:
            fields["between"] = (str | None, None)
    fields["after"] = (int, 3)
    wide = create_model("Wide", __base__=Frozen, **fields)
    given = tuple(f"f{n}" for n in range(count))
    build = positional(wide, given)
    assert getattr(build, "positional", False)
    values = [f"v{n}" for n in range(count)]
    made, expected = build(*values), builder(wide)(**dict(zip(given, values, strict=True)))
    assert list(made.__dict__.items()) == list(expected.__dict__.items())
    assert made.model_fields_set == expected.model_fields_set == set(given)
    assert made.__pydantic_extra__ is None and made.__pydantic_private__ is None
    assert build(*values).model_fields_set is not made.model_fields_set
    with pytest.raises((TypeError, ValueError)):
        build(*values[:-1])
