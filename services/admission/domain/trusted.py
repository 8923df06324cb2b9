"""Wire models admission builds per gang, made from values that are valid already.

An admission cycle builds a `GangAdmitted` per gang (and the folder an `Envelope` per decision,
`services/admission/envelopes.py`): a pydantic validation each (about 1.5 and 2.2 µs), of values
this code took from validated events (ids, paths, the members' `TaskSpec`s, event models) or
made itself (counts, derived ids, the log's time). A builder makes the model validation would
make from the same values (the same `__dict__`, defaults in place and in declaration order, the
same fields set: equal, and encoded to the same bytes) for less than half the cost.

A builder knows its model's fields: `expect_plain` checks at import that the model is still a
plain one with exactly those fields and defaults (else the import fails, rather than a wrong
model being built), and tests hold the builders to validation.
"""

from __future__ import annotations

from typing import Any

from events import EntitlementsComputed, GangAdmitted, PoolEntitlement, TaskSpec
from events.base import Frozen
from events.decisions import LendingFactor, LentPool

_new = object.__new__
_set = object.__setattr__


REQUIRED = object()  # in `expect_plain`: a field without a default
FACTORY = object()  # in `expect_plain`: a field with a default factory (which the builder always gives)


def expect_plain(cls: type[Frozen], fields: dict[str, Any]) -> None:
    """`cls` has exactly `fields`, in this order, with these defaults (`REQUIRED`: none;
    `FACTORY`: a default factory, never used since the builder gives the field), and nothing
    validation would add (aliases, validators, post-init, extras)."""
    found = cls.__pydantic_fields__
    decorators = cls.__pydantic_decorators__
    plain = (cls.__pydantic_post_init__ is None and not cls.__pydantic_root_model__
             and cls.model_config.get("extra") == "forbid"
             and not (decorators.validators or decorators.field_validators or decorators.model_validators
                      or decorators.root_validators)
             and all(f.alias is None and f.validation_alias is None for f in found.values()))

    def default(f: Any) -> Any:
        if f.default_factory is not None:
            return FACTORY
        return REQUIRED if f.is_required() else f.default

    declared = [(name, default(f)) for name, f in found.items()]
    if not plain or declared != list(fields.items()):
        raise TypeError(f"{cls.__name__} changed: update the builder of it in services/admission")


expect_plain(GangAdmitted, {"type": "GangAdmitted", "version": 1, "tree": REQUIRED, "gang": REQUIRED,
                            "pool": REQUIRED, "queue": REQUIRED, "tasks": REQUIRED, "attempt": 1})
_GANG_ADMITTED_SET = frozenset({"tree", "gang", "pool", "queue", "tasks", "attempt"})


def gang_admitted(tree: str, gang: str, pool: str, queue: str, tasks: list[TaskSpec], attempt: int) -> GangAdmitted:
    """`GangAdmitted.model_validate({"tree": tree, ..., "attempt": attempt})` for values of the
    declared types (`tasks`, validated specs, is taken over: do not change it afterwards)."""
    model = _new(GangAdmitted)
    _set(model, "__dict__", {"type": "GangAdmitted", "version": 1, "tree": tree, "gang": gang, "pool": pool,
                             "queue": queue, "tasks": tasks, "attempt": attempt})
    _set(model, "__pydantic_fields_set__", set(_GANG_ADMITTED_SET))
    _set(model, "__pydantic_extra__", None)
    _set(model, "__pydantic_private__", None)
    return model


expect_plain(PoolEntitlement, {"path": REQUIRED, "entitlement": REQUIRED, "non_slack_entitlement": REQUIRED,
                               "slack_entitlement": REQUIRED, "fair_share": 0.0, "usage_share": 0.0,
                               "demand_share": 0.0, "dominant_kind": None})
_POOL_ENTITLEMENT_SET = frozenset({"path", "entitlement", "non_slack_entitlement", "slack_entitlement", "fair_share",
                                   "usage_share", "demand_share", "dominant_kind"})


def pool_entitlement(path: str, entitlement: dict[str, float], non_slack_entitlement: dict[str, float],
                     slack_entitlement: dict[str, float], fair_share: float, usage_share: float,
                     demand_share: float, dominant_kind: str | None) -> PoolEntitlement:
    """`PoolEntitlement.model_validate({...})` of every field, for values of the declared types
    (the maps are taken over: do not change them afterwards). An admission cycle makes one per
    pool of the tree."""
    model = _new(PoolEntitlement)
    _set(model, "__dict__", {"path": path, "entitlement": entitlement, "non_slack_entitlement": non_slack_entitlement,
                             "slack_entitlement": slack_entitlement, "fair_share": fair_share,
                             "usage_share": usage_share, "demand_share": demand_share,
                             "dominant_kind": dominant_kind})
    _set(model, "__pydantic_fields_set__", set(_POOL_ENTITLEMENT_SET))
    _set(model, "__pydantic_extra__", None)
    _set(model, "__pydantic_private__", None)
    return model


expect_plain(EntitlementsComputed, {"type": "EntitlementsComputed", "version": 3, "tree": REQUIRED,
                                    "capacity": REQUIRED, "slack_capacity": FACTORY, "pools": REQUIRED,
                                    "alerts": FACTORY, "removed": FACTORY, "replace": True, "part": 1, "parts": 1,
                                    "factors": None, "lent": None})
_ENTITLEMENTS_COMPUTED_SET = frozenset({"tree", "capacity", "slack_capacity", "pools", "alerts"})
_ENTITLEMENTS_PART_SET = frozenset({"tree", "capacity", "slack_capacity", "pools", "alerts", "removed", "replace",
                                    "part", "parts"})


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
    model = _new(EntitlementsComputed)
    _set(model, "__dict__", {"type": "EntitlementsComputed", "version": 3, "tree": tree, "capacity": capacity,
                             "slack_capacity": slack_capacity, "pools": pools, "alerts": alerts,
                             "removed": [] if removed is None else removed, "replace": replace, "part": part,
                             "parts": parts, "factors": factors, "lent": lent})
    whole = removed is None and replace and part == 1 and parts == 1
    fields = set(_ENTITLEMENTS_COMPUTED_SET if whole else _ENTITLEMENTS_PART_SET)
    if factors is not None:
        fields.add("factors")
    if lent is not None:
        fields.add("lent")
    _set(model, "__pydantic_fields_set__", fields)
    _set(model, "__pydantic_extra__", None)
    _set(model, "__pydantic_private__", None)
    return model


expect_plain(LentPool, {"path": REQUIRED, "given": REQUIRED, "share": REQUIRED, "limit": FACTORY})
expect_plain(LendingFactor, {"group": REQUIRED, "factor": REQUIRED})
_LENT_POOL_SET = frozenset({"path", "given", "share", "limit"})
_LENDING_FACTOR_SET = frozenset({"group", "factor"})


def lent_pool(path: str, given: dict[str, float], share: dict[str, float], limit: dict[str, float]) -> LentPool:
    """`LentPool.model_validate({...})` of every field, for finite floats (the maps taken over)."""
    model = _new(LentPool)
    _set(model, "__dict__", {"path": path, "given": given, "share": share, "limit": limit})
    _set(model, "__pydantic_fields_set__", set(_LENT_POOL_SET))
    _set(model, "__pydantic_extra__", None)
    _set(model, "__pydantic_private__", None)
    return model


def lending_factor(group: str, factor: dict[str, float]) -> LendingFactor:
    """`LendingFactor.model_validate({"group": group, "factor": factor})`, for finite floats."""
    model = _new(LendingFactor)
    _set(model, "__dict__", {"group": group, "factor": factor})
    _set(model, "__pydantic_fields_set__", set(_LENDING_FACTOR_SET))
    _set(model, "__pydantic_extra__", None)
    _set(model, "__pydantic_private__", None)
    return model
