"""What no state keeps: the history of a gang's decisions (`History`), noted by a service as it
folds events and makes decisions: the reason of a refusal, a cancellation, a requeue or a
preemption is only in those events, and the findings those notes give. It is part of admission's
snapshot (`ExplainingFolder.export`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import cast

from events import (
    Event,
    GangAdmitted,
    GangCancelled,
    GangFinished,
    GangRequeued,
    GangTimedOut,
    InputRejected,
    PreemptionRequested,
    event_class,
)
from services.admission.domain.explain_text import at_text, clock_text
from services.admission.domain.explanation import Finding


@dataclass(slots=True)
class GangNotes:
    """What happened to one gang that the admission state does not keep."""

    admitted_queue: str | None = None
    rejection: str | None = None  # why its first members were refused ("reason [rule]")
    refusal: str | None = None  # why members were last refused (the gang stands)
    cancel_reason: str | None = None
    cancelled_at: float | None = None
    requeue_reason: str | None = None
    requeued_at: float | None = None
    finished_at: float | None = None
    preempted_reason: str | None = None  # why preemption took it last (pool, numbers)
    preempted_at: float | None = None


# A `GangNotes` as a plain tuple of its fields in order: how `History` pickles the notes (a dict
# of tuples is pickled and loaded in C; a slotted dataclass goes through Python per gang:
# docs/performance.md, "What-if (issue 21)"),
# and how it holds them after a load until a gang's notes are first read (`History._found`).
Packed = tuple[str | None, str | None, str | None, str | None, float | None, str | None, float | None,
               float | None, str | None, float | None]


def packed(notes: GangNotes) -> Packed:
    """`notes` as a tuple of its fields, in order (`GangNotes(*packed(notes)) == notes`)."""
    return (notes.admitted_queue, notes.rejection, notes.refusal, notes.cancel_reason, notes.cancelled_at,
            notes.requeue_reason, notes.requeued_at, notes.finished_at, notes.preempted_reason, notes.preempted_at)


# The events `History.observe` learns from (others need not be shown to it), and those of them
# whose notes keep the time they happened (the others may be shown with any time).
OBSERVED: frozenset[type[Event]] = frozenset({GangAdmitted, GangCancelled, GangRequeued, GangTimedOut, GangFinished,
                                              InputRejected, PreemptionRequested})
TIMED: frozenset[type[Event]] = frozenset({GangRequeued, GangTimedOut, GangFinished, PreemptionRequested})


@dataclass(slots=True)
class History:
    """Notes per (tree, gang), kept by observing every event folded and every decision made."""

    notes: dict[tuple[str, str], GangNotes | Packed] = field(default_factory=dict)
    """Each gang's notes: a `GangNotes`, or as loaded from a snapshot (`Packed`) until first read."""
    admitted: dict[tuple[str, str], str] = field(default_factory=dict)
    """The queue each gang was last admitted from: kept apart from `notes`, since nearly every
    gang has one and few have any other note."""

    def __getstate__(self) -> tuple[dict[tuple[str, str], Packed], dict[tuple[str, str], str]]:
        return {key: notes if isinstance(notes, tuple) else packed(notes) for key, notes in self.notes.items()}, \
            self.admitted

    def __setstate__(self, state: tuple[dict[tuple[str, str], GangNotes | Packed], dict[tuple[str, str], str]]) -> None:
        self.notes, self.admitted = state  # the notes stay tuples: most finished gangs' are never read

    def _found(self, key: tuple[str, str]) -> GangNotes | None:
        found = self.notes.get(key)
        if isinstance(found, tuple):
            found = self.notes[key] = GangNotes(*found)
        return found

    def get(self, tree: str, gang: str) -> GangNotes:
        key = (tree, gang)
        notes = self._found(key)
        queue = self.admitted.get(key)
        if queue is None:
            return notes or GangNotes()
        return GangNotes(admitted_queue=queue) if notes is None else replace(notes, admitted_queue=queue)

    def _of(self, tree: str, gang: str) -> GangNotes:
        found = self._found((tree, gang))
        if found is None:
            found = self.notes[(tree, gang)] = GangNotes()
        return found

    def forget(self, tree: str, gang: str) -> None:
        """The gang was forgotten (its tree's `gang_retention`): so are its notes."""
        self.notes.pop((tree, gang), None)
        self.admitted.pop((tree, gang), None)

    def observe(self, event: Event, time: float) -> None:
        """Note what `event` (stamped `time`, seconds) tells about a gang; other events are ignored."""
        if event_class(event) is GangAdmitted:  # the model (as decided), or a view of it (events.views)
            admitted = cast(GangAdmitted, event)
            self.admitted[(admitted.tree, admitted.gang)] = admitted.queue
        elif isinstance(event, GangCancelled):
            self._of(event.tree, event.gang).cancel_reason = event.reason
        elif isinstance(event, GangRequeued):
            notes = self._of(event.tree, event.gang)
            notes.requeue_reason, notes.requeued_at = f"{event.cause.replace('_', ' ')}: {event.reason}", time
        elif isinstance(event, GangTimedOut):
            self._of(event.tree, event.gang).finished_at = time
        elif isinstance(event, PreemptionRequested):
            notes = self._of(event.tree, event.gang)
            notes.preempted_reason, notes.preempted_at = f"pool {event.pool}: {event.reason}", time
        elif isinstance(event, GangFinished):
            notes = self._of(event.tree, event.gang)
            notes.finished_at = time
            if event.outcome == "cancelled":
                notes.cancelled_at = time
            elif event.outcome == "rejected" and notes.refusal is not None:
                notes.rejection, notes.refusal = notes.refusal, None  # the refusal of its first members
        elif (isinstance(event, InputRejected) and event.input_type == "GangEnqueued" and event.tree is not None
              and event.rule != "gang_forgotten"):  # (no notes again for a gang forgotten)
            self._of(event.tree, event.ref).refusal = f"{event.reason} [{event.rule}]"


# --- what the notes say -------------------------------------------------------------------------


# "over non-slack entitlement since 1795870144.158: ..." in preemption's reason (a decision's
# text, kept as written): the log time said as a time where explain shows it
_SINCE = re.compile(r"\bsince (\d+(?:\.\d+)?):")


def preempted_findings(notes: GangNotes) -> list[Finding]:
    """Why preemption took the gang, if it did: the pool and the numbers that made it necessary."""
    if notes.preempted_reason is None:
        return []
    reason = _SINCE.sub(lambda found: f"since {clock_text(float(found.group(1)))}:", notes.preempted_reason)
    return [Finding("preempted", f"taken by preemption {at_text(notes.preempted_at)}({reason})",
                    {"at": notes.preempted_at})]


def refused_findings(notes: GangNotes) -> list[Finding]:
    """Why members of the gang were last refused, if any were (the gang stands)."""
    if notes.refusal is None:
        return []
    return [Finding("refused_members", f"members refused: {notes.refusal}", {"reason": notes.refusal})]
