"""Preemption's folder for an instance that decides per tree (`--trees per-tree`): it decides the
passes of the trees it holds, and reads the others' from the log.

What a pass decides depends on the fold (admission's state as `CycleOrder` applies it, the
preemptions read back) and on what the tree's passes remember (`TreeMemory`: since when each pool
is over its entitlement, each pool's starvation). That memory is itself a fold: each pass sets it
from the state it runs on, and a pass's picks never change it (`preemption_pass(picks=False)`).
So every instance folds every tree and runs every pass, but for a tree it does not hold only the
part that remembers (no victim is picked: `_give_back`, `make_room`, the costly part, are
skipped), and it publishes nothing of it; whoever holds the tree decides the pass whole.

- A pass of a tree not held is *parked* where the fold reaches it (`PreemptionState.parked`):
  nothing after it is folded until the holder's `CycleCompleted` of that pass is read from the
  log (`_ahead`: read, not folded yet; it lands after the pass's point, since its holder decides
  at the same point of the same fold). Then the remembering part runs, on the state the holder
  decided on, and the fold goes on: through what it held, in the order a service-wide fold goes.
- A tree taken over while its pass is parked (its holder died before publishing the pass whole,
  or any of it) is decided here, on that same state: the fold stands at the pass's point
  (`take_over`, at the next message, or at once by the shell on a quiet log). What the old
  holder published of it has the same ids.

So the fold goes through the very states of a service-wide fold, in the same order, and what it
decides is what one instance decides. The price, as admission's (`services.admission.held_trees`):
an instance's fold waits, at each pass of a tree held elsewhere, for that holder to publish it
(a pass's decisions go out as soon as it is decided), and while a dead instance's trees have no
holder (the lease's TTL and a look, about 2 s) every instance waits for them. A snapshot is taken
only where nothing is parked (`settled`; `WhenSettled`), so either mode starts from the other's.

How it stops the fold: `CycleOrder` (admission's order) steps events into `_fold`; a pass parks
inside one such step, and `_PASS` is then held open in it like a cycle, so that what it is fed
waits (`CycleOrder` holds it, in log order). What it still steps while `_PASS` is open (the
decisions of other trees' cycles of the same trigger, read whole) waits here (`_queued`), in
order, and goes on first.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable
from contextlib import suppress
from typing import cast

from events import CycleCompleted, Envelope, InputRejected, event_class
from services.admission.domain.cycle_order import CycleOrder
from services.preemption.domain.state import SERVICE, PreemptionState
from services.preemption.folder import PreemptionFolder

# What `CycleOrder` holds open while a pass is parked: no tree is named so, no trigger is 0.
_PASS = ("", 0)
PASS_REF = "cycle:"  # a failed pass's refusal refers to it so (`failed_cycle`), then its trigger


class _PassOrder(CycleOrder[Envelope]):
    def hold(self) -> None:
        """Hold what comes next, as behind an open cycle, until `settle(_PASS)`."""
        self._open[_PASS] = []


class HeldTreesPreemption(PreemptionFolder):
    """`PreemptionFolder` deciding the passes of the trees in `held` only (module doc).
    `decided`/`read`: passes decided here and read from the log, per tree."""

    def __init__(self, state: PreemptionState | None = None) -> None:
        super().__init__(state)
        self._held: frozenset[str] = frozenset()
        self.state.held = self._held
        self.decided: Counter[str] = Counter()
        self.read: Counter[str] = Counter()
        # told the tree of each pass it parks: a tree no subject names would be learnt by no lease
        # (nobody would hold it, and every instance would wait for its pass for good)
        self.on_waiting: Callable[[list[str]], None] | None = None
        self._reset()

    def _reset(self) -> None:
        self.order = _PassOrder(self._fold, self.state.admission.take_due)
        self._queued: deque[tuple[Envelope, int]] = deque()  # stepped while parked, in order
        self._at: tuple[int, str] = (0, "")  # the parked pass's basis and cause (the event folded there)
        self._ahead: Counter[tuple[str, int]] = Counter()  # preemption's closes read, not folded yet
        self._failed: set[tuple[str, int]] = set()  # passes whose holder's run raised (its refusal read)

    @property
    def held(self) -> frozenset[str]:
        return self._held

    @held.setter
    def held(self, trees: frozenset[str]) -> None:
        self._held = trees
        self.state.held = trees

    def load(self, state: tuple[PreemptionState, tuple[object, ...]]) -> None:
        super().load(state)
        exported = self.order.export()
        self._reset()  # (a snapshot is taken only where nothing is parked: `settled`)
        self.order.load(exported)
        self.state.held = self._held
        # what `CycleOrder` holds was read: its closes are ahead (a pass parked later waits for a
        # close published after its point, so never for one of these; counted all the same)
        for envelope, _, _ in cast("deque[tuple[Envelope, int, bool]]", exported[2]):
            self._see(envelope, 1)

    def settled(self) -> bool:
        """Whether nothing is parked (the fold is a service-wide fold's through where it stands)."""
        return self.state.parked is None and not self._queued

    def waiting_trees(self) -> set[str]:
        """The tree whose pass the fold waits for (none, or one)."""
        parked = self.state.parked
        return set() if parked is None else {parked[0]}

    def step(self, envelope: Envelope, seq: int, part: int = 0, last: bool = True) -> list[Envelope]:
        self._see(envelope, 1)
        out = self.take_over()
        out += super().step(envelope, seq, part, last)
        out += self.take_over()
        return out

    def _fold(self, envelope: Envelope, seq: int) -> list[Envelope]:
        if self.state.parked is not None:  # (only the cycle decisions of the parked pass's trigger)
            self._queued.append((envelope, seq))
            return []
        self._see(envelope, -1)
        out = super()._fold(envelope, seq)
        parked = self.state.parked
        if parked is not None:
            self._at = (seq, envelope.id)
            cast(_PassOrder, self.order).hold()
            if self.on_waiting is not None:
                self.on_waiting([parked[0]])
        for made in out:
            if event_class(made.event) is CycleCompleted:
                self.decided[cast(CycleCompleted, made.event).tree] += 1
        return out

    def _see(self, envelope: Envelope, sign: int) -> None:
        """A close of a preemption pass read (1) or folded (-1): `_ahead` counts those between;
        and a pass's refusal read (its run raised: `failed_cycle`)."""
        if envelope.source != SERVICE:
            return
        event = envelope.event
        kind = event_class(event)
        if kind is CycleCompleted:
            close = cast(CycleCompleted, event)
            key = (close.tree, close.trigger_seq)
            self._ahead[key] += sign
            if self._ahead[key] <= 0:
                del self._ahead[key]
            if sign < 0:
                self._failed.discard(key)  # (its pass has run: parked ones run before their close is folded)
        elif kind is InputRejected and sign > 0:
            refusal = cast(InputRejected, event)
            if refusal.rule == "internal_error" and refusal.ref.startswith(PASS_REF) and refusal.tree is not None:
                with suppress(ValueError):
                    self._failed.add((refusal.tree, int(refusal.ref[len(PASS_REF):])))

    def take_over(self) -> list[Envelope]:
        """Run the parked pass if it can run now (decided here if its tree is held, remembered if
        its holder's close was read), then fold on; again while another is parked and can run."""
        out: list[Envelope] = []
        while (parked := self.state.parked) is not None:
            decide = parked[0] in self._held
            if not decide and parked not in self._ahead:
                break
            out += self._run_parked(parked, decide)
        return out

    def _run_parked(self, parked: tuple[str, int], decide: bool) -> list[Envelope]:
        state = self.state
        state.parked = None
        tree, trigger = parked
        # A pass whose holder's run raised is run whole here too (its decisions dropped), so that
        # it remembers what the holder's remembered before it raised, not the whole pass.
        failed = parked in self._failed
        self._failed.discard(parked)
        outcomes = state.run_pass(tree, trigger, picks=decide or failed)
        out: list[Envelope] = []
        if decide:
            out += self.envelopes(outcomes, *self._at)
            self.decided[tree] += 1
        else:
            self.read[tree] += 1  # (its decisions are its holder's, in the log)
        queued = self._queued
        while queued and state.parked is None:
            out += self._fold(*queued.popleft())
        if state.parked is None:
            out += self.order.settle(_PASS)  # what `CycleOrder` held goes on (and may park again)
        return out
