"""Preemption's pure part behind the `Folder` shape."""

from __future__ import annotations

from datetime import datetime

from events import Envelope, at_seconds, derived_id
from events.subjects import PREFIX
from services.admission.domain.state import Outcome
from services.preemption.domain.state import SERVICE, PreemptionState

SUBJECTS: tuple[str, ...] = (
    f"{PREFIX}.hosts",
    f"{PREFIX}.config.*",
    f"{PREFIX}.gang.*",
    f"{PREFIX}.task.*",
    f"{PREFIX}.clock.*",
    f"{PREFIX}.decision.*.admission",
    f"{PREFIX}.decision.*.preemption",
)


class PreemptionFolder:
    service = SERVICE

    def __init__(self, state: PreemptionState | None = None) -> None:
        self.state = state or PreemptionState()

    @property
    def now(self) -> float:
        return self.state.now

    def owns(self, subject: str) -> bool:
        return False  # admission rejects malformed inputs; preemption owns no input subject

    def step(self, envelope: Envelope, seq: int) -> list[Envelope]:
        outcomes = self.state.apply(envelope.event, seq, envelope.seconds)
        if not outcomes:
            return []
        time = at_seconds(self.state.now)
        return [self._wrap(o, seq, envelope.id, time) for o in outcomes]

    @staticmethod
    def _wrap(outcome: Outcome, basis: int, causation: str, time: datetime) -> Envelope:
        return Envelope(id=derived_id(SERVICE, basis, outcome.key), time=time, source=SERVICE,
                        causation=causation, basis=basis, event=outcome.event)
