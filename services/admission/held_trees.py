"""Admission's folder for an instance that decides per tree (`--trees per-tree`): it decides the
cycles of the trees it holds, and reads the others' from the log.

Every instance folds the whole log (one fold: its clock and timers span every tree, so a tree's
timeout fires at the first event of *any* tree past its time, and a fold of one tree's messages
alone would decide other things). What it no longer does for every tree is the costly part, the
admission cycle (entitlements, then admissions: `services.admission.domain.decide`):

- at a trigger (a tick, or an input message that filled a tree), the cycles of the trees held
  (`held`, set by the shell as the leases change) are decided and applied there, as a
  service-wide instance does;
- the cycles of the other trees are applied at their trigger when their holder's decisions are
  read from the log, through `CycleOrder` (as preemption reads admission's): what comes after the
  trigger waits until each such cycle is read whole. So the fold goes through the very states of
  a service-wide fold, in the same order, and decides the same things (what the fold itself
  decides, for every tree: timeouts, requeues, refusals; `services.common.tree_gate` publishes
  the held trees' and keeps the others' back). The held trees' cycles are decided before the
  others' of the same trigger are applied: a cycle reads its own tree only (and the
  configuration), so the order of trees within one trigger changes nothing;
- a tree taken over while its cycle waits (its holder died before publishing all of it) is
  decided here, where the fold stands: at that cycle's trigger, nothing after it folded, so from
  the state its holder decided it on (`_take_over`, at the next message; the shell ticks the tree
  so that one comes on a quiet log). What the holder had published of it has the same ids.

The price: an instance's fold waits, at each trigger, for the other trees' holders to publish
their cycles (a cycle's decisions are published as soon as it is decided, so about the time a
batch takes to reach the log and be read), and while a dead instance's trees have no holder (the
lease's TTL and a look, about 2 s) every instance waits for them. A snapshot is taken only where
nothing waits (`WhenSettled`), so it is the same state a service-wide instance saves, and either
mode starts from the other's.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import cast

from events import CycleCompleted, Envelope, at_seconds, event_class
from services.admission.domain.cycle_order import CycleOrder, is_cycle_decision
from services.admission.domain.state import SERVICE, AdmissionState
from services.admission.envelopes import decision_envelopes
from services.admission.folder import CYCLE, AdmissionFolder, naming_part, seconds_of, timed_cycles
from services.common.folding import rejection_of_fault
from services.common.snapshots import SnapshotPolicy


class HeldTreesFolder(AdmissionFolder):
    """`AdmissionFolder` deciding the cycles of the trees in `held` only (module doc).
    `decided`/`read`: cycles decided here and cycles read from the log, per tree (what the
    instance says of its work: `services.admission.service`)."""

    def __init__(self, state: AdmissionState | None = None) -> None:
        super().__init__(state)
        self.held: frozenset[str] = frozenset()
        self.decided: Counter[str] = Counter()
        self.read: Counter[str] = Counter()
        # Called with each cycle decision read from the log as it is applied (explain's notes).
        self.on_applied: Callable[[Envelope], None] | None = None
        # told the trees whose cycles it waits for: a tree only a message's body names (not its
        # subject) is learnt by no lease otherwise, so nobody would hold it and every instance
        # would wait for its cycle for good (review of 5bdadd2)
        self.on_waiting: Callable[[list[str]], None] | None = None
        self._reset()

    def _reset(self) -> None:
        self.order: CycleOrder[Envelope] = CycleOrder(self._fold_one, self._due)
        self._parts: deque[int] = deque()  # the pack parts of the inputs fed, until folded (in order)
        self._made: list[Envelope] = []  # held trees' cycles decided at the message just folded
        self._trigger: tuple[int, str] = (0, "")  # position and id of the last input folded
        self._looked: frozenset[str] | None = None  # the `held` that waiting cycles were looked at for

    def load(self, state: AdmissionState) -> None:
        super().load(state)
        self._reset()  # (a snapshot is taken only where nothing waits: `WhenSettled`)

    def settled(self) -> bool:
        """Whether nothing waits: no cycle open, no input held, no decision kept for a trigger."""
        order = self.order
        return not order.holding and not order.waiting() and not order.kept

    def waiting_trees(self) -> set[str]:
        """The trees whose cycle the fold waits for."""
        return {tree for tree, _ in self.order.waiting()}

    def step(self, envelope: Envelope, seq: int, part: int = 0, last: bool = True) -> list[Envelope]:
        if not is_cycle_decision(envelope):
            return super().step(envelope, seq, part, last)  # (-> `_step`)
        try:  # a cycle's decision read from the log: another instance's (applied at its trigger), or a copy
            out = self._take_over()
            out += self.order.feed(envelope, seq, last)
            return self._with_made(out)
        finally:
            CYCLE.ran = False

    def _step(self, envelope: Envelope, seq: int, part: int, last: bool) -> list[Envelope]:
        out = self._take_over()
        self._parts.append(part)
        out += self.order.feed(envelope, seq, last)
        return self._with_made(out)

    def _with_made(self, out: list[Envelope]) -> list[Envelope]:
        if self._made:
            out += self._made
            self._made = []
        return out

    def _fold_one(self, envelope: Envelope, seq: int) -> list[Envelope]:
        """One event where admission's fold applies it (`CycleOrder`'s step): an input (its
        refusals and what its timers decide), or another instance's cycle decision at its trigger."""
        out, self._made = self._made, []  # the cycles decided at the message before come first
        state = self.state
        if is_cycle_decision(envelope):
            state.apply(envelope.event, seq, state.now)  # as `run_cycles` applies them, at the trigger's time
            if self.on_applied is not None:
                self.on_applied(envelope)
            if event_class(envelope.event) is CycleCompleted:
                self.read[cast(CycleCompleted, envelope.event).tree] += 1
            return out
        part = self._parts.popleft()
        self._trigger = (seq, envelope.id)
        try:
            outcomes = state.apply(envelope.event, seq, seconds_of(envelope))
        except Exception as error:  # a poison input: refused, and its message's cycles still run (`_due`)
            out.append(rejection_of_fault(SERVICE, envelope, seq, part, error, state.now))
            return out
        if outcomes:
            if part:
                outcomes = [naming_part(o, seq, part) for o in outcomes]
            out += decision_envelopes(SERVICE, outcomes, seq, envelope.id, at_seconds(state.now))
        return out

    def _due(self) -> list[str]:
        """At the end of a message: decide the held trees' cycles it started (kept for the next
        fold's output, in order); the others' are waited for (returned to `CycleOrder`)."""
        state = self.state
        if not (state.due or state.full):
            return []
        due = state.take_due()
        held = self.held
        mine = [tree for tree in due if tree in held]
        if mine:
            self._made += self._decide(mine)
        theirs = [tree for tree in due if tree not in held]
        if theirs and self.on_waiting is not None:
            self.on_waiting(theirs)
        return theirs

    def _decide(self, trees: list[str]) -> list[Envelope]:
        """The cycles of `trees` at the trigger just folded, decided and applied (`run_cycles`)."""
        state = self.state
        seq, cause = self._trigger
        state.due = trees
        cycles = timed_cycles(state, seq)
        self.decided.update(trees)
        return decision_envelopes(SERVICE, cycles, seq, cause, at_seconds(state.now))

    def _take_over(self) -> list[Envelope]:
        """Decide the waiting cycles of trees held now (taken over before their holder published
        them whole): the fold stands at their trigger. What was held goes on after them."""
        held = self.held
        if held is self._looked:
            return []
        self._looked = held
        out: list[Envelope] = []
        for key in self.order.waiting():
            if key[0] in held:
                out += self._decide([key[0]])
                out += self.order.settle(key)
        return out


@dataclass
class WhenSettled(SnapshotPolicy):
    """A snapshot policy that waits until the folder has nothing waiting (`HeldTreesFolder.settled`):
    the state it saves is then the fold's through the position it names, like a service-wide
    instance's (a fold holding inputs behind an open cycle is not)."""

    settled: Callable[[], bool] = lambda: True

    @classmethod
    def of(cls, policy: SnapshotPolicy, settled: Callable[[], bool]) -> WhenSettled:
        return cls(**{f.name: getattr(policy, f.name) for f in fields(policy)}, settled=settled)

    def fold_settled(self) -> bool:  # (asked by every save path: live, a rebuild's, a clean stop's)
        return self.settled()
