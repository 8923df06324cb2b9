"""The values of the preemption domain: what a pass decides, and what passes remember."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from events import PoolStarvationChanged, PreemptionRequested, StarvationStatus

GRACE_PERIOD = 5.0  # seconds between SIGTERM and SIGKILL for a running task
Bucket = Literal["non_slack", "slack"]
NON_SLACK: Bucket = "non_slack"
SLACK: Bucket = "slack"
Cause = Literal["over_entitlement", "lower_priority"]


@dataclass(frozen=True, slots=True)
class Preemption:
    """One gang to preempt: the event, why (`over_entitlement` between pools, `lower_priority`
    inside a pool), which allocation bucket it gives back to, and the gang it makes room for."""

    event: PreemptionRequested
    cause: Cause
    bucket: Bucket
    attempt: int
    for_gang: str | None = None

    @property
    def key(self) -> str:
        return f"preempt:{self.event.gang}:{self.attempt}"


@dataclass(slots=True)
class Starvation:
    """A pool's starvation status: since when it is in it, and since when it is below fair share."""

    status: StarvationStatus = "ok"
    since: float = 0.0
    below_since: float | None = None


@dataclass(slots=True)
class TreeMemory:
    """What the passes of one tree remember from one pass to the next. It is decided by the passes
    (not read back from the log), so replaying the log decides it again the same way."""

    over: dict[tuple[str, str], float] = field(default_factory=dict)  # (pool, bucket) -> over since
    starvation: dict[str, Starvation] = field(default_factory=dict)  # pool -> status


@dataclass(slots=True)
class PassResult:
    preemptions: list[Preemption] = field(default_factory=list)
    starvation: list[PoolStarvationChanged] = field(default_factory=list)
