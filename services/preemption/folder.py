"""Preemption's pure part behind the `Folder` shape: admission's fold (its cycles' decisions
applied at their triggers: `CycleOrder`), and a pass after each admission cycle."""

from __future__ import annotations

from events import Envelope, at_seconds
from services.admission.domain.cycle_order import CycleOrder
from services.admission.folder import SUBJECTS as ADMISSION_SUBJECTS
from services.admission.folder import seconds_of
from services.common.folding import decision_envelope, rejection_of_fault
from services.preemption.domain.state import SERVICE, PreemptionState

SUBJECTS = ADMISSION_SUBJECTS  # preemption folds what admission folds


class PreemptionFolder:
    service = SERVICE

    def __init__(self, state: PreemptionState | None = None) -> None:
        self.state = state or PreemptionState()
        self.order = CycleOrder(self._fold, self.state.admission.take_due)

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
        self.order = CycleOrder(self._fold, self.state.admission.take_due)
        self.order.load(state[1])

    def step(self, envelope: Envelope, seq: int, part: int = 0, last: bool = True) -> list[Envelope]:
        return self.order.feed(envelope, seq, last)

    def _fold(self, envelope: Envelope, seq: int) -> list[Envelope]:
        """One event, at the position admission's fold applies it (a pass runs on an admission
        `CycleCompleted`: its decisions are based on that cycle's trigger)."""
        try:
            outcomes = self.state.apply(envelope.event, seq, seconds_of(envelope))
        except Exception as error:  # refused, and the fold goes on (CycleOrder's held events with it)
            return [rejection_of_fault(SERVICE, envelope, seq, 0, error, self.state.now)]
        if not outcomes:
            return []
        time = at_seconds(self.state.now)
        return [decision_envelope(SERVICE, o.event, o.key, seq, envelope.id, time) for o in outcomes]
