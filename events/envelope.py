"""The envelope every event travels in, and the union of all event types."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Annotated

from pydantic import AwareDatetime, Field

from events.base import Frozen
from events.decisions import (
    CycleCompleted,
    EntitlementsComputed,
    GangAdmitted,
    GangFinished,
    GangMovedToQueue,
    GangRequeued,
    GangTimedOut,
    InputRejected,
    PoolStarvationChanged,
    PreemptionRequested,
)
from events.inputs import (
    ClockTicked,
    GangCancelled,
    GangEnqueued,
    HostRegistered,
    HostRemoved,
    PoolConfigChanged,
    PoolDeleted,
    TaskStateChanged,
    TreeConfigured,
)

InputEvent = (
    TreeConfigured
    | PoolConfigChanged
    | PoolDeleted
    | HostRegistered
    | HostRemoved
    | GangEnqueued
    | TaskStateChanged
    | GangCancelled
    | ClockTicked
)
DecisionEvent = (
    EntitlementsComputed
    | CycleCompleted
    | GangAdmitted
    | GangFinished
    | GangMovedToQueue
    | GangTimedOut
    | GangRequeued
    | PreemptionRequested
    | PoolStarvationChanged
    | InputRejected
)
AnyEvent = Annotated[InputEvent | DecisionEvent, Field(discriminator="type")]

EVENT_TYPES: dict[str, type[Frozen]] = {
    cls.model_fields["type"].default: cls
    for cls in (
        TreeConfigured,
        PoolConfigChanged,
        PoolDeleted,
        HostRegistered,
        HostRemoved,
        GangEnqueued,
        TaskStateChanged,
        GangCancelled,
        ClockTicked,
        EntitlementsComputed,
        CycleCompleted,
        GangAdmitted,
        GangFinished,
        GangMovedToQueue,
        GangTimedOut,
        GangRequeued,
        PreemptionRequested,
        PoolStarvationChanged,
        InputRejected,
    )
}
CURRENT_VERSIONS: dict[str, int] = {name: cls.model_fields["version"].default for name, cls in EVENT_TYPES.items()}

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class Envelope(Frozen):
    """One event on the log.

    - `id`: unique; published as `Nats-Msg-Id` so a retried publish is stored once. Inputs carry
      the submitter's id; decisions carry an id derived from (source, basis, what was decided).
    - `time`: when it happened, by the log's clock (decisions: the time of their basis).
    - `source`: who wrote it (`tree`, `admission`, `cli`, `sdk:<name>`, `scenario`, ...).
    - `causation`: id of the event that caused this one, if any.
    - `basis`: for decisions, the stream sequence of the last event the decision had applied.
    - `trace`: W3C trace context (`traceparent`, `tracestate`), when tracing is on.
    """

    id: str = Field(min_length=1, max_length=200)
    time: AwareDatetime
    source: str = "unknown"
    causation: str | None = None
    basis: int | None = None
    trace: dict[str, str] | None = None
    event: AnyEvent

    @property
    def type(self) -> str:
        return self.event.type

    @property
    def seconds(self) -> float:
        """The event time as seconds since the epoch (what the pure domain code works with)."""
        return (self.time - EPOCH).total_seconds()


def derived_id(*parts: object) -> str:
    """A deterministic event id from the parts that identify a decision (no clock, no random):
    the first 32 hex digits of the SHA-256 of the parts joined with `\x1f`."""
    # (`map`, not a generator: made per decision, a task report's `GangFinished` the most)
    return hashlib.sha256("\x1f".join(map(str, parts)).encode()).hexdigest()[:32]


class DerivedIds:
    """`derived_id(*parts, key)` for many keys after the same `parts` (a cycle's decisions share
    service, basis and tree): the parts are hashed once and the hash copied for each key."""

    __slots__ = ("_prefix",)

    def __init__(self, *parts: object) -> None:
        # (no generator: made per message; no parts, no separator, as derived_id(key) has none)
        self._prefix = hashlib.sha256((("\x1f".join(map(str, parts)) + "\x1f") if parts else "").encode())

    def __call__(self, key: object) -> str:
        digest = self._prefix.copy()
        digest.update(str(key).encode())
        return digest.hexdigest()[:32]


def at_seconds(seconds: float) -> datetime:
    """The UTC datetime `seconds` after the epoch (scenario time `at` maps here)."""
    return datetime.fromtimestamp(seconds, tz=UTC)
