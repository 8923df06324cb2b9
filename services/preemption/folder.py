"""Preemption's pure part behind the `Folder` shape: admission's fold (its cycles' decisions
applied at their triggers: `CycleOrder`), and a pass after each admission cycle."""

from __future__ import annotations

from events import Envelope, PoolDeleted, at_seconds
from services.admission.domain.cycle_order import CycleOrder
from services.admission.domain.state import Outcome
from services.admission.folder import SUBJECTS as ADMISSION_SUBJECTS
from services.admission.folder import seconds_of
from services.common import metrics, tracing
from services.common.folding import decision_envelope, rejection_of_fault
from services.preemption.domain.state import SERVICE, PreemptionState

SUBJECTS = ADMISSION_SUBJECTS  # preemption folds what admission folds


class PreemptionFolder:
    service = SERVICE
    subjects = SUBJECTS  # what the service folds (a per-tree instance reads more: `HeldTreesPreemption`)

    def __init__(self, state: PreemptionState | None = None) -> None:
        self.state = state or PreemptionState()
        self.order = CycleOrder(self._fold, self.state.admission.take_due)
        self.traces = tracing.GangTraces()  # (the shell's: carried contexts, never read by a decision)

    @property
    def now(self) -> float:
        return self.state.now

    def owns(self, subject: str) -> bool:
        return False  # admission rejects malformed inputs; preemption owns no input subject

    def export(self) -> tuple[PreemptionState, tuple[object, ...]]:
        """The folded state and what `CycleOrder` holds, for a snapshot (services/common/snapshots.py)."""
        return (self.state, self.order.export())

    def load(self, state: tuple[PreemptionState, tuple[object, ...]]) -> None:
        self.state = state[0]
        self.state.held, self.state.parked = None, None  # (a per-tree instance's snapshot: it decides every tree)
        self.order = CycleOrder(self._fold, self.state.admission.take_due)
        self.order.load(state[1])

    def step(self, envelope: Envelope, seq: int, part: int = 0, last: bool = True) -> list[Envelope]:
        if type(envelope.event) is PoolDeleted:  # its counts go with it (services.common.metrics)
            metrics.TALLIES.pool_deleted(envelope.event.tree, envelope.event.path)
        if not tracing.ON:
            return self.feed(envelope, seq, last)
        self.traces.see(envelope)  # a gang's context: its enqueue's, then admission's decision's
        return self.traced(self.feed(envelope, seq, last))

    def feed(self, envelope: Envelope, seq: int, last: bool) -> list[Envelope]:
        """`step` without its tracing: the decisions, as the log compares them."""
        return self.order.feed(envelope, seq, last)

    def traced(self, out: list[Envelope]) -> list[Envelope]:
        """Decisions carrying their gang's trace (while a live batch is folded with tracing on):
        every decision that leaves the folder goes through here once."""
        return tracing.preempted(out, self.traces) if out and tracing.ON and tracing.LIVE else out

    def _fold(self, envelope: Envelope, seq: int) -> list[Envelope]:
        """One event, at the position admission's fold applies it (a pass runs on an admission
        `CycleCompleted`: its decisions are based on that cycle's trigger)."""
        try:
            outcomes = self.state.apply(envelope.event, seq, seconds_of(envelope))
        except Exception as error:  # refused, and the fold goes on (CycleOrder's held events with it)
            return [rejection_of_fault(SERVICE, envelope, seq, 0, error, self.state.now)]
        return self.envelopes(outcomes, seq, envelope.id) if outcomes else []

    def envelopes(self, outcomes: list[Outcome], seq: int, cause: str) -> list[Envelope]:
        """Decisions based at `seq`, caused by event `cause`, in their envelopes (at the fold's time)."""
        time = at_seconds(self.state.now)
        return [decision_envelope(SERVICE, o.event, o.key, seq, cause, time) for o in outcomes]
