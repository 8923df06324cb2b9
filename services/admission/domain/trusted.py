"""Wire models admission builds per gang, made from values that are valid already.

An admission cycle builds a `GangAdmitted` per gang (the fold a `GangFinished`, and the folder an
`Envelope` per decision, `services/admission/envelopes.py`), and a `PoolEntitlement` per pool: a
pydantic validation each, of values this code took from validated events (ids, paths, the
members' `TaskSpec`s, event models) or made itself (counts, derived ids, the log's time). These builders make the model
validation would make from the same values without validating them again (`events.trusted`:
the fields and defaults are the model's own; tests hold the builders to validation). Each
builder's docstring says what its caller vouches for.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, TypeVar, cast

from pydantic import BaseModel

from events import EntitlementsComputed, GangAdmitted, GangFinished, PoolEntitlement, TaskSpec, as_model
from events.decisions import LendingFactor, LentPool
from events.trusted import builder, validates
from events.views import VIEWS

_pool_entitlement = builder(PoolEntitlement)
_entitlements_computed = builder(EntitlementsComputed)
_lent_pool = builder(LentPool)
_lending_factor = builder(LendingFactor)


# The models made per gang or per task (`gang_admitted`, `gang_finished`, `task_spec`, and the
# decision envelopes, services/admission/envelopes.py) are built faster still, by `positional`: a
# closure over the model's field names, made at import, that writes the instance as the builder
# writes it from values given in the fields' order (no keyword dict, no merge of defaults, no
# check of the names per call: ~3% of a replay's child, measured with generated code).
_new = object.__new__
_set = object.__setattr__
_SLOTS = ("__dict__", "__pydantic_fields_set__", "__pydantic_extra__", "__pydantic_private__")
M = TypeVar("M", bound=BaseModel)


def positional(cls: type[M], names: tuple[str, ...]) -> Callable[..., M]:
    """`build(*values)`: `builder(cls)(**dict(zip(names, values)))`, the same instance (every slot,
    the field order), made by a closure over these names. The fields and defaults are the
    builder's (an instance of it read at import); when the function's instance does not agree with
    the builder's in every slot (a pydantic that lays instances out otherwise, a field with a
    default factory not among `names`), or the builder validates, `build` is the builder."""
    slow = builder(cls)
    fallback = cast(Callable[..., M], lambda *values: slow(**dict(zip(names, values, strict=True))))
    sample = {name: object() for name in names}
    try:
        template = slow(**sample).__dict__
    except Exception:
        return fallback
    if validates(slow) or tuple(BaseModel.__slots__) != _SLOTS or not all(name.isidentifier() for name in names):
        return fallback
    defaults = {name: value for name, value in template.items() if name not in sample}
    if any(cls.model_fields[name].default_factory is not None for name in defaults):
        return fallback  # (a default made per instance: the function would share one)
    # every field in the model's order, the defaults in place: a copy written with the values
    # keeps that order (a key written again does not move)
    base = {name: defaults.get(name) for name in template}
    fields_set = set(names)
    # (BaseModel's slots are written through their descriptors: `object.__setattr__` looks each up)
    slots: list[Any] = [vars(BaseModel).get(slot) for slot in _SLOTS[1:]]
    if not all(type(slot).__name__ == "member_descriptor" for slot in slots):
        return fallback
    set_fields, set_extra, set_private = (slot.__set__ for slot in slots)

    def model(fields: dict[str, Any]) -> M:
        made = _new(cls)
        _set(made, "__dict__", fields)
        set_fields(made, fields_set.copy())
        set_extra(made, None)
        set_private(made, None)
        return made

    fast = _by_arity(base, names, model)
    fast.positional = True  # type: ignore[attr-defined]  # (read by tests: made fast, not the builder)
    built, made = fast(*sample.values()), slow(**sample)
    agree = type(built) is type(made) and list(built.__dict__.items()) == list(made.__dict__.items()) and all(
        getattr(built, slot) == getattr(made, slot) for slot in _SLOTS)
    return fast if agree else fallback


def _by_arity(base: dict[str, Any], names: tuple[str, ...], model: Callable[[dict[str, Any]], M]) -> Callable[..., M]:
    """A closure (issue 22: no generated source) that writes `base`'s copy with the values of
    `names`, given in that order, and makes the model of it. Of 2, 4 or 6 names (the models made
    per task, per gang and per decision) the values are named parameters, written in one statement:
    about half the time of `update(zip(names, values))` (0.23 against 0.79 us for 8 fields)."""
    if len(names) == 2:
        n0, n1 = names

        def fast2(a: Any, b: Any) -> M:
            fields = base.copy()
            fields[n0], fields[n1] = a, b
            return model(fields)
        return fast2
    if len(names) == 4:
        n0, n1, n2, n3 = names

        def fast4(a: Any, b: Any, c: Any, d: Any) -> M:
            fields = base.copy()
            fields[n0], fields[n1], fields[n2], fields[n3] = a, b, c, d
            return model(fields)
        return fast4
    if len(names) == 6:
        n0, n1, n2, n3, n4, n5 = names

        def fast6(a: Any, b: Any, c: Any, d: Any, e: Any, f: Any) -> M:
            fields = base.copy()
            fields[n0], fields[n1], fields[n2], fields[n3], fields[n4], fields[n5] = a, b, c, d, e, f
            return model(fields)
        return fast6

    def fast(*values: Any) -> M:
        fields = base.copy()
        fields.update(zip(names, values, strict=True))
        return model(fields)
    return fast


_fast_admitted = positional(GangAdmitted, ("tree", "gang", "pool", "queue", "tasks", "attempt"))
_fast_finished = positional(GangFinished, ("tree", "gang", "pool", "outcome"))
_fast_spec = positional(TaskSpec, ("id", "resources"))
# (a member read from the log is a view, whose model its `to_model` makes: of these same fields)
_SPEC_VIEW: Any = VIEWS.get(TaskSpec)
_SPEC_VIEW_FIELDS = _SPEC_VIEW is not None and tuple(_SPEC_VIEW.__struct_fields__) == ("id", "resources")


def gang_admitted(tree: str, gang: str, pool: str, queue: str, tasks: list[TaskSpec], attempt: int) -> GangAdmitted:
    """`GangAdmitted.model_validate({"tree": tree, ..., "attempt": attempt})` for values of the
    declared types (`tasks`, validated specs, is taken over: do not change it afterwards)."""
    return _fast_admitted(tree, gang, pool, queue, tasks, attempt)


def gang_finished(tree: str, gang: str, pool: str,
                  outcome: Literal["done", "cancelled", "timed_out", "rejected"]) -> GangFinished:
    """`GangFinished(tree=tree, gang=gang, pool=pool, outcome=outcome)` for strings (the fold
    makes one per gang, when it ends)."""
    return _fast_finished(tree, gang, pool, outcome)


def task_spec(spec: Any) -> TaskSpec:
    """`as_model(spec)`: the `TaskSpec` a member's spec (a model, or its view read from the log)
    stands for; an admission lists one per member."""
    if type(spec) is TaskSpec:
        return spec
    if _SPEC_VIEW_FIELDS and type(spec) is _SPEC_VIEW:
        return _fast_spec(spec.id, spec.resources)
    return as_model(spec)  # type: ignore[no-any-return]


def pool_entitlement(path: str, entitlement: dict[str, float], non_slack_entitlement: dict[str, float],
                     slack_entitlement: dict[str, float], fair_share: float, usage_share: float,
                     demand_share: float, dominant_kind: str | None) -> PoolEntitlement:
    """`PoolEntitlement.model_validate({...})` of every field, for values of the declared types
    (the maps are taken over: do not change them afterwards). An admission cycle makes one per
    pool of the tree."""
    return _pool_entitlement(path=path, entitlement=entitlement, non_slack_entitlement=non_slack_entitlement,
                             slack_entitlement=slack_entitlement, fair_share=fair_share, usage_share=usage_share,
                             demand_share=demand_share, dominant_kind=dominant_kind)


def entitlements_computed(tree: str, capacity: dict[str, float], slack_capacity: dict[str, float],
                          pools: list[PoolEntitlement], alerts: list[str], removed: list[str] | None = None,
                          replace: bool = True, part: int = 1, parts: int = 1,
                          factors: list[LendingFactor] | None = None,
                          lent: list[LentPool] | None = None) -> EntitlementsComputed:
    """`EntitlementsComputed.model_validate({...})` of every field given, for values of the
    declared types (floats, not ints, in the maps; the pools made by `pool_entitlement`, the
    lent ones by `lent_pool`, the factors by `lending_factor`; `part` and `parts` from 1; all
    taken over: do not change them afterwards). An admission cycle makes one per tree, or one
    per part of a large tree's. Without `removed`, the fields set are those of the whole-map
    event as validating the v1 fields gives them (with `replace`, `part` and `parts` left at
    their defaults); `factors` and `lent` count as set when given (not None)."""
    if removed is None and replace and part == 1 and parts == 1:
        given: dict[str, object] = {}
    else:
        given = {"removed": [] if removed is None else removed, "replace": replace, "part": part, "parts": parts}
    if factors is not None:
        given["factors"] = factors
    if lent is not None:
        given["lent"] = lent
    return _entitlements_computed(tree=tree, capacity=capacity, slack_capacity=slack_capacity, pools=pools,
                                  alerts=alerts, **given)


def lent_pool(path: str, given: dict[str, float], share: dict[str, float], limit: dict[str, float]) -> LentPool:
    """`LentPool.model_validate({...})` of every field, for finite floats (the maps taken over)."""
    return _lent_pool(path=path, given=given, share=share, limit=limit)


def lending_factor(group: str, factor: dict[str, float]) -> LendingFactor:
    """`LendingFactor.model_validate({"group": group, "factor": factor})`, for finite floats."""
    return _lending_factor(group=group, factor=factor)
