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
- A pass whose close does not come is given up on, so that no lost close stops every instance's
  fold for good: a message on the tree's preemption subject that does not decode came after its
  point (`unreadable`: it may be that close, corrupt or a newer version's), or its close has not
  come within `give_up_seconds` of log time or `give_up_events` events read since it parked. It
  is then decided here as a takeover would decide it, and the fold goes on. Its decisions are
  kept by the tree gate until the holder's copy is seen, or sent when the tree comes here; but
  those of a pass given up on for a message that does not decode are dropped (`dropped`): that
  message may be the holder's copy, and the gate cannot see ids in it.
- A pass whose close was read before the fold reached it is read, even if its tree came here
  meanwhile (its decisions are in the log): such a tree's pass parks too (`_fold`).
- A pass whose holder's run raised (a bug) remembers only what it had set before it raised: the
  holder's refusal, on `poolwise.rejected.<tree>` (`subjects`: a per-tree instance reads it; it
  is never folded), makes this fold run it whole too and drop its decisions. A refusal read
  after its pass's close (late) is of a pass run already: it is not kept (`_closed_up_to`).

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

import logging
from collections import Counter, deque
from collections.abc import Callable
from contextlib import suppress
from typing import cast

from events import CycleCompleted, Envelope, InputRejected, event_class
from events.subjects import PREFIX
from services.admission.domain.cycle_order import CycleOrder
from services.admission.folder import seconds_of
from services.common.folding import rejection_of_fault
from services.common.log import Stored
from services.preemption.domain.state import SERVICE, PreemptionState
from services.preemption.folder import SUBJECTS, PreemptionFolder

logger = logging.getLogger(__name__)

# What `CycleOrder` holds open while a pass is parked: no tree is named so, no trigger is 0.
_PASS = ("", 0)
PASS_REF = "cycle:"  # a failed pass's refusal refers to it so (`failed_cycle`), then its trigger
REFUSALS = f"{PREFIX}.rejected.*"  # where a failed pass's refusal lands (read, never folded)
# How long a parked pass waits for its close before it is given up on (`_how`): log seconds
# (the events' own times, never the wall clock: every instance and every restart gives up at the
# same event), or events read meanwhile (what the fold holds back). Far above a failover's wait
# (docs/operations.md, "Trees spread over instances").
GIVE_UP_SECONDS = 60.0
GIVE_UP_EVENTS = 50_000

# How a parked pass is run: decided here (its tree held), read (its holder's close read: only what
# it remembers), given up on (its close too late: decided, and kept by the tree gate until the
# holder's copy is seen or the tree comes here), or given up on for a message on its subject that
# does not decode (decided, its decisions dropped: that message may be the holder's copy, which
# the gate cannot look into, so they would be kept for good, and sent again if the tree came here)
DECIDE, READ, GIVE_UP, UNREADABLE = "decided", "read", "given up", "given up, unreadable"


class _PassOrder(CycleOrder[Envelope]):
    def hold(self) -> None:
        """Hold what comes next, as behind an open cycle, until `settle(_PASS)`."""
        self._open[_PASS] = []

    def pass_open(self) -> bool:
        return _PASS in self._open


class HeldTreesPreemption(PreemptionFolder):
    """`PreemptionFolder` deciding the passes of the trees in `held` only (module doc).
    `decided`/`read`/`given_up`: passes decided here, read from the log, and given up on
    (decided here for a tree held elsewhere), per tree; `dropped`: the decisions of passes given
    up on for a message that does not decode, left out, per tree."""

    subjects = (*SUBJECTS, REFUSALS)
    give_up_seconds = GIVE_UP_SECONDS
    give_up_events = GIVE_UP_EVENTS

    def __init__(self, state: PreemptionState | None = None) -> None:
        super().__init__(state)
        self._held: frozenset[str] = frozenset()
        self.state.held = self._held
        self.decided: Counter[str] = Counter()
        self.read: Counter[str] = Counter()
        self.given_up: Counter[str] = Counter()
        self.dropped: Counter[str] = Counter()
        # told the tree of each pass it parks: a tree no subject names would be learnt by no lease
        # (nobody would hold it, and every instance would wait for its pass for good)
        self.on_waiting: Callable[[list[str]], None] | None = None
        self._reset()

    def _reset(self) -> None:
        self.order = _PassOrder(self._fold, self.state.admission.take_due)
        self._queued: deque[tuple[Envelope, int]] = deque()  # stepped while parked, in order
        self._at: tuple[int, str] = (0, "")  # the parked pass's basis and cause (the event folded there)
        self._cause: Envelope | None = None  # that event (a pass that raises is refused as its fold would be)
        self._ahead: Counter[tuple[str, int]] = Counter()  # preemption's closes read, not folded yet
        self._failed: set[tuple[str, int]] = set()  # passes whose holder's run raised (its refusal read)
        self._closed: dict[str, int] = {}  # tree -> the trigger of its latest pass whose close was folded
        self._lost: dict[str, int] = {}  # tree -> the last message on its preemption subject that did not decode
        self._waited = 0  # events read since the pass parked
        self._since = self._latest = 0.0  # the fold's time at the park, and the latest event time read since

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
        return self.state.parked is None and not self._queued and not cast(_PassOrder, self.order).pass_open()

    def waiting_trees(self) -> set[str]:
        """The tree whose pass the fold waits for (none, or one)."""
        parked = self.state.parked
        return set() if parked is None else {parked[0]}

    def waited(self) -> tuple[float, int]:
        """How long the fold has waited at a pass held elsewhere (log seconds), and how many events
        it holds back meanwhile (for the gauges: `services.common.metrics`)."""
        if self.state.parked is None:
            return (0.0, 0)
        return (self._latest - self._since, self.order.holding + len(self._queued))

    def feed(self, envelope: Envelope, seq: int, last: bool) -> list[Envelope]:
        self._see(envelope, 1)
        if self.state.parked is not None:
            self._waited += 1
            self._latest = max(self._latest, seconds_of(envelope))
        out = self._take_over()
        if event_class(envelope.event) is InputRejected:
            # read for `_failed` only: a refusal is no input of admission's fold (folded, its time
            # would fire timers a service-wide fold, which never reads it, fires later)
            return out
        out += self.order.feed(envelope, seq, last)
        out += self._take_over()
        return out

    def unreadable(self, stored: Stored) -> list[Envelope]:
        """A message that does not decode (`fold_batch`): on a tree's preemption subject, it may be
        the close the fold waits for (corrupt, or a newer version's): the pass it may close is
        given up on (`_how`), so that no instance's fold waits for it for good."""
        parts = stored.subject.split(".")
        if len(parts) == 4 and parts[0] == PREFIX and parts[1] == "decision" and parts[3] == SERVICE:
            self._lost[parts[2]] = stored.seq
        if self.state.parked is not None:
            self._waited += 1
        return self.traced(self._take_over())

    def _fold(self, envelope: Envelope, seq: int) -> list[Envelope]:
        if self.state.parked is not None:  # (only the cycle decisions of the parked pass's trigger)
            self._queued.append((envelope, seq))
            return []
        self._see(envelope, -1)
        # A held tree with a close read ahead (its pass may be the one published already: a tree
        # that came here after its old holder's close was read) parks too: `_how` reads it if so.
        ahead = self._ahead
        self.state.held = self._held if not ahead else self._held - {tree for tree, _ in ahead}
        out = super()._fold(envelope, seq)
        parked = self.state.parked
        if parked is not None:
            self._at, self._cause = (seq, envelope.id), envelope
            self._waited, self._since = 0, self.state.now
            self._latest = self._since
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
                self._closed_up_to(*key)
        elif kind is InputRejected and sign > 0:
            refusal = cast(InputRejected, event)
            if refusal.rule == "internal_error" and refusal.ref.startswith(PASS_REF) and refusal.tree is not None:
                with suppress(ValueError):
                    failed = (refusal.tree, int(refusal.ref[len(PASS_REF):]))
                    if failed[1] > self._closed.get(failed[0], -1):  # (a late one's pass has run: nothing to do)
                        self._failed.add(failed)

    def _closed_up_to(self, tree: str, trigger: int) -> None:
        """The close of `tree`'s pass at `trigger` was folded: that pass has run (parked ones run
        before their close is folded), and so have its tree's earlier ones (a tree's passes run in
        the order of their triggers), or they never will: what `_failed` holds of them goes."""
        self._closed[tree] = max(trigger, self._closed.get(tree, -1))
        if self._failed:
            self._failed = {(of, at) for of, at in self._failed if of != tree or at > trigger}

    def take_over(self) -> list[Envelope]:
        """Run the parked pass if it can run now (decided here if its tree is held, remembered if
        its holder's close was read, decided if it is given up on), then fold on; again while
        another is parked and can run. (The shell's, at a change of the trees held.)"""
        return self.traced(self._take_over())

    def _take_over(self) -> list[Envelope]:
        out: list[Envelope] = []
        while True:
            parked = self.state.parked
            if parked is None:
                if not self._queued and not cast(_PassOrder, self.order).pass_open():
                    return out
                out += self._go_on()  # (what a pass left waiting when something raised: `_run_parked`)
                continue
            how = self._how(parked)
            if how is None:
                return out
            out += self._run_parked(parked, *how)

    def _how(self, parked: tuple[str, int]) -> tuple[str, str] | None:
        """How the parked pass runs now (`DECIDE`, `READ`, `GIVE_UP`, `UNREADABLE`) and why it is
        given up on, or None: it waits."""
        tree, _ = parked
        if parked in self._ahead:  # (its close is read: its decisions are in the log, whoever holds it now)
            return READ, ""
        if tree in self._held:
            return DECIDE, ""
        if self._lost.get(tree, 0) > self._at[0]:  # (its close lands after its point: earlier ones are others')
            return UNREADABLE, f"a message on its subject that does not decode (seq {self._lost[tree]})"
        if self._waited >= self.give_up_events or self._latest - self._since >= self.give_up_seconds:
            return GIVE_UP, f"no close after {self._waited} events and {self._latest - self._since:.1f} s of log time"
        return None

    def _run_parked(self, parked: tuple[str, int], how: str, why: str) -> list[Envelope]:
        state = self.state
        state.parked = None
        tree, trigger = parked
        # A pass whose holder's run raised is run whole here too (its decisions dropped), so that
        # it remembers what the holder's remembered before it raised, not the whole pass.
        failed = parked in self._failed
        self._failed.discard(parked)
        out: list[Envelope] = []
        try:
            outcomes = state.run_pass(tree, trigger, picks=how != READ or failed)
            if how != READ:  # (read: its decisions are its holder's, in the log)
                out += self.envelopes(outcomes, *self._at)
        except Exception as error:  # refused as a service-wide fold refuses the event its pass ran at
            logger.exception("preemption: the pass of tree %s after seq %d raised", tree, trigger)
            if how != READ and self._cause is not None:
                out.append(rejection_of_fault(SERVICE, self._cause, self._at[0], 0, error, state.now))
        {DECIDE: self.decided, READ: self.read, GIVE_UP: self.given_up, UNREADABLE: self.given_up}[how][tree] += 1
        if how == GIVE_UP:
            logger.error("preemption: the pass of tree %s after seq %d is given up on: %s; decided here (kept until "
                         "its holder's copy is seen or the tree comes here), and the fold goes on", tree, trigger, why)
        elif how == UNREADABLE:
            self.dropped[tree] += len(out)
            logger.error("preemption: the pass of tree %s after seq %d is given up on: %s; decided here, its %d "
                         "decisions dropped (that message may be its holder's copy, which cannot be looked into), "
                         "and the fold goes on", tree, trigger, why, len(out))
            out = []
        return out + self._go_on()

    def _go_on(self) -> list[Envelope]:
        """What waited behind the pass just run goes on, in order: what it stepped meanwhile, then
        what `CycleOrder` held (either may park again). A step that raises is refused, and what
        waits behind it goes on: nothing stays held for good."""
        state, queued = self.state, self._queued
        out: list[Envelope] = []
        while queued and state.parked is None:
            envelope, seq = queued.popleft()
            try:
                out += self._fold(envelope, seq)
            except Exception as error:
                out.append(rejection_of_fault(SERVICE, envelope, seq, 0, error, state.now))
        order = cast(_PassOrder, self.order)
        if state.parked is None and order.pass_open():
            out += order.settle(_PASS)
        return out
