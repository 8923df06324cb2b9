"""Inputs and outputs of the entitlement engine: plain frozen values, amounts as `kind -> float`.

Inputs
------
`TreeInput` is one pool tree as the admission service sees it at the end of a batch of events:
its kinds, capacity and revocable capacity (from the hosts), the policy, and its pools. Each
`PoolInput` carries the pool's *effective* options (presets and inheritance already resolved by
the tree service) and, for a leaf, a `LeafUsage`: what its admitted gangs hold and what its
queued gangs need. Internal pools hold nothing of their own; their usage is ignored.

A kind missing from `reservation`/`usage` maps reads 0; missing from `limit` (or `limit=None`, or
`inf`) reads "unbounded"; missing from a per-kind `share` reads 1. The root `/` is implicit (its
reservation and limit are the capacity); a `PoolInput` for `/` may be given and is ignored.

Outputs
-------
`TreeEntitlements` maps every path (the root `/` included) to a `PoolEntitlement`. It is built
lazily over the engine's arrays, so a 100k-pool result costs nothing until a pool is read;
`TreeEntitlements.row_of` and the `*_matrix` properties give the raw numbers without dicts.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

import numpy as np
import numpy.typing as npt

Policy = Literal["per_resource", "dominant", "hdrf"]
JOB_POLICIES: frozenset[str] = frozenset({"dominant", "hdrf"})
"""The policies whose leaves are jobs (DRF): a leaf's `LeafUsage.jobs` matter under these only."""
Amounts = Mapping[str, float]
FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]
BoolArray = npt.NDArray[np.bool_]

ROOT = "/"
CPU = "cpu"
"""The one kind whose slack comes from the hosts' revocable capacity (DOMAIN §3). Every other
kind (memory, disk, gpu, and any kind a deployment adds) follows the memory rule: revocable
tasks use at most `slack_limit`% of the reservation of it, taken from the pool's entitlement."""
DEFAULT_SLACK_LIMIT = 20.0
TOLERANCE = 0.0009
"""DOMAIN §1: `a <= b` holds when `a - b < 0.0009`."""


def _empty() -> dict[str, float]:
    return {}


@dataclass(frozen=True, slots=True)
class JobDemand:
    """One job of a leaf pool, a leaf of the `dominant` (DRF) computation.

    `demand` is everything the job wants now: what its admitted non-revocable gangs hold plus what
    its queued non-revocable gangs need (jobs held back only by job limits included)."""

    job: str
    demand: Amounts = field(default_factory=_empty)
    weight: float = 1.0


@dataclass(frozen=True, slots=True)
class LeafUsage:
    """What a leaf pool holds and needs. `allocation`/`demand` are non-revocable; revocable gangs
    count in `revocable_allocation`/`revocable_demand` only.

    `jobs` matters only under `dominant` and `hdrf` (`JOB_POLICIES`). `None` means "one job": the pool's non-revocable
    allocation plus demand. Give the jobs when the caller knows them (DRF treats each job as a
    leaf: two jobs get twice the weight of one)."""

    allocation: Amounts = field(default_factory=_empty)
    demand: Amounts = field(default_factory=_empty)
    revocable_allocation: Amounts = field(default_factory=_empty)
    revocable_demand: Amounts = field(default_factory=_empty)
    jobs: tuple[JobDemand, ...] | None = None


NO_USAGE = LeafUsage()


@dataclass(frozen=True, slots=True)
class PoolInput:
    """One pool with its effective options. `parent` defaults to the parent of `path`."""

    path: str
    parent: str | None = None
    reservation: Amounts = field(default_factory=_empty)
    limit: Amounts | None = None
    share: float | Amounts = 1.0
    static: bool = False
    slack_limit: float = DEFAULT_SLACK_LIMIT
    usage: LeafUsage = NO_USAGE


@dataclass(frozen=True, slots=True)
class TreeInput:
    """One pool tree. `revocable_capacity` is the hosts' `revocable` resources (only its cpu is
    used: slack cpu). `allocation_slack` lends unused leaf reservations as slack cpu (MESOS-3896)."""

    kinds: tuple[str, ...]
    capacity: Amounts
    pools: tuple[PoolInput, ...] = ()
    revocable_capacity: Amounts = field(default_factory=_empty)
    policy: Policy = "per_resource"
    allocation_slack: bool = False


@dataclass(frozen=True, slots=True)
class Alert:
    """Something an operator should know about this computation.

    Codes: `reservations_exceed_capacity` (top-level reservations add up to more than the tree's
    capacity: a configuration matter, raised whatever the demand), `guarantees_scaled_down` (the
    guarantees claimed by the children of `path` exceeded what `path` had and were scaled down
    proportionally: never over-committed)."""

    code: str
    path: str
    kind: str
    message: str

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True, slots=True)
class PoolEntitlement:
    """One pool's result. Shares are fractions of the tree's capacity, reduced to their dominant
    (largest) component; `dominant_kind` is the kind of the largest component of the pool's
    requirement (None when it requires nothing)."""

    path: str
    entitlement: dict[str, float]
    non_slack_entitlement: dict[str, float]
    slack_entitlement: dict[str, float]
    requirement: dict[str, float]
    fair_share: float
    usage_share: float
    demand_share: float
    dominant_kind: str | None


@dataclass(frozen=True, slots=True)
class Lending:
    """Step 3 of `per_resource` (the unclaimed rest of a parent, lent by share, capped at the
    limit), as `(pools, kinds)` matrices in row order: each row's `given` (steps 1 and 2), its
    sibling group's `per_share`, its `share` and its `limit` (inf: none). The entitlement matrix
    is `max(given, min(given + per_share * share, limit))`, element by element."""

    given: FloatArray
    per_share: FloatArray
    share: FloatArray
    limit: FloatArray


class StopLike(Protocol):
    """`hdrf.Stop`: a kind that stopped some job of a pool, used up at pool `at` (`/`: the tree)."""

    @property
    def kind(self) -> str: ...

    @property
    def at(self) -> str: ...


class TreeEntitlements(Mapping[str, PoolEntitlement]):
    """The result of one computation: `path -> PoolEntitlement`, built on access.

    Matrices are `(pools, kinds)` in `kinds` order, rows in `paths` order (row 0 is the root)."""

    __slots__ = (
        "_dominant",
        "_index",
        "_lists",
        "_shares",
        "alerts",
        "capacity",
        "entitlement_matrix",
        "kinds",
        "lending",
        "non_slack_matrix",
        "paths",
        "policy",
        "requirement_matrix",
        "slack_capacity",
        "slack_matrix",
        "stops",
    )

    def __init__(
        self,
        *,
        policy: Policy,
        kinds: tuple[str, ...],
        paths: tuple[str, ...],
        index: Mapping[str, int],
        capacity: Mapping[str, float],
        slack_capacity: Mapping[str, float],
        entitlement: FloatArray,
        non_slack: FloatArray,
        slack: FloatArray,
        requirement: FloatArray,
        shares: FloatArray,
        dominant: IntArray,
        alerts: tuple[Alert, ...],
        stops: Mapping[str, tuple[StopLike, ...]] | None = None,
        lending: Lending | None = None,
    ) -> None:
        self.policy: Policy = policy
        self.kinds = kinds
        self.paths = paths
        self._index = index
        self.capacity: dict[str, float] = dict(capacity)
        self.slack_capacity: dict[str, float] = dict(slack_capacity)
        self.entitlement_matrix = entitlement
        self.non_slack_matrix = non_slack
        self.slack_matrix = slack
        self.requirement_matrix = requirement
        self._shares = shares  # (pools, 3): fair, usage, demand
        self._dominant = dominant  # kind index, -1 for none
        self.alerts = alerts
        self.stops: Mapping[str, tuple[StopLike, ...]] = stops or {}
        """Under `hdrf`: per pool path, the kinds that stopped some of its jobs and where they were
        used up (`hdrf.Stop`); a pool whose jobs all had their demand met is not listed."""
        self.lending = lending  # `per_resource`'s step 3 (`Lending`); None under the other policies
        self._lists: tuple[list[list[float]], ...] | None = None

    def row_of(self, path: str) -> int:
        return self._index[path]

    @property
    def shares_matrix(self) -> FloatArray:
        """(pools, 3): each pool's fair, usage and demand share, in the order of `paths`."""
        return self._shares

    @property
    def dominant_index(self) -> IntArray:
        """Each pool's dominant kind (an index into `kinds`; -1: none), in the order of `paths`."""
        return self._dominant

    def __getitem__(self, path: str) -> PoolEntitlement:
        row = self._index[path]
        if self._lists is None:  # once: plain lists are much faster to read row by row
            self._lists = (
                self.entitlement_matrix.tolist(),
                self.non_slack_matrix.tolist(),
                self.slack_matrix.tolist(),
                self.requirement_matrix.tolist(),
                self._shares.tolist(),
            )
        ent, non_slack, slack, req, shares = self._lists
        kinds = self.kinds
        fair, usage, demand = shares[row]
        dom = int(self._dominant[row])
        return PoolEntitlement(
            path=path,
            entitlement=dict(zip(kinds, ent[row], strict=True)),
            non_slack_entitlement=dict(zip(kinds, non_slack[row], strict=True)),
            slack_entitlement=dict(zip(kinds, slack[row], strict=True)),
            requirement=dict(zip(kinds, req[row], strict=True)),
            fair_share=fair,
            usage_share=usage,
            demand_share=demand,
            dominant_kind=kinds[dom] if dom >= 0 else None,
        )

    def rows(self) -> Iterator[tuple[str, list[float], list[float], list[float], float, float, float, str | None]]:
        """Every pool's numbers as plain values, in the order of `paths`: (path, entitlement,
        non-slack entitlement, slack entitlement (each per kind, in `kinds` order), fair share,
        usage share, demand share, dominant kind). The numbers `__getitem__` gives, without
        building a `PoolEntitlement` per pool."""
        kinds = self.kinds
        ent, non_slack, slack = (m.tolist() for m in (self.entitlement_matrix, self.non_slack_matrix,
                                                      self.slack_matrix))
        shares = self._shares.tolist()
        dominant = self._dominant.tolist()
        for row, path in enumerate(self.paths):
            fair, usage, demand = shares[row]
            dom = int(dominant[row])
            yield (path, ent[row], non_slack[row], slack[row], fair, usage, demand,
                   kinds[dom] if dom >= 0 else None)

    def __iter__(self) -> Iterator[str]:
        return iter(self.paths)

    def __len__(self) -> int:
        return len(self.paths)

    def __contains__(self, path: object) -> bool:
        return path in self._index

    def entitlement(self, path: str, kind: str) -> float:
        """One number, without building the pool's dicts."""
        return float(self.entitlement_matrix[self._index[path], self.kinds.index(kind)])


def amount(values: Amounts | None, kind: str, default: float) -> float:
    """`values[kind]`, or `default` when the map or the kind is missing; NaN reads as default."""
    if values is None:
        return default
    v = values.get(kind)
    if v is None or math.isnan(v):
        return default
    return float(v)
