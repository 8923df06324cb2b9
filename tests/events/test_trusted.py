"""`events.trusted`: a model built without validating is the model validation builds from the
same values, derived from the model alone; and what of pydantic that relies on is pinned here, so
that a pydantic release that changes it fails these tests (the builders would then validate:
slower, still right)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

import pytest
from pydantic import BaseModel, Field, field_validator

from events import ClockTicked, EntitlementsComputed, Envelope, GangAdmitted, PoolEntitlement, TaskSpec, encode
from events.base import Event
from events.decisions import LendingFactor, LentPool
from events.trusted import builder, validates

T0 = datetime(2026, 1, 1, 12, 0, 0, 500000, tzinfo=UTC)
TASKS = [TaskSpec(id="g/0", resources={"cpu": 1.5}), TaskSpec(id="g/1", resources={})]
POOL = PoolEntitlement(path="/a", entitlement={"cpu": 1.0}, non_slack_entitlement={"cpu": 1.0},
                       slack_entitlement={}, dominant_kind="cpu")

# each model admission builds, with values given in the ways it gives them
SAMPLES: list[tuple[type[BaseModel], dict[str, Any]]] = [
    (GangAdmitted, {"tree": "t", "gang": "g", "pool": "/a", "queue": "pending", "tasks": TASKS, "attempt": 2}),
    (GangAdmitted, {"tree": "t", "gang": "g", "pool": "/a", "queue": "pending", "tasks": TASKS}),
    (PoolEntitlement, {"path": "/a", "entitlement": {"cpu": 2.5}, "non_slack_entitlement": {"cpu": 2.0},
                       "slack_entitlement": {"cpu": 0.5}, "fair_share": 0.25, "usage_share": 0.0,
                       "demand_share": 0.125, "dominant_kind": None}),
    (EntitlementsComputed, {"tree": "t", "capacity": {"cpu": 4.0}, "slack_capacity": {}, "pools": [POOL],
                            "alerts": []}),
    (EntitlementsComputed, {"tree": "t", "capacity": {"cpu": 4.0}, "pools": [POOL]}),  # factories fill the rest
    (LentPool, {"path": "/a", "given": {"cpu": 0.5}, "share": {"cpu": 2.0}}),
    (LendingFactor, {"group": "/", "factor": {"cpu": 0.5}}),
    (Envelope, {"id": "e", "time": T0, "source": "admission", "causation": "c", "basis": 7,
                "event": ClockTicked()}),
]


def _same(built: BaseModel, validated: BaseModel) -> None:
    assert type(built) is type(validated)
    assert built == validated
    assert list(built.__dict__) == list(validated.__dict__)  # declaration order: the bytes follow it
    assert built.model_fields_set == validated.model_fields_set
    assert built.__pydantic_extra__ == validated.__pydantic_extra__
    assert built.__pydantic_private__ == validated.__pydantic_private__
    assert built.model_dump_json(exclude_none=True) == validated.model_dump_json(exclude_none=True)
    assert built.model_dump(exclude_unset=True) == validated.model_dump(exclude_unset=True)
    assert built.model_copy(update={}) == validated


def test_the_instance_layout_the_builders_write_is_pydantics() -> None:
    """A `BaseModel` instance is its `__dict__` and these three slots: what the builders write, and
    what `model_construct` writes. A release that adds or renames one fails here (and the builders
    fall back to validation)."""
    assert BaseModel.__slots__ == ("__dict__", "__pydantic_fields_set__", "__pydantic_extra__",
                                   "__pydantic_private__")
    made = GangAdmitted.model_construct(tree="t", gang="g", pool="/a", queue="q", tasks=[])
    assert list(made.__dict__) == list(GangAdmitted.model_fields)
    assert made.__pydantic_extra__ is None and made.__pydantic_private__ is None


@pytest.mark.parametrize("cls", [GangAdmitted, PoolEntitlement, EntitlementsComputed, LentPool, LendingFactor,
                                 Envelope], ids=lambda c: c.__name__)
def test_the_models_admission_builds_are_built_without_validating(cls: type[BaseModel]) -> None:
    """Fails if a model admission builds per gang or per pool gets a validator, or if pydantic lays
    its instances out otherwise than `model_construct` does: the builders would validate."""
    assert not validates(builder(cls))


@pytest.mark.parametrize(("cls", "values"), SAMPLES, ids=lambda v: v.__name__ if isinstance(v, type) else "")
def test_a_built_model_is_the_validated_one(cls: type[BaseModel], values: dict[str, Any]) -> None:
    built = builder(cls)(**values)
    _same(built, cls.model_validate(values))
    if isinstance(built, Event):
        assert encode(Envelope(id="x", time=T0, event=built)) == encode(
            Envelope(id="x", time=T0, event=cls.model_validate(values)))


def test_a_default_factory_gives_each_model_its_own_value() -> None:
    build = builder(EntitlementsComputed)
    one, two = (build(tree="t", capacity={}, pools=[]) for _ in range(2))
    assert one.removed == [] and one.alerts == [] and one.slack_capacity == {}
    assert one.removed is not two.removed and one.alerts is not two.alerts


def test_a_name_that_is_not_a_field_is_refused() -> None:
    with pytest.raises(TypeError, match="qeue"):
        builder(GangAdmitted)(tree="t", gang="g", pool="/a", qeue="pending", tasks=[])


def test_a_required_field_left_out_is_refused_where_it_is_built() -> None:
    """Not later, where the model is published (it would hold a sentinel no encoder can write)."""
    with pytest.raises(TypeError, match=r"Envelope needs field \['event'"):
        builder(Envelope)(id="x", source="s")
    with pytest.raises(TypeError, match=r"needs field \['pool'\]"):
        builder(GangAdmitted)(tree="t", gang="g", queue="pending", tasks=[])
    made = builder(GangAdmitted)(tree="t", gang="g", pool="/a", queue="pending", tasks=[])
    assert made == GangAdmitted(tree="t", gang="g", pool="/a", queue="pending", tasks=[])


class _Added(Event):
    """A throwaway copy of `GangAdmitted` with optional fields added, between and after its own."""

    type: Literal["GangAdmitted"] = "GangAdmitted"
    version: Literal[1] = 1
    tree: str
    note: str | None = None
    gang: str
    pool: str
    queue: str
    tasks: list[TaskSpec]
    attempt: int = 1
    labels: dict[str, str] = Field(default_factory=dict)
    weight: float = 1.0


def test_a_field_added_to_a_model_is_built_with_no_other_edit() -> None:
    build = builder(_Added)
    assert not validates(build)
    values: dict[str, Any] = {"tree": "t", "gang": "g", "pool": "/a", "queue": "q", "tasks": TASKS, "attempt": 3}
    _same(build(**values), _Added.model_validate(values))
    _same(build(**values, note="n", weight=0.5), _Added.model_validate({**values, "note": "n", "weight": 0.5}))


class _Validated(Event):
    type: Literal["Validated"] = "Validated"
    version: Literal[1] = 1
    name: str

    @field_validator("name")
    @classmethod
    def _lower(cls, value: str) -> str:
        return value.lower()


def test_a_model_with_a_validator_is_validated() -> None:
    """A validator may change a value: building without it would give another model."""
    build = builder(_Validated)
    assert validates(build)
    assert build(name="ABC").name == "abc"
