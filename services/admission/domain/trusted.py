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

from typing import Literal

from events import EntitlementsComputed, GangAdmitted, GangFinished, PoolEntitlement, TaskSpec
from events.decisions import LendingFactor, LentPool
from events.trusted import builder

_gang_admitted = builder(GangAdmitted)
_gang_finished = builder(GangFinished)
_pool_entitlement = builder(PoolEntitlement)
_entitlements_computed = builder(EntitlementsComputed)
_lent_pool = builder(LentPool)
_lending_factor = builder(LendingFactor)


def gang_admitted(tree: str, gang: str, pool: str, queue: str, tasks: list[TaskSpec], attempt: int) -> GangAdmitted:
    """`GangAdmitted.model_validate({"tree": tree, ..., "attempt": attempt})` for values of the
    declared types (`tasks`, validated specs, is taken over: do not change it afterwards)."""
    return _gang_admitted(tree=tree, gang=gang, pool=pool, queue=queue, tasks=tasks, attempt=attempt)


def gang_finished(tree: str, gang: str, pool: str,
                  outcome: Literal["done", "cancelled", "timed_out", "rejected"]) -> GangFinished:
    """`GangFinished(tree=tree, gang=gang, pool=pool, outcome=outcome)` for strings (the fold
    makes one per gang, when it ends)."""
    return _gang_finished(tree=tree, gang=gang, pool=pool, outcome=outcome)


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
