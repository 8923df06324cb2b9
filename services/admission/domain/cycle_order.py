"""Reading admission's fold from the log: a cycle's decisions take effect at its trigger.

Admission applies a cycle's decisions as it makes them, at the end of the message that started
the cycle (its trigger: `state.py`), and publishes them; they land later in the log, after
whatever was published meanwhile. A service that folds admission's state from the log (the
preemption service's copy; `replay --verify`) applies them at the trigger too: `CycleOrder`
holds back what comes after a trigger until that cycle is read whole (its `CycleCompleted`),
applies the cycle's decisions, then what it held, in log order. So every reader's fold goes
through the same states as admission's, in the same order, whatever the timing of the log.

Worked example. The log holds: 10 a pack of 1,000 enqueues (after it, tree `t` has made 5,000
gangs pending since its last cycle, its option `cycle_gangs`: a cycle is due); 11 a task report;
12 a tick; 13 admission's `EntitlementsComputed` (basis 10); 14 a pack of `GangAdmitted` (basis
10); 15 `CycleCompleted` (tree `t`, basis 10); 16 the tick's cycle (basis 12)... A reader folds
10, sees cycle (t, 10) due, holds 11 and 12, keeps 13 and 14 aside, and at 15 applies 13, 14, 15
(as of position 10), then 11 and 12 (the tick starts cycle (t, 12): what follows is held again
until 16...).

A cycle decision of a cycle not started (yet) is kept aside until its trigger is folded (a
publish batch that landed out of order); one of a cycle already applied, or of one the fold
never starts, is read and changes nothing.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar, cast

from events import CYCLE_DECISION_TYPES, CycleCompleted, Envelope, event_class

ADMISSION = "admission"

T = TypeVar("T")
Step = Callable[[Envelope, int], list[T]]  # fold one event at a position; what it leads to


def is_cycle_decision(envelope: Envelope) -> bool:
    """Whether the event is one of an admission cycle's decisions (applied at its trigger)."""
    return envelope.source == ADMISSION and envelope.event.type in CYCLE_DECISION_TYPES


class CycleOrder(Generic[T]):
    """Feeds the events of the log to `step` in the order admission's fold applies them.

    `step(envelope, seq)` folds one event (a cycle's decisions get their trigger's position as
    `seq`); `due()` names the trees whose cycle is due after the message just folded (the
    fold's `AdmissionState.take_due`)."""

    def __init__(self, step: Step[T], due: Callable[[], list[str]]) -> None:
        self._step = step
        self._due = due
        self._open: dict[tuple[str, int], list[Envelope]] = {}  # started cycles -> their decisions so far
        self._early: dict[tuple[str, int], list[Envelope]] = {}  # decisions of cycles not started yet
        self._held: deque[tuple[Envelope, int, bool]] = deque()
        self._position = 0  # the last position folded (not held)

    def export(self) -> tuple[object, ...]:
        """What is held and kept (for a snapshot): not the callbacks, which are the folder's wiring."""
        return (self._open, self._early, self._held, self._position)

    def load(self, state: tuple[object, ...]) -> None:
        self._open, self._early, self._held, self._position = state  # type: ignore[assignment]

    @property
    def holding(self) -> int:
        """How many events wait for a cycle's decisions."""
        return len(self._held)

    @property
    def kept(self) -> int:
        """How many decisions wait for their cycle's trigger."""
        return sum(len(decisions) for decisions in self._early.values())

    def waiting(self) -> list[tuple[str, int]]:
        """The cycles started and not read whole yet, as (tree, trigger): they share one trigger,
        since what comes after it is held."""
        return list(self._open)

    def settle(self, key: tuple[str, int]) -> list[T]:
        """The open cycle `key` was decided and applied by the caller: what was read of it is set
        aside, and what was held goes on (once no other cycle is open). For a reader that decides
        some trees itself (`services/admission/held_trees.py`): the cycle of a tree it takes over
        mid-way is decided where its fold stands, at that cycle's trigger, as its holder did."""
        self._open[key] = []
        out: list[T] = []
        self._apply(key, out)
        return out

    def feed(self, envelope: Envelope, seq: int, last: bool = True) -> list[T]:
        """One event of the log, at `seq` (`last`: the last event of its message); returns what
        folding it (and whatever it released) led to, in order."""
        out: list[T] = []
        self._feed(envelope, seq, last, out)
        return out

    def _feed(self, envelope: Envelope, seq: int, last: bool, out: list[T]) -> None:
        if is_cycle_decision(envelope):
            self._decision(envelope, out)
            return
        if self._open:
            self._held.append((envelope, seq, last))
            return
        out += self._step(envelope, seq)
        self._position = max(self._position, seq)
        if last:
            # every cycle the message starts is open before any of them is applied (one may be
            # complete already, its decisions kept aside: applying it drains what is held only
            # once none is open)
            complete: list[tuple[str, int]] = []
            for tree in self._due():
                key = (tree, seq)
                kept = self._open[key] = self._early.pop(key, [])
                if any(event_class(e.event) is CycleCompleted for e in kept):
                    complete.append(key)
            if self._early:  # kept for a trigger now folded that started no cycle here: never applied
                for stale in [key for key in self._early if key[1] <= seq]:
                    del self._early[stale]
            for key in complete:
                self._apply(key, out)

    def _decision(self, envelope: Envelope, out: list[T]) -> None:
        event = envelope.event
        basis = envelope.basis
        if basis is None:
            return
        key = (cast(str, getattr(event, "tree", "")), basis)
        decisions = self._open.get(key)
        if decisions is None:
            if basis <= self._position:
                return  # its trigger was folded and started no cycle, or it was applied: a copy
            decisions = self._early.setdefault(key, [])  # its trigger is still to come
        if decisions and event_class(decisions[-1].event) is CycleCompleted:
            return  # kept aside whole already: what comes after its close is a copy
        decisions.append(envelope)
        if event_class(event) is CycleCompleted and key in self._open:
            self._apply(key, out)

    def _apply(self, key: tuple[str, int], out: list[T]) -> None:
        """A cycle read whole: its decisions take effect (at its trigger), then what was held."""
        decisions = self._open.pop(key)
        trigger = key[1]
        for envelope in decisions:
            out += self._step(envelope, trigger)
        while self._held and not self._open:
            envelope, seq, last = self._held.popleft()
            self._feed(envelope, seq, last, out)
