"""Admission's pure part behind the `Folder` shape: fold an event, then run the cycles it
started (their decisions take effect at once; read back, they change nothing)."""

from __future__ import annotations

from datetime import datetime
from time import perf_counter

from events import Envelope, InputRejected, PoolDeleted, at_seconds
from events.subjects import PREFIX
from services.admission.domain.cycle_order import is_cycle_decision
from services.admission.domain.decide import run_cycles
from services.admission.domain.state import SERVICE, AdmissionState, Outcome
from services.admission.envelopes import decision_envelopes
from services.common import metrics, tracing
from services.common.folding import rejection_of_fault

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


class _Seconds:
    """`Envelope.seconds`, cheaper: `time.timestamp()` is the same number for an aware datetime
    (the time since the epoch, in seconds), and the decisions of one cycle share one time
    object, so the last answer is kept for it. Consecutive inputs (a pack from one submitter)
    often carry equal times in objects of their own: an equal time (the same instant) reuses the
    answer too, since comparing costs less than `timestamp()` with pydantic's `TzInfo` (0.44 µs)."""

    __slots__ = ("seconds", "time")

    def __init__(self) -> None:
        self.time: datetime | None = None
        self.seconds = 0.0

    def __call__(self, envelope: Envelope) -> float:
        time = envelope.time
        if time is not self.time and time != self.time:
            self.time, self.seconds = time, time.timestamp()
        return self.seconds


seconds_of = _Seconds()


class AdmissionFolder:
    service = SERVICE

    def __init__(self, state: AdmissionState | None = None) -> None:
        self.state = state or AdmissionState()
        self.traces = tracing.GangTraces()  # (the shell's: carried contexts, never read by a decision)

    @property
    def now(self) -> float:
        return self.state.now

    def owns(self, subject: str) -> bool:
        return subject.startswith(OWNED_PREFIXES)

    def export(self) -> AdmissionState:
        """The folded state, for a snapshot (`services/common/snapshots.py`)."""
        return self.state

    def load(self, state: AdmissionState) -> None:
        self.state = state

    def step(self, envelope: Envelope, seq: int, part: int = 0, last: bool = True) -> list[Envelope]:
        # 0. our own cycles' decisions, read back: applied when they were made (at the trigger).
        if is_cycle_decision(envelope):
            return []
        if type(envelope.event) is PoolDeleted:  # its counts go with it (services.common.metrics)
            metrics.TALLIES.pool_deleted(envelope.event.tree, envelope.event.path)
        try:
            out = self._step(envelope, seq, part, last)
            if tracing.ON:  # contexts carried from the submitters to the cycles' spans
                if envelope.trace is not None:  # (an input never ends a gang: admission's decisions do)
                    self.traces.see(envelope)
                    if tracing.LIVE:  # a task report or a cancel: joined to its gang's trace
                        tracing.received(envelope, self.traces)
                if out:
                    if not CYCLE.ran:
                        self.traces.see_all(out)  # (a gang finished)
                    elif tracing.LIVE:
                        out = tracing.decided(out, CYCLE.took, self.traces)
        finally:  # (a step that raised ran no cycle the next one could be taken for)
            CYCLE.ran = False
        return out

    def _step(self, envelope: Envelope, seq: int, part: int, last: bool) -> list[Envelope]:
        # 1. fold the event (timers due before it fire first);
        state = self.state
        try:
            outcomes = state.apply(envelope.event, seq, seconds_of(envelope))
        except Exception as error:  # a poison input: refused here, so that its message's cycles run
            # all the same (2.), where preemption's copy of this fold (`CycleOrder`) opens them:
            # one message later, preemption would hold the log for a cycle that never comes
            refused = rejection_of_fault(SERVICE, envelope, seq, part, error, state.now)
            if not (last and (state.due or state.full)):
                return [refused]
            time = at_seconds(state.now)
            return [refused, *decision_envelopes(SERVICE, timed_cycles(state, seq), seq, envelope.id, time)]
        # 2. at the end of its message, run the cycles it started (decided, then applied).
        cycles = timed_cycles(state, seq) if last and (state.due or state.full) else []
        if not outcomes and not cycles:
            return []
        if part:
            outcomes = [naming_part(o, seq, part) for o in outcomes]
        outcomes += cycles
        time = at_seconds(state.now)  # the cycles do not move the clock
        return decision_envelopes(SERVICE, outcomes, seq, envelope.id, time)  # not validated again


class _LastCycle:
    """Whether the step at hand ran cycles, and their wall time (for their span)."""

    __slots__ = ("ran", "took")

    def __init__(self) -> None:
        self.ran = False
        self.took = 0.0


CYCLE = _LastCycle()


def timed_cycles(state: AdmissionState, seq: int) -> list[Outcome]:
    """`run_cycles`, its wall time told to the metrics (two clock reads per cycle, not per event)."""
    began = perf_counter()
    cycles = run_cycles(state, seq)
    CYCLE.took = took = perf_counter() - began
    CYCLE.ran = True
    metrics.cycle_took(SERVICE, took)
    return cycles


def naming_part(outcome: Outcome, seq: int, part: int) -> Outcome:
    """A refusal of the `part`-th input of the pack at `seq` (part > 0) names that part, and its id
    differs from the refusal of another part of the same message (the first part's, like a
    message of one event's, is `rejected:<seq>`)."""
    event = outcome.event
    if not isinstance(event, InputRejected) or event.input_seq != seq:
        return outcome
    return Outcome(event.model_copy(update={"input_part": part}), f"{outcome.key}.{part}")
