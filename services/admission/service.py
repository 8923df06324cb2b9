"""The admission service: its folder on the log, its projections, and its clock.

The clock publishes a `ClockTicked` (time from the wall clock, never earlier than the log's)
when inputs were folded since the last cycle and the fold has reached the clock's previous tick
(under load at most every `MIN_CYCLE_INTERVAL`; after a quiet spell, `DEBOUNCE` later, so that
a burst shares one cycle), and when the earliest timer is due, so that timeouts fire on a quiet
log. It does not wait for the previous cycle's decisions to be published or read back: they
took effect at their trigger (`services/admission/domain/state.py`). No tick is published while
the previous one is still ahead of the fold, not even for a timer: that one's cycle will decide
what was folded meanwhile (in a burst, the fold runs behind the log), and it fires the timers
due by its time. Ticks are events: replay sees the same
ones. Scenario runs switch the clock off and publish their own ticks.
"""

from __future__ import annotations

import sys
import time
from functools import partial
from pathlib import Path
from typing import cast

import anyio
from anyio.abc import TaskStatus

from events import ClockTicked, Envelope, at_seconds, derived_id
from services.admission.domain.state import SERVICE, trees_ticked
from services.admission.folder import SUBJECTS, AdmissionFolder
from services.admission.held_trees import HeldTreesFolder, WhenSettled
from services.admission.queries import ExplainingFolder, answer, serve_queries
from services.common import tree_gate
from services.common.folding import Warm, run_folder
from services.common.log import EventLog
from services.common.requests import answer_until_cancelled
from services.common.snapshots import policy_for
from services.common.tree_gate import TreeGate, naming_holders, while_holding
from services.common.tree_leases import TreeLeases

DEBOUNCE = 0.002  # seconds: after a quiet spell, inputs arriving together share one cycle
QUIET = 0.05  # seconds without a tick after which the next one waits DEBOUNCE for more inputs
# Under load, ticks at most this often. A cycle has a fixed cost whatever it decides (entitlements
# of every pool, an EntitlementsComputed to write, read and project), so under a steady stream of
# inputs cycles as often as the debounce allows would take much of admission's CPU; spacing them
# costs a little latency per gang (docs/performance.md, session 6: "ticks at most every 10 ms").
MIN_CYCLE_INTERVAL = 0.01


class Clock:
    """`trees`: the tree leases of an instance deciding per tree (`services.common.tree_leases`):
    it ticks only the trees it holds (a `ClockTicked` naming the tree), and a timer's tick only
    when the earliest timer is of one of them (its holder ticks for it; a tick fires every timer
    due, whatever the tree, so one is enough). None: one tick for every tree."""

    def __init__(self, log: EventLog, folder: AdmissionFolder, trees: TreeLeases | None = None) -> None:
        self.log = log
        self.folder = folder
        self.trees = trees
        self.wake = anyio.Event()
        self.count = 0
        self.last_tick = float("-inf")  # monotonic time of the last tick
        self.tick_seq = 0  # where the last tick landed

    async def on_batch(self, last_seq: int) -> None:
        self.wake.set()

    def _ahead(self) -> bool:
        """Whether the last tick is still ahead of the fold: it will cycle what is folded before it,
        and fire the timers due by its time (see the module doc). No tick meanwhile."""
        return self.folder.state.last_seq < self.tick_seq

    def _wanted(self) -> bool:
        if self._ahead():
            return False
        if self.trees is None:
            return any(rt.dirty for rt in self.folder.state.trees.values())
        held = self.trees.held()
        return any(rt.dirty for name, rt in self.folder.state.trees.items() if name in held)

    def _deadline(self) -> float | None:
        """When the earliest timer this instance ticks for is due."""
        if self.trees is None:
            return self.folder.state.next_deadline()
        timer = self.folder.state.next_timer()
        return timer[0] if timer is not None and timer[1] in self.trees.held() else None

    async def follow_leases(self) -> None:
        """Look again whenever the trees held change (a tree taken over may wait for a cycle)."""
        assert self.trees is not None
        while True:
            await self.trees.changed()
            self.wake.set()

    async def run(self) -> None:
        self.wake.set()  # look once at start: inputs folded by the rebuild may be waiting for a cycle
        while True:
            deadline = self._deadline()
            # a timer due while a tick is ahead waits for the fold to read it (woken per batch)
            timeout = None if deadline is None or self._ahead() else max(0.0, deadline - time.time())
            with anyio.move_on_after(timeout if timeout is not None else 3600):
                await self.wake.wait()
            self.wake = anyio.Event()
            due = deadline is not None and time.time() >= deadline and not self._ahead()
            if self._wanted() or due:
                # Under load a tick goes out once the fold has read the previous one, and at least
                # MIN_CYCLE_INTERVAL after it: what came in meanwhile is its batch. After a quiet
                # spell, wait a moment for the rest of a burst to arrive.
                since = time.monotonic() - self.last_tick
                if since > QUIET:
                    await anyio.sleep(DEBOUNCE)
                elif since < MIN_CYCLE_INTERVAL:
                    await anyio.sleep(MIN_CYCLE_INTERVAL - since)
                await self.tick()

    async def tick(self, names: list[str] | None = None) -> None:
        """One tick (per tree held: those due, or `names`)."""
        state = self.folder.state
        now = max(time.time(), state.now)
        if self.trees is None:
            for rt in state.trees.values():
                rt.dirty = False
            ticks = [ClockTicked()]
        else:
            ticks = [ClockTicked(tree=name) for name in (self._held_due(now) if names is None else names)]
            if not ticks:
                return
        self.count += 1
        self.last_tick = time.monotonic()
        basis = (now, self.count, state.last_seq)
        landed = await self.log.append([Envelope(id=derived_id("clock", *basis, *([tick.tree] if tick.tree else [])),
                                                 time=at_seconds(now), source="admission:clock", event=tick)
                                        for tick in ticks])
        self.tick_seq = max(self.tick_seq, *(where.seq for where in landed))

    def _held_due(self, now: float) -> list[str]:
        """The held trees to tick (marked clean): those with inputs since their cycle and something
        to decide (`trees_ticked`), and the earliest timer's when it is due."""
        assert self.trees is not None
        state, held = self.folder.state, self.trees.held()
        busy = set(trees_ticked(state, None))
        names = []
        for name, rt in state.trees.items():
            if name in held and rt.dirty:
                rt.dirty = False
                if name in busy:
                    names.append(name)
        timer = state.next_timer()
        if timer is not None and timer[0] <= now and timer[1] in held and timer[1] not in names:
            names.append(timer[1])
        return sorted(names)


async def follow_held(trees: TreeLeases, folder: HeldTreesFolder, ticker: Clock | None) -> None:
    """Keep `folder.held` the trees whose lease is held, and say on stderr what the instance has
    decided and read at each change and when it stops. A tree taken over while the fold waits for its cycle gets a
    tick: its cycle is decided at the next message folded, and on a quiet log nothing else comes."""
    try:
        while True:
            held = trees.held()
            if held != folder.held:
                folder.held = held
                print(work_line(folder), file=sys.stderr, flush=True)
                waiting = sorted(folder.waiting_trees() & held)
                if waiting and ticker is not None:
                    await ticker.tick(waiting)
            with anyio.move_on_after(0.5):  # (a change while ticking is seen at the next look)
                await trees.changed()
    finally:
        print(work_line(folder), file=sys.stderr, flush=True)  # (and when it stops)


def work_line(folder: HeldTreesFolder) -> str:
    """What an instance deciding per tree has done so far: cycles decided here and read from the log."""
    return tree_gate.work_line("admission cycles", folder.decided, folder.read)


def standby() -> Warm:
    """What a standby instance folds while another leads (`run_as_leader`): admission's folder
    with explain's notes, handed to `serve_admission(warm=...)` when it takes over."""
    return Warm(ExplainingFolder(AdmissionFolder()), SUBJECTS)


async def serve_admission(log: EventLog, data_dir: Path | None, *, clock: bool = True,
                          folder: AdmissionFolder | None = None, warm: Warm | None = None,
                          trees: TreeLeases | None = None,
                          task_status: TaskStatus[str] = anyio.TASK_STATUS_IGNORED) -> None:
    """Admission on `log`; `warm`: a standby's fold, caught up already (it decides from there);
    `trees`: an instance deciding per tree (`services.common.tree_gate`): it decides the cycles of
    the trees it holds and reads the others' from the log (`services.admission.held_trees`), ticks
    them, and answers queries (its log keeps the others' decisions back)."""
    if warm is not None:
        folder = cast(ExplainingFolder, warm.folder).inner
    held: HeldTreesFolder | None = None
    if trees is not None and folder is None:
        folder = held = HeldTreesFolder()
    folder = folder or AdmissionFolder()
    store = None
    if data_dir is not None:
        from services.admission.projection import projections_for

        kept = projections_for()
        if kept:
            data_dir.mkdir(parents=True, exist_ok=True)
            from projections.store import ProjectionStore

            store = ProjectionStore(data_dir / "admission.duckdb", kept)
    ticker = Clock(log, folder, trees) if clock else None
    # the same folder, keeping what `explain` needs
    explaining = cast(ExplainingFolder, warm.folder) if warm is not None else ExplainingFolder(folder)
    snapshots = policy_for(log, "admission")
    if held is not None:
        # explain's notes of the cycles read from the log (what a cycle tells explain carries no time)
        held.on_applied = lambda decision: explaining.history.observe(decision.event, 0.0)
        if trees is not None:
            held.on_waiting = trees.learn
        if snapshots is not None:
            snapshots = WhenSettled.of(snapshots, held.settled)
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(lambda task_status: run_folder(
                log, explaining, SUBJECTS, durable="admission", store=store, snapshots=snapshots,
                warm=warm, on_batch=ticker.on_batch if ticker else None, task_status=task_status))
            if ticker is not None:
                tg.start_soon(ticker.run)
                if trees is not None:
                    tg.start_soon(ticker.follow_leases)
            if held is not None and trees is not None:
                tg.start_soon(follow_held, trees, held, ticker)
            nc = getattr(log, "nc", None)
            if nc is not None and trees is not None:  # per tree: while a tree is held, naming the trees' holders
                asked = naming_holders(cast(TreeGate, log), partial(answer, explaining))
                tg.start_soon(while_holding, trees, partial(answer_until_cancelled, nc, SERVICE, asked))
            elif nc is not None:  # JetStream: answer `poolwise.cmd.admission.*` (gangs, explain)
                await tg.start(lambda task_status: serve_queries(nc, explaining, task_status=task_status))
            task_status.started("admission")
    finally:
        if store is not None:
            store.close()
