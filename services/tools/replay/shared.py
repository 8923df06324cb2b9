"""Admission's and preemption's folds on one `AdmissionState`, for a replay that folds both from
the start (`Verifier` without snapshots).

Live, preemption keeps a copy of admission's fold (`PreemptionState.admission`), read from the
log through `CycleOrder`: the events in the order admission's fold applies them (an admission
cycle's decisions at its trigger, then what came after it, in log order). Folding both services
as they run live folds admission's state twice (its handlers were ~45% of the verifier's CPU).
Here admission's folder steps once, and after each event admission's state applies (an input, or
each decision of a cycle as the cycle makes it, at its trigger) preemption's own part runs on the
same state (`PreemptionState.applied`): the same events in the same order as `CycleOrder` gives
preemption, with the re-derived cycle decisions where live preemption reads the recorded ones.

So on a log whose admission decisions all match their records, preemption's fold goes through
the states it goes through live (the decisions it re-derives are its own, and compared with what
it recorded: a forged, changed or missing preemption decision is found as before). On a log where
an admission decision does not match, that is found (admission's `differs`/`unexpected`/
`missing`), and preemption's decisions are re-derived from the admission decisions the log should
hold: a preemption decision based on the forged ones may be reported too. A snapshot start
(`--from`) folds each service on its own (their states are of different positions).

A poison input (a fold that raises) is refused by both services, as live (each folds it with the
same code: `rejection_of_fault`, preemption's at part 0 as `CycleOrder` steps it); a raise in
preemption's own part only is preemption's refusal.
"""

from __future__ import annotations

from datetime import datetime
from typing import cast

from events import CYCLE_DECISION_TYPES, Envelope, Event, PreemptionRequested, at_seconds
from events.views import VIEWS
from services.admission.domain.decide import run_cycles
from services.admission.domain.state import SERVICE as ADMISSION
from services.admission.domain.state import AdmissionState, Outcome
from services.admission.envelopes import decision_envelopes
from services.admission.folder import OWNED_PREFIXES, naming_part, seconds_of
from services.common.folding import decision_envelope, rejection_of_fault
from services.preemption.domain.state import ACTS_ON, PreemptionState
from services.preemption.domain.state import SERVICE as PREEMPTION

_MODEL_OF: dict[type, type[Event]] = {view: model for model, view in VIEWS.items() if issubclass(model, Event)}


class SharedFolds:
    """`AdmissionFolder` (a `Folder`: `step` returns admission's decisions) and preemption's fold
    (`PreemptionState`) on one admission state; preemption's decisions are collected in
    `preempted` (the caller takes them)."""

    service = ADMISSION

    def __init__(self) -> None:
        self.state = AdmissionState()
        self.preemption = PreemptionState(admission=self.state)
        self.preempted: list[Envelope] = []
        self._now, self._at = 0.0, at_seconds(0.0)  # (`_time`)

    @property
    def now(self) -> float:
        return self.state.now

    def owns(self, subject: str) -> bool:  # (`AdmissionFolder.owns`: preemption owns no input subject)
        return subject.startswith(OWNED_PREFIXES)

    def _time(self, now: float) -> datetime:
        """`at_seconds(now)`, made once per distinct time (the decisions of a whole message, or of
        several in a row at one time, share it: an equal, immutable value)."""
        if now != self._now:
            self._now, self._at = now, at_seconds(now)
        return self._at

    def take(self) -> list[Envelope]:
        """Preemption's decisions since the last `take`."""
        out, self.preempted = self.preempted, []
        return out

    def step(self, envelope: Envelope, seq: int, part: int = 0, last: bool = True) -> list[Envelope]:
        """`AdmissionFolder.step`; what `PreemptionFolder` decides of the same event (and of the
        cycles it starts) goes to `preempted`."""
        event = envelope.event
        if envelope.source == ADMISSION and event.type in CYCLE_DECISION_TYPES:  # (`is_cycle_decision`)
            return []  # applied at its trigger, as made (admission's and preemption's fold)
        state = self.state
        preemption = self.preemption
        kind = _MODEL_OF.get(type(event)) or type(event)  # (`event_class`, without its calls: per event)
        before = preemption.attempt_of(event) if kind is PreemptionRequested else None
        try:
            outcomes = state.apply(event, seq, seconds_of(envelope))
        except Exception as error:  # both services fold it: both refuse it, and its cycles run (as live)
            self.preempted.append(rejection_of_fault(PREEMPTION, envelope, seq, 0, error, state.now))
            refused = rejection_of_fault(ADMISSION, envelope, seq, part, error, state.now)
            cycles = self._cycles(envelope, seq) if last and (state.due or state.full) else []
            return [refused, *decision_envelopes(ADMISSION, cycles, seq, envelope.id, at_seconds(state.now))]
        if kind in ACTS_ON or preemption.open:  # (else preemption's part does nothing: most task reports)
            self._preempt(envelope, kind, seq, before, outcomes)
        decided = self._cycles(envelope, seq) if last and (state.due or state.full) else None  # (no list per event)
        if not outcomes and not decided:
            return []
        if part:
            outcomes = [naming_part(o, seq, part) for o in outcomes]
        if decided:
            outcomes += decided
        return decision_envelopes(ADMISSION, outcomes, seq, envelope.id, self._time(state.now))

    def _cycles(self, envelope: Envelope, seq: int) -> list[Outcome]:
        """The cycles due at the end of the message at `seq`, each decision followed by
        preemption's part of applying it."""
        cause = (envelope.id, self._time(self.state.now))  # (the cycles do not move the clock)
        preemption = self.preemption

        def applied(decision: Outcome, announced: list[Outcome]) -> None:
            event = decision.event
            kind = _MODEL_OF.get(type(event)) or type(event)  # (`event_class`, without its call: per decision)
            if kind in ACTS_ON or preemption.open:  # (else preemption's part does nothing, as in `step`)
                self._preempt(decision, kind, seq, None, announced, cause)

        return run_cycles(self.state, seq, applied)

    def _preempt(self, applied: Envelope | Outcome, kind: type, seq: int, before: int | None,
                 announced: list[Outcome], cause: tuple[str, datetime] | None = None) -> None:
        """Preemption's part of folding an input `applied` (or a cycle's decision: its envelope
        made of the `cause`, the id and time of the input whose cycle it is, when needed), which
        admission's state has applied."""
        state = self.preemption
        fault: Exception | None = None
        try:
            outcomes = state.applied(applied.event, kind, seq, before, announced)
        except Exception as error:
            outcomes, fault = [], error
        if not outcomes and fault is None:
            return
        if cause is None:
            envelope = cast(Envelope, applied)  # (an input: a view, maybe)
        else:
            envelope = decision_envelopes(ADMISSION, [cast(Outcome, applied)], seq, *cause)[0]
        if fault is not None:
            self.preempted.append(rejection_of_fault(PREEMPTION, envelope, seq, 0, fault, state.now))
        else:
            time = self._time(state.now)
            self.preempted += [decision_envelope(PREEMPTION, o.event, o.key, seq, envelope.id, time) for o in outcomes]
