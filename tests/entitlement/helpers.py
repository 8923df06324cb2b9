"""Small builders for hand-written trees."""

from __future__ import annotations

import math
from collections.abc import Mapping

import pytest

from services.entitlement import LeafUsage, PoolInput, TreeEntitlements, TreeInput

TOL = 0.0009


def leaf(
    path: str,
    *,
    reservation: Mapping[str, float] | None = None,
    limit: Mapping[str, float] | None = None,
    share: float | Mapping[str, float] = 1.0,
    static: bool = False,
    slack_limit: float = 20.0,
    allocation: Mapping[str, float] | None = None,
    demand: Mapping[str, float] | None = None,
    revocable_allocation: Mapping[str, float] | None = None,
    revocable_demand: Mapping[str, float] | None = None,
) -> PoolInput:
    return PoolInput(
        path=path,
        reservation=dict(reservation or {}),
        limit=None if limit is None else dict(limit),
        share=share,
        static=static,
        slack_limit=slack_limit,
        usage=LeafUsage(
            allocation=dict(allocation or {}),
            demand=dict(demand or {}),
            revocable_allocation=dict(revocable_allocation or {}),
            revocable_demand=dict(revocable_demand or {}),
        ),
    )


def check(result: TreeEntitlements, field: str, expected: Mapping[str, Mapping[str, float]], tol: float = TOL) -> None:
    """Each listed number of `field` (entitlement, non_slack_entitlement, ...) within `tol`."""
    for path, kinds in expected.items():
        got = getattr(result[path], field)
        for kind, want in kinds.items():
            assert got[kind] == pytest.approx(want, abs=tol), f"{field} of {path} {kind}: {got[kind]} != {want}"


def claim(tree: TreeInput, got: TreeEntitlements, path: str, kind: str) -> float:
    """DOMAIN §3: a pool's requirement, or a static pool's `max(requirement, reservation)` (its
    reservation is given whatever the demand, up to its limit): no DRF policy gives a pool more."""
    req = got[path].requirement[kind]
    pool = next((p for p in tree.pools if p.path == path), None)
    if pool is None or not pool.static:
        return req
    limit = math.inf if pool.limit is None else pool.limit.get(kind, math.inf)
    return max(req, min(pool.reservation.get(kind, 0.0), limit))
