"""Admission's pure part behind the `Folder` shape: fold an event, then decide what is due."""

from __future__ import annotations

from datetime import datetime

from events import Envelope, at_seconds
from events.subjects import PREFIX
from services.admission.domain.decide import decide_tree
from services.admission.domain.state import SERVICE, AdmissionState, Outcome
from services.common.folding import decision_envelope

# What admission and preemption fold (preemption keeps a copy of admission's fold).
SUBJECTS: tuple[str, ...] = (
    f"{PREFIX}.hosts",
    f"{PREFIX}.config.*",
    f"{PREFIX}.gang.*",
    f"{PREFIX}.task.*",
    f"{PREFIX}.clock.*",
    f"{PREFIX}.decision.*.admission",
    f"{PREFIX}.decision.*.preemption",
)
OWNED_PREFIXES: tuple[str, ...] = (f"{PREFIX}.gang.", f"{PREFIX}.task.", f"{PREFIX}.clock.")


class AdmissionFolder:
    service = SERVICE

    def __init__(self, state: AdmissionState | None = None) -> None:
        self.state = state or AdmissionState()

    @property
    def now(self) -> float:
        return self.state.now

    def owns(self, subject: str) -> bool:
        return subject.startswith(OWNED_PREFIXES)

    def step(self, envelope: Envelope, seq: int) -> list[Envelope]:
        # 1. fold the event (timers due before it fire first); 2. run the cycles its tick started.
        state = self.state
        outcomes = state.apply(envelope.event, seq, envelope.seconds)
        if not outcomes and not state.due:
            return []
        due = state.take_due()
        time = at_seconds(state.now)  # the cycles change nothing, the clock neither
        decided = [self._wrap(o, seq, envelope.id, time) for o in outcomes]
        for tree in due:
            decided.extend(self._wrap(o, seq, envelope.id, time) for o in decide_tree(state, tree, seq))
        return decided

    @staticmethod
    def _wrap(outcome: Outcome, basis: int, causation: str, time: datetime) -> Envelope:
        return decision_envelope(SERVICE, outcome.event, outcome.key, basis, causation, time)
