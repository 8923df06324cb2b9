"""Preemption's pure part behind the `Folder` shape."""

from __future__ import annotations

from datetime import datetime

from events import Envelope, at_seconds
from services.admission.domain.state import Outcome
from services.admission.folder import SUBJECTS as ADMISSION_SUBJECTS
from services.admission.folder import seconds_of
from services.common.folding import decision_envelope
from services.preemption.domain.state import SERVICE, PreemptionState

SUBJECTS = ADMISSION_SUBJECTS  # preemption folds what admission folds


class PreemptionFolder:
    service = SERVICE

    def __init__(self, state: PreemptionState | None = None) -> None:
        self.state = state or PreemptionState()

    @property
    def now(self) -> float:
        return self.state.now

    def owns(self, subject: str) -> bool:
        return False  # admission rejects malformed inputs; preemption owns no input subject

    def step(self, envelope: Envelope, seq: int, part: int = 0) -> list[Envelope]:
        outcomes = self.state.apply(envelope.event, seq, seconds_of(envelope))
        if not outcomes:
            return []
        time = at_seconds(self.state.now)
        return [self._wrap(o, seq, envelope.id, time) for o in outcomes]

    @staticmethod
    def _wrap(outcome: Outcome, basis: int, causation: str, time: datetime) -> Envelope:
        return decision_envelope(SERVICE, outcome.event, outcome.key, basis, causation, time)
