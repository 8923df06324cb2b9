"""Decision events: what the services decided. Each records, in its envelope, the log position
(`basis`) it was based on, and has an id derived from its inputs."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from events.base import Event, Frozen, Resources
from events.inputs import TaskSpec


class PoolEntitlement(Frozen):
    """One pool's share of its tree, as computed by one entitlement cycle."""

    path: str
    entitlement: Resources
    non_slack_entitlement: Resources
    slack_entitlement: Resources
    fair_share: float = 0.0
    usage_share: float = 0.0
    demand_share: float = 0.0
    dominant_kind: str | None = None


class LentPool(Frozen):
    """A pool's own part of step 3 of `per_resource` (v3): `given` (what steps 1 and 2 gave it),
    `share` and `limit` (the kinds it has one of; none: no cap), per kind of its entitlement.
    Its entitlement is `max(given, min(given + factor * share, limit))` with its sibling group's
    `factor` (`events.lending`)."""

    path: str
    given: Resources
    share: Resources
    limit: Resources = Field(default_factory=dict)


class LendingFactor(Frozen):
    """What step 3 of `per_resource` lends per unit of share among the children of `group` (a
    pool's path), per kind: the unclaimed rest of the parent's entitlement over the sum of its
    children's shares (v3)."""

    group: str
    factor: Resources


class EntitlementsComputed(Event):
    """One admission cycle's entitlements of a tree, or a part of them.

    Readers keep each tree's entitlement map (path -> `PoolEntitlement`) and fold every event
    into it with `fold_entitlements`: `replace` empties the map first; then the paths in
    `removed` leave it, the `factors` are set (per sibling group), the `pools` are set and the
    `lent` pools get their lending part. A computation that fits one message is written whole,
    as one event with `replace` (what v1 always was: v1 events read as v2 with the defaults). A
    larger tree's is written as the pools whose (rounded) numbers changed since the tree's
    previous computation and the paths gone since, in `parts` events of at most
    `ENTITLEMENT_PART_POOLS` pools and well under 512 KiB each (`part` counts from 1; `alerts`
    and `factors` in the first; only a first part may `replace`). The cycle's decisions are
    applied at its trigger, so readers see the map of a whole computation
    (docs/architecture.md). v2 added `removed`, `replace`, `part` and `parts`.

    v3 added `factors` and `lent` (None when empty, so a small tree's whole event reads as
    before). Under `per_resource`, step 3 (the unclaimed rest of a parent, lent by share, capped
    at the limit) moves every pool's entitlement when one leaf's demand changes; so a pool in
    `lent` carries its own part of it (`LentPool`), and from then on, until it is written
    again, its `entitlement`, `non_slack_entitlement` and `fair_share` are computed from that
    part, its sibling group's latest factor (`factors`: written when it changes) and the map's
    latest `capacity`, exactly as the engine computed them (`events.lending.lent_pool`); its
    other numbers stay as written. The writer lends a pool only where that computation gives
    the engine's numbers to the bit, so every reader rebuilds the same map."""

    type: Literal["EntitlementsComputed"] = "EntitlementsComputed"
    version: Literal[3] = 3
    tree: str
    capacity: Resources
    slack_capacity: Resources = Field(default_factory=dict)
    pools: list[PoolEntitlement]
    alerts: list[str] = Field(default_factory=list)
    removed: list[str] = Field(default_factory=list)
    replace: bool = True
    part: int = Field(default=1, ge=1)
    parts: int = Field(default=1, ge=1)
    factors: list[LendingFactor] | None = None
    lent: list[LentPool] | None = None


ENTITLEMENT_PART_POOLS = 1000
"""At most this many pools (and removed paths) in one `EntitlementsComputed`."""

ENTITLEMENT_DIGITS = 9
"""Digits an `EntitlementsComputed` keeps of each number (`round(x, 9)`): enough for 0.0009
tolerance, stable across platforms. A lent pool's numbers are rounded so too."""

class GangAdmitted(Event):
    type: Literal["GangAdmitted"] = "GangAdmitted"
    version: Literal[1] = 1
    tree: str
    gang: str
    pool: str
    queue: str
    tasks: list[TaskSpec]
    attempt: int = 1


class GangMovedToQueue(Event):
    type: Literal["GangMovedToQueue"] = "GangMovedToQueue"
    version: Literal[1] = 1
    tree: str
    gang: str
    pool: str
    queue: Literal["non_preemptible", "controller", "revocable", "pending"]
    reason: str


class GangTimedOut(Event):
    type: Literal["GangTimedOut"] = "GangTimedOut"
    version: Literal[1] = 1
    tree: str
    gang: str
    pool: str
    members: int
    size: int
    deadline: float


class GangRequeued(Event):
    type: Literal["GangRequeued"] = "GangRequeued"
    version: Literal[1] = 1
    tree: str
    gang: str
    pool: str
    reason: str
    cause: Literal["placement_timeout", "preempted"] = "placement_timeout"


class PreemptionRequested(Event):
    type: Literal["PreemptionRequested"] = "PreemptionRequested"
    version: Literal[1] = 1
    tree: str
    pool: str
    gang: str
    tasks: list[str]
    reason: str
    excess: Resources = Field(default_factory=dict)
    entitlement: Resources = Field(default_factory=dict)
    allocation: Resources = Field(default_factory=dict)
    grace_period: float = 5.0


StarvationStatus = Literal["ok", "below_fair_share", "starving"]


class PoolStarvationChanged(Event):
    """A pool's starvation status changed (DOMAIN §6, YTsaurus): `below_fair_share` when, on some
    kind it demands, its non-slack allocation (`usage`) is below `min(non-slack entitlement *
    starvation_tolerance, demand)`; `starving` once that has lasted `starvation_timeout`; `ok`
    otherwise. `since` is when the pool entered `status`; `below_since` when its current stretch
    below fair share began (None when ok). `kinds` are the kinds it is below on. Decided by the
    preemption pass, with time from the log."""

    type: Literal["PoolStarvationChanged"] = "PoolStarvationChanged"
    version: Literal[1] = 1
    tree: str
    pool: str
    status: StarvationStatus
    previous: StarvationStatus = "ok"
    since: float
    below_since: float | None = None
    kinds: list[str] = Field(default_factory=list)
    usage: Resources = Field(default_factory=dict)
    entitlement: Resources = Field(default_factory=dict)
    demand: Resources = Field(default_factory=dict)


class GangFinished(Event):
    """A gang will take no more resources: every task ended (`done`), or it was cancelled, timed
    out, or refused at its first enqueue (`rejected`). Lets other services count unfinished gangs."""

    type: Literal["GangFinished"] = "GangFinished"
    version: Literal[1] = 1
    tree: str
    gang: str
    pool: str
    outcome: Literal["done", "cancelled", "timed_out", "rejected"]


# What an admission cycle decides, closed by its `CycleCompleted` (service admission): applied at
# the cycle's trigger (their `basis`), wherever they land in the log (docs/architecture.md, "Time,
# ticks and cycles"). Readers that fold admission's state place them there: services/admission/
# domain/cycle_order.py, and the `gangs` read model (projections/gangs.py).
CYCLE_DECISION_TYPES: frozenset[str] = frozenset(
    {"EntitlementsComputed", "GangAdmitted", "GangMovedToQueue", "CycleCompleted"}
)


class CycleCompleted(Event):
    """A service finished the decision cycle it ran at the tick (or cycle) at `trigger_seq`; every
    decision of that cycle precedes this event in the log. It tells readers (the next service in
    the chain, the scenario runner, replay) that the service has applied the log through there."""

    type: Literal["CycleCompleted"] = "CycleCompleted"
    version: Literal[1] = 1
    tree: str
    service: str
    trigger_seq: int
    decisions: int = 0


class InputRejected(Event):
    """An input (a command, or an event on the stream) was refused; nothing else changed.

    `ref` names what was refused (a pool path for config, a gang id for gangs, a task id, or the
    stream position of an undecodable message); `rule` is a short stable name of the broken rule;
    `input` is the offending input as it came (JSON text, or the raw bytes decoded leniently).
    `input_seq` is the refused input's stream position and `input_part` its place in the log
    message when that message is a pack of inputs (`events.encode_pack`; None: the first or only
    event of its message). v2 added `input_part` (v1 events read as v2 with it None)."""

    type: Literal["InputRejected"] = "InputRejected"
    version: Literal[2] = 2
    tree: str | None = None
    ref: str
    input_type: str
    reason: str
    rule: str
    field: str | None = None
    input: str = ""
    input_id: str | None = None
    input_seq: int | None = None
    input_part: int | None = Field(default=None, ge=1)


# A refusal quotes at most this many characters of its input: an input message may be up to the
# server's payload limit, and its refusal (the quote plus a reason) must still fit one message.
INPUT_QUOTE_LIMIT = 4096
FAULT_TEXT_LIMIT = 1000  # characters of an exception's text kept in its refusal


def fault_text(error: BaseException) -> str:
    """What a refusal (rule `internal_error`) says of an exception: its type and message
    (deterministic: the same input raises the same, so a replay derives the same refusal)."""
    return f"{type(error).__name__}: {error}"[:FAULT_TEXT_LIMIT]
