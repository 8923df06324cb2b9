"""`AdmissionState`: gangs, tasks, queues and ledgers of every tree, folded from the log.

`apply(event, seq, time)` is the evolve function. It is pure and deterministic: time comes from
the events (it never goes back), and whenever it advances the timers due at or before the new
time fire first, in deadline order (ties by gang id), before the event itself is applied.

Effects and announcements. Inputs take effect where they stand in the log, and so do
preemption's decisions (`PreemptionRequested`). An admission cycle runs at the end of the
message that started it (its *trigger*: a tick, `_on_tick`, or an input message after which a
tree holds `cycle_gangs` gangs made pending since its last cycle), and its decisions
(`EntitlementsComputed`, `GangAdmitted`, `GangMovedToQueue`, then `CycleCompleted`, whose
reading marks the gangs of jobs waiting for a running-job slot, see `mark_slot_waiters`) take
effect *there*, at the trigger, before anything after it in the log, wherever they land:
admission applies them as it decides them (`services.admission.domain.decide.run_cycles`) and
a reader of its decisions applies them at the trigger too (`cycle_order.CycleOrder`: what
comes after a trigger waits until its cycle is read). So the next cycle never waits for the
previous one's decisions to come back. What the fold itself decides (a gang timed out,
requeued after a placement timeout, finished, an input refused) is applied at once and returned
as an `Outcome` for the service to publish; reading those back changes nothing.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Literal, NamedTuple, cast

from events import (
    INPUT_QUOTE_LIMIT,
    ClockTicked,
    CycleCompleted,
    EntitlementsComputed,
    Event,
    GangAdmitted,
    GangCancelled,
    GangEnqueued,
    GangMovedToQueue,
    GangRequeued,
    GangTimedOut,
    HostRegistered,
    HostRemoved,
    InputRejected,
    PoolConfigChanged,
    PoolDeleted,
    PreemptionRequested,
    TaskStateChanged,
    TreeConfigured,
    fault_text,
    with_views,
)
from events.entitlement_map import fold_entitlements
from services.admission.domain import rules
from services.admission.domain.job_counts import count_job, ledger_of, started_running, stopped_running
from services.admission.domain.model import (
    ADMITTED,
    CANCELLED,
    DONE,
    FINISHED,
    PENDING,
    PLACED_OR_LATER,
    REJECTED,
    TERMINAL,
    TIMED_OUT,
    WAITING,
    Gang,
    Task,
)
from services.admission.domain.queues import GangQueue, UnorderedQueue, fifo_key_of
from services.admission.domain.runtime import TreeRuntime
from services.admission.domain.slot_waiters import mark_slot_waiters
from services.admission.domain.timing import gang_timeout
from services.admission.domain.trusted import gang_finished
from services.admission.domain.vectors import Vector, add_into
from services.tree.domain import paths
from services.tree.domain.effective import EffectivePool, effective_pool
from services.tree.domain.state import TreeState

SERVICE = "admission"
# An input message that leaves a tree with `TreeOptions.cycle_gangs` gangs made pending since its
# last cycle starts a cycle at its end, as a tick does: a burst of enqueues is decided as it is
# folded, cycle after cycle, not after the whole burst (a tick lands behind what was published
# before it). Smaller values pay each cycle's fixed costs more often, larger ones decide later;
# the default was measured against others on bursts (docs/performance.md, `cycle_gangs`).


class Outcome(NamedTuple):
    """Something to publish: the event body and a key unique among the outcomes of one basis.
    (A named tuple: made once per decision, and cheaper to make than a frozen dataclass.)"""

    event: Event
    key: str


def failed_cycle(tree: str, service: str, trigger_seq: int, trigger_type: str, what: str,
                 error: Exception) -> list[Outcome]:
    """A cycle (admission's) or a pass (preemption's) whose decision raised: nothing is decided,
    the failure is published as a refusal of its trigger (rule `internal_error`, the exception's
    type and message), and it is closed all the same (`CycleCompleted` with no decisions), so
    that its readers (preemption, the next pass, the scenario runner) do not wait for it for ever.
    `what` names it in the reason ("the admission cycle of tree t at seq 8")."""
    refusal = InputRejected(tree=tree, ref=f"cycle:{trigger_seq}", input_type=trigger_type,
                            reason=f"{what} failed: {fault_text(error)}", rule="internal_error",
                            input_seq=trigger_seq)
    return [Outcome(refusal, "cycle_failed" if service == SERVICE else "pass_failed"),
            Outcome(CycleCompleted(tree=tree, service=service, trigger_seq=trigger_seq, decisions=0), "cycle")]


@dataclass(slots=True)
class AdmissionState:
    config: TreeState = field(default_factory=TreeState)
    trees: dict[str, TreeRuntime] = field(default_factory=dict)
    now: float = 0.0
    last_seq: int = 0
    due: list[str] = field(default_factory=list)  # trees whose cycle the last tick started
    full: list[str] = field(default_factory=list)  # trees that reached `cycle_gangs` since their last cycle
    # A reader's copy of the fold (preemption's): the same gangs, tasks, ledgers, counts and
    # marks of jobs waiting for a running-job slot (preemption inside a pool judges job limits as
    # the next cycle will), but queue order is kept only where preemption reads it (pools with
    # `preempt_lower_priority`; elsewhere `UnorderedQueue`s sort when asked).
    reader: bool = False
    # Called with (tree, gang) when a finished gang is forgotten (explain's notes follow).
    on_forget: Callable[[str, str], None] | None = None
    _timers: list[tuple[float, str, str, str, int]] = field(default_factory=list)
    # When finished gangs are forgotten: (deadline, gang, tree). Apart from `_timers`, since
    # forgetting decides nothing: it waits for the next event past its time (no tick for it).
    _forgets: list[tuple[float, str, str]] = field(default_factory=list)

    # --- a snapshot's ---------------------------------------------------------------------------

    def __getstate__(self) -> tuple[object, ...]:
        """What a snapshot (or a copy) keeps: every field but `on_forget`, its holder's callback
        (explain's notes: `ExplainingFolder.load` binds it again). Pickled, the callback took the
        holder's notes into the state's pickle, and a reader of the state alone (the what-if,
        the replay) loaded them too."""
        return tuple([None if name == "on_forget" else getattr(self, name) for name in _STATE_FIELDS])

    def __setstate__(self, state: tuple[object, ...]) -> None:
        for name, value in zip(_STATE_FIELDS, state, strict=True):
            setattr(self, name, value)

    # --- the fold -----------------------------------------------------------------------------

    def apply(self, event: Event, seq: int, time: float) -> list[Outcome]:
        """Fold one event read at log position `seq`, stamped `time` (seconds)."""
        out: list[Outcome] = []
        if time > self.now:
            if self._timers and self._timers[0][0] <= time:
                self._advance(time, seq, out)
            if self._forgets and self._forgets[0][0] <= time:
                self._forget_due(time)
            self.now = time
        if seq > self.last_seq:
            self.last_seq = seq
        self.config.apply(event, seq)
        handler = _HANDLERS.get(type(event))
        if handler is not None:
            handler(self, event, seq, out)
        return out

    def take_due(self) -> list[str]:
        """Trees whose admission cycle is due now, at the end of the message just folded (the
        tick; or the input message that left them `cycle_gangs` gangs made pending since their
        last cycle), in that order: the tick's trees by name, then the others as they filled."""
        due, self.due = self.due, []
        if self.full:
            due += [name for name in self.full if name not in due]
            self.full = []
        return due

    def runtime(self, tree: str) -> TreeRuntime:
        found = self.trees.get(tree)
        if found is None:
            found = self.trees[tree] = TreeRuntime(tree)
            found.cycle_gangs = self.config.tree(tree).options.cycle_gangs
        return found

    # --- time ---------------------------------------------------------------------------------

    def _advance(self, time: float, seq: int, out: list[Outcome]) -> None:
        """Fire the timers due at or before `time`, in deadline order (ties by gang id)."""
        while self._timers and self._timers[0][0] <= time:
            deadline, gang_id, tree, kind, attempt = heapq.heappop(self._timers)
            self.now = max(self.now, deadline)
            rt = self.trees.get(tree)
            gang = rt.gangs.get(gang_id) if rt else None
            if rt is None or gang is None:
                continue
            if kind == "waiting" and gang.state == WAITING:
                self._time_out(rt, gang, deadline, seq, out)
            elif (kind == "placement" and gang.state == ADMITTED and gang.attempt == attempt
                  and any(t.state not in PLACED_OR_LATER for t in gang.tasks)):
                placed = sum(t.state in PLACED_OR_LATER for t in gang.tasks)
                self._requeue(rt, gang, head=True)
                out.append(Outcome(GangRequeued(
                    tree=rt.name, gang=gang.id, pool=gang.pool, cause="placement_timeout",
                    reason=(f"{len(gang.tasks) - placed} of {len(gang.tasks)} tasks not placed within "
                            f"{gang.timeout:g} s of admission")), f"requeued:{gang.id}:{attempt}"))
        self.now = time

    def _timer(self, deadline: float, gang: Gang, kind: str) -> None:
        heapq.heappush(self._timers, (deadline, gang.id, gang.tree, kind, gang.attempt))

    # --- retention ------------------------------------------------------------------------------

    def _retire(self, rt: TreeRuntime, gang: Gang) -> None:
        """The gang has finished: it is forgotten `gang_retention` seconds of log time from now (the
        tree's option as it is now; None: never)."""
        retention = self.config.tree(rt.name).options.gang_retention
        if retention is not None:
            heapq.heappush(self._forgets, (self.now + retention, gang.id, rt.name))

    def _forget_due(self, time: float) -> None:
        """Forget the finished gangs whose retention ended at or before `time`, in deadline order
        (ties by gang id), after the timers due by then have fired."""
        forgets = self._forgets
        while forgets and forgets[0][0] <= time:
            _, gang_id, tree = heapq.heappop(forgets)
            rt = self.trees.get(tree)
            gang = rt.gangs.get(gang_id) if rt is not None else None
            if rt is not None and gang is not None and gang.state in FINISHED:
                self._forget(rt, gang)

    def _forget(self, rt: TreeRuntime, gang: Gang) -> None:
        """Drop a finished gang: its tasks, members and notes. Its id and its tasks' ids stay used."""
        del rt.gangs[gang.id]
        tasks = rt.tasks
        for task in gang.tasks:
            if tasks.get(task.id) is task:
                del tasks[task.id]
            rt.forgotten_tasks.add(task.id)
        rt.slot_waiters.discard(gang.id)
        if self.on_forget is not None:
            self.on_forget(rt.name, gang.id)

    @property
    def timer_heap(self) -> list[tuple[float, str, str, str, int]]:
        """The gang and placement timeouts, a heap of (deadline, gang, tree, kind, attempt), as
        held: for a copier of the state (`services.cli.dry_run.clone`); only the handlers change it."""
        return self._timers

    @property
    def forget_heap(self) -> list[tuple[float, str, str]]:
        """When finished gangs are forgotten, a heap of (deadline, gang, tree), as held: for a copier
        of the state; only the handlers change it."""
        return self._forgets

    def next_deadline(self) -> float | None:
        """When the earliest timer fires (the service's clock ticks then, so timers fire on a
        quiet log); stale entries may make this early, never late."""
        return self._timers[0][0] if self._timers else None

    def next_timer(self) -> tuple[float, str] | None:
        """`next_deadline` and the tree of that timer (an instance deciding per tree ticks for the
        timers of the trees it holds)."""
        return (self._timers[0][0], self._timers[0][2]) if self._timers else None

    # --- gang transitions (shared by handlers) -------------------------------------------------

    def _time_out(self, rt: TreeRuntime, gang: Gang, deadline: float, seq: int, out: list[Outcome]) -> None:
        gang.state = TIMED_OUT
        self._forget_job(rt, gang)
        out.append(Outcome(GangTimedOut(tree=rt.name, gang=gang.id, pool=gang.pool, members=len(gang.tasks),
                                        size=gang.size, deadline=deadline), f"timed_out:{gang.id}"))
        out.append(_finished(rt, gang, "timed_out"))
        self._retire(rt, gang)

    def _enqueue(self, rt: TreeRuntime, gang: Gang) -> None:
        """Put a complete gang into the pending queue of its pool; it is now demand."""
        gang.state, gang.queue = PENDING, "pending"
        rt.fresh += 1
        if rt.fresh >= rt.cycle_gangs and rt.name not in self.full:
            self.full.append(rt.name)
        pool = gang.pool
        (rt.queues.get(pool) or self._queues(rt, pool))["pending"].push(gang)
        (rt.ledgers.get(pool) or ledger_of(rt, pool)).want(gang, 1.0)

    def _dequeue(self, rt: TreeRuntime, gang: Gang) -> None:
        if gang.state == PENDING and gang.queue is not None:
            pool = gang.pool
            (rt.queues.get(pool) or self._queues(rt, pool))[gang.queue].remove(gang)
            (rt.ledgers.get(pool) or ledger_of(rt, pool)).want(gang, -1.0)
        gang.queue = None

    def _requeue(self, rt: TreeRuntime, gang: Gang, *, head: bool) -> None:
        """An admitted gang goes back to pending whole: every task pending, its allocation released."""
        self._release(rt, gang)
        for task in gang.tasks:
            task.state, task.started_at, task.preemption_requested = "pending", None, False
        gang.admitted_at = None
        if head:
            rt.requeues += 1
            gang.head_rank = rt.requeues
        else:
            gang.head_rank = 0
        gang.slot_wait = None
        self._enqueue(rt, gang)

    def _release(self, rt: TreeRuntime, gang: Gang) -> None:
        """Release what the gang's live tasks hold and stop counting it as running."""
        ledger = ledger_of(rt, gang.pool)
        for task in gang.tasks:
            if task.state not in TERMINAL and task.state != "pending":
                ledger.hold(gang, task.resources, -1.0)
        stopped_running(rt, gang)

    def _forget_job(self, rt: TreeRuntime, gang: Gang) -> None:
        """The gang has finished (timed out, done or cancelled): its job counts one gang less,
        and the gang is no longer live. Its members' specs go: only an admission reads them (what
        `GangAdmitted` lists), a finished gang is never admitted again, and kept they were an
        object per task of every gang kept for `gang_retention`, in memory and in each snapshot
        (a fifth of the time a snapshot took to load)."""
        count_job(rt.jobs, gang, -1)
        del rt.live[gang.id]
        for task in gang.tasks:
            task.spec = None

    def _queues(self, rt: TreeRuntime, pool: str) -> dict[str, GangQueue]:
        found = rt.queues.get(pool)
        if found is None:
            found = rt.queues[pool] = self._new_queues(rt, pool)
        return found

    def _new_queues(self, rt: TreeRuntime, pool: str) -> dict[str, GangQueue]:
        view = effective_pool(self.config, rt.name, pool)
        order = _order(view)
        rt.orders[pool] = order
        key = fifo_key_of(order)
        kind = UnorderedQueue if self._unordered(view) else GangQueue
        return {name: kind(key) for name in ("non_preemptible", "controller", "revocable", "pending")}

    def _unordered(self, view: EffectivePool | None) -> bool:
        """Whether a pool's queues need not keep their order as they go (see `reader`)."""
        return self.reader and (view is None or not view.preempt_lower_priority)

    def rebuild_queues(self, rt: TreeRuntime, pool: str) -> None:
        """A pool's order options may have changed: re-sort its queues if they did. The queues of a
        pool that is gone, with nothing in them, are forgotten (made again, in the order of the
        day, if the pool comes back: an ephemeral pool does)."""
        old = rt.queues.get(pool)
        if old is None:
            return
        view = effective_pool(self.config, rt.name, pool)
        if view is None and not any(len(q) for q in old.values()):
            del rt.queues[pool]
            rt.orders.pop(pool, None)
            return
        if _order(view) == rt.orders.get(pool) and self._unordered(view) == isinstance(old["pending"], UnorderedQueue):
            return
        new = self._new_queues(rt, pool)
        for name, queue in old.items():
            for gang in queue:
                new[name].push(gang)
        rt.queues[pool] = new

    def rebuild_queues_under(self, rt: TreeRuntime, path: str) -> None:
        """Options of `path` changed: its queues and those below it (ephemeral `pool$user` children
        take their parent's `ephemeral_subpool_config`) may have a new order."""
        below = path.rstrip(paths.SEPARATOR) + paths.SEPARATOR
        for pool in [p for p in rt.queues if p == path or p.startswith(below)]:
            self.rebuild_queues(rt, pool)


_STATE_FIELDS = tuple(f.name for f in fields(AdmissionState))  # (`__getstate__`'s order)


# --- handlers: one per event type, wired in one table ------------------------------------------


def _on_enqueued(state: AdmissionState, event: Event, seq: int, out: list[Outcome]) -> None:
    event = cast(GangEnqueued, event)  # the model or its view (events.views): the same attributes
    rt = state.trees.get(event.tree) or state.runtime(event.tree)
    gang = rt.gangs.get(event.gang)
    if gang is None:
        tree = state.config.trees.get(event.tree)
        if tree is not None and tree.last_new_gang != event.gang:  # seen before: a forgotten gang's id
            out.append(_rejected(rt, event, seq, "gang_forgotten", _forgotten(state, rt, event.gang), event.gang))
            return
        _first_members(state, rt, event, seq, out)
    else:
        _more_members(state, rt, gang, event, seq, out)


def _first_members(state: AdmissionState, rt: TreeRuntime, event: GangEnqueued, seq: int,
                   out: list[Outcome]) -> None:
    checked = rules.check_new_gang(state.config, rt, event)
    if isinstance(checked, rules.Refusal):
        # The gang id is used up: later members are refused too.
        gang = _new_gang(state, rt, event, checked.pool or event.pool)
        gang.state = REJECTED
        rt.gangs[gang.id] = gang
        out.append(_rejected(rt, event, seq, checked.rule, checked.message, event.gang))
        out.append(_finished(rt, gang, "rejected"))
        state._retire(rt, gang)
        return
    gang = _new_gang(state, rt, event, checked.pool, checked.need)  # its resources: what its members need
    gang.wire_bytes = checked.wire_bytes
    rt.gangs[gang.id] = rt.live[gang.id] = gang
    count_job(rt.jobs, gang, 1)
    _add_members(state, rt, gang, event, seq, counted=True)


def _new_gang(state: AdmissionState, rt: TreeRuntime, event: GangEnqueued, pool: str,
              resources: Vector | None = None) -> Gang:
    options = state.config.tree(rt.name).options
    rt.made += 1
    return Gang(event.gang, rt.name, pool, event.job, event.user, event.size, event.priority, event.preemptible,
                event.revocable, event.controller, gang_timeout(event.timeout, options.gang_timeout, event.gang),
                state.now, [], resources={} if resources is None else resources, number=rt.made)


def _more_members(state: AdmissionState, rt: TreeRuntime, gang: Gang, event: GangEnqueued, seq: int,
                  out: list[Outcome]) -> None:
    wire_bytes = rules.members_bytes(event.tasks)
    refusal = rules.check_more_members(state.config, rt, gang, event, wire_bytes)
    if refusal is not None:
        out.append(_rejected(rt, event, seq, refusal.rule, refusal.message, event.gang))
        return
    gang.wire_bytes += wire_bytes
    _add_members(state, rt, gang, event, seq)


def _add_members(state: AdmissionState, rt: TreeRuntime, gang: Gang, event: GangEnqueued, seq: int, *,
                 counted: bool = False) -> None:
    """`counted`: the gang's `resources` already include these members (first members: the
    checks added them up, in the same order)."""
    members, tasks, gang_id = gang.tasks, rt.tasks, gang.id
    for spec in event.tasks:
        # The member's resources are the spec's own dict (an immutable event's: nobody changes it).
        task = Task(spec.id, gang_id, spec.resources, "pending", None, False, spec)
        members.append(task)
        tasks[spec.id] = task
    if not counted:
        resources = gang.resources
        for spec in event.tasks:
            add_into(resources, spec.resources)
    rt.dirty = True
    if len(members) >= gang.size:
        gang.arrival = seq
        state._enqueue(rt, gang)
    elif len(members) == len(event.tasks):  # first members: start the waiting timer
        state._timer(gang.waiting_deadline, gang, "waiting")


def _on_task(state: AdmissionState, event: Event, seq: int, out: list[Outcome]) -> None:
    # (the model or its view, events.views: the same attributes; not `cast`, a call per report)
    report: TaskStateChanged = event  # type: ignore[assignment]
    rt = state.trees.get(report.tree) or state.runtime(report.tree)
    task = rt.tasks.get(report.task)
    if task is None and report.gang not in rt.gangs and is_forgotten(state, rt, report.gang):
        out.append(_rejected(rt, report, seq, "gang_forgotten", _forgotten(state, rt, report.gang, report.task),
                             report.task))
        return
    gang = rt.gangs.get(task.gang) if task is not None else None
    refusal = rules.check_transition(task, gang, report)
    if refusal is not None:
        out.append(_rejected(rt, report, seq, refusal.rule, refusal.message, report.task))
        return
    assert task is not None and gang is not None
    new = report.state
    if new == task.state:
        return
    rt.dirty = True
    if new == "running" and task.started_at is None:
        task.started_at = state.now
    if new not in TERMINAL:  # (then its gang, which holds this task, cannot have stopped)
        task.state = new
        return
    (rt.ledgers.get(gang.pool) or ledger_of(rt, gang.pool)).hold(gang, task.resources, -1.0)
    task.state = new
    for member in gang.tasks:
        if member.state not in TERMINAL:
            return
    _gang_stopped(state, rt, gang, out)


def _gang_stopped(state: AdmissionState, rt: TreeRuntime, gang: Gang, out: list[Outcome]) -> None:
    """Every task of an admitted gang ended: done, or (if preempted) back to pending as a new attempt."""
    if any(t.state == "preempted" for t in gang.tasks):
        stopped_running(rt, gang)
        for task in gang.tasks:
            task.state, task.started_at, task.preemption_requested = "pending", None, False
        gang.admitted_at, gang.head_rank, gang.slot_wait = None, 0, None
        state._enqueue(rt, gang)
        out.append(Outcome(GangRequeued(tree=rt.name, gang=gang.id, pool=gang.pool, cause="preempted",
                                        reason="its tasks were preempted"), f"requeued:{gang.id}:{gang.attempt}"))
        return
    gang.state = DONE
    stopped_running(rt, gang)
    state._forget_job(rt, gang)
    out.append(_finished(rt, gang, "done"))
    state._retire(rt, gang)


def _on_cancelled(state: AdmissionState, event: Event, seq: int, out: list[Outcome]) -> None:
    assert isinstance(event, GangCancelled)
    rt = state.runtime(event.tree)
    gang = rt.gangs.get(event.gang)
    if gang is None and is_forgotten(state, rt, event.gang):
        out.append(_rejected(rt, event, seq, "gang_forgotten", _forgotten(state, rt, event.gang), event.gang))
        return
    if gang is None or gang.state in FINISHED:
        what = "no such gang" if gang is None else f"gang {event.gang} is already {gang.state}"
        out.append(_rejected(rt, event, seq, "cancel_finished" if gang else "unknown_gang", f"cannot cancel: {what}",
                             event.gang))
        return
    rt.dirty = True
    if gang.state == ADMITTED:
        state._release(rt, gang)
        for task in gang.tasks:
            if task.state not in TERMINAL:
                task.state = "killed"
    else:
        state._dequeue(rt, gang)
    gang.state = CANCELLED
    state._forget_job(rt, gang)
    out.append(_finished(rt, gang, "cancelled"))
    state._retire(rt, gang)


def _on_admitted(state: AdmissionState, event: Event, seq: int, out: list[Outcome]) -> None:
    event = cast(GangAdmitted, event)  # the model or its view (events.views)
    rt = state.trees.get(event.tree) or state.runtime(event.tree)
    gang = rt.gangs.get(event.gang)
    if gang is None or gang.state != PENDING or event.attempt != gang.attempt + 1:
        return  # decided on a state that moved on (e.g. cancelled in between): no effect
    pool = gang.pool
    ledger = rt.ledgers.get(pool) or ledger_of(rt, pool)
    if gang.queue is not None:  # `_dequeue`, with the pool's ledger at hand
        (rt.queues.get(pool) or state._queues(rt, pool))[gang.queue].remove(gang)
        ledger.want(gang, -1.0)
    now = state.now
    gang.state, gang.queue, gang.attempt, gang.admitted_at, gang.head_rank, gang.slot_wait = (
        ADMITTED, None, event.attempt, now, 0, None)
    tasks = gang.tasks
    for task in tasks:
        task.state = "ready"
    ledger.hold_all(gang, [task.resources for task in tasks], 1.0)
    started_running(rt, gang)
    heapq.heappush(state._timers, (now + gang.timeout, gang.id, gang.tree, "placement", gang.attempt))


def _on_moved(state: AdmissionState, event: Event, seq: int, out: list[Outcome]) -> None:
    event = cast(GangMovedToQueue, event)  # the model or its view (events.views)
    rt = state.runtime(event.tree)
    gang = rt.gangs.get(event.gang)
    if gang is None or gang.state != PENDING or gang.queue == event.queue:
        return
    queues = state._queues(rt, gang.pool)
    assert gang.queue is not None
    queues[gang.queue].remove(gang)
    gang.queue = event.queue
    queues[event.queue].push(gang)


def _on_preemption(state: AdmissionState, event: Event, seq: int, out: list[Outcome]) -> None:
    assert isinstance(event, PreemptionRequested)
    rt = state.runtime(event.tree)
    gang = rt.gangs.get(event.gang)
    if gang is None or gang.state != ADMITTED:
        return
    rt.dirty = True
    ledger = ledger_of(rt, gang.pool)
    for task in gang.tasks:  # whole gangs: every live task, whichever the request names
        if task.state in TERMINAL or task.state == "pending":
            continue
        if task.state in ("ready", "placing"):  # nothing runs yet: given back at once
            ledger.hold(gang, task.resources, -1.0)
            task.state = "preempted"
        else:  # running (or placed, launching): released when the executor reports it stopped
            task.preemption_requested = True
    if all(t.state in TERMINAL for t in gang.tasks):
        _gang_stopped(state, rt, gang, out)


def _on_entitlements(state: AdmissionState, event: Event, seq: int, out: list[Outcome]) -> None:
    event = cast(EntitlementsComputed, event)  # the model or its view (events.views); v1 read as v2
    rt = state.runtime(event.tree)
    # the whole map (`replace`), or the pools that changed and the paths removed: in place
    rt.entitlements = fold_entitlements(rt.entitlements, event)
    rt.entitlement_seq = seq


def _on_cycle(state: AdmissionState, event: Event, seq: int, out: list[Outcome]) -> None:
    """An admission cycle is complete (applied at its trigger, after its decisions)."""
    assert isinstance(event, CycleCompleted)
    if event.service == SERVICE:
        rt = state.runtime(event.tree)
        rt.dirty, rt.fresh = False, 0
        mark_slot_waiters(state.config, rt)


def _on_pool_changed(state: AdmissionState, event: Event, seq: int, out: list[Outcome]) -> None:
    assert isinstance(event, PoolConfigChanged)
    rt = state.runtime(event.tree)
    rt.dirty = True
    state.rebuild_queues_under(rt, paths.normalize(event.path))


def _on_tree_configured(state: AdmissionState, event: Event, seq: int, out: list[Outcome]) -> None:
    """New tree options (presets among them): every queue of the tree may have a new order."""
    assert isinstance(event, TreeConfigured)
    _on_config(state, event, seq, out)
    rt = state.trees.get(event.tree)
    if rt is not None:
        rt.cycle_gangs = event.options.cycle_gangs
        state.rebuild_queues_under(rt, paths.ROOT)


def trees_ticked(state: AdmissionState, tree: str | None) -> list[str]:
    """The trees a tick naming `tree` starts a cycle in: that one; or, for a tick naming none,
    every tree that holds anything to decide: a pool below its root, or gangs. A tree of a root
    alone that never had a gang (the default tree, next to named ones) has nothing to entitle,
    admit or preempt: cycling it made three log messages per tick that every service read."""
    if tree:
        return [tree]
    names = sorted(set(state.config.tree_names()) | set(state.trees))
    return [name for name in names
            if len(state.config.tree(name).pools) > 1 or ((rt := state.trees.get(name)) is not None and rt.gangs)]


def _on_tick(state: AdmissionState, event: Event, seq: int, out: list[Outcome]) -> None:
    """A tick starts an admission cycle in each tree it names (those holding anything, when it
    names none: `trees_ticked`)."""
    assert isinstance(event, ClockTicked)
    due = state.due
    for name in trees_ticked(state, event.tree):
        state.runtime(name)
        if name not in due:
            due.append(name)


def _on_config(state: AdmissionState, event: Event, seq: int, out: list[Outcome]) -> None:
    for rt in state.trees.values():
        rt.dirty = True


# --- small helpers -----------------------------------------------------------------------------


def _order(view: EffectivePool | None) -> tuple[str, ...]:
    """The `fifo_sort` a pool's queues keep their gangs by."""
    return view.fifo_sort if view is not None else ("priority", "arrival")


def _finished(rt: TreeRuntime, gang: Gang, outcome: Literal["done", "cancelled", "timed_out", "rejected"]) -> Outcome:
    return Outcome(gang_finished(rt.name, gang.id, gang.pool, outcome), f"finished:{gang.id}")


def is_forgotten(state: AdmissionState, rt: TreeRuntime, gang: str) -> bool:
    """Whether `gang` was forgotten (its id was used, and the gang is gone)."""
    tree = state.config.trees.get(rt.name)
    return tree is not None and gang not in rt.gangs and gang in tree.seen_gangs


def _forgotten(state: AdmissionState, rt: TreeRuntime, gang: str, task: str | None = None) -> str:
    """The refusal of an input for a gang forgotten after its retention."""
    retention = state.config.tree(rt.name).options.gang_retention
    after = f"{retention:g} s of log time" if retention is not None else "its retention"
    what = f"task {task} of gang {gang}" if task is not None else f"gang {gang}"
    return (f"{what}: the gang finished and was forgotten {after} later (tree option gang_retention); "
            f"its ids are not used again")


def _rejected(rt: TreeRuntime, event: Event, seq: int, rule: str, message: str, ref: str) -> Outcome:
    return Outcome(InputRejected(tree=rt.name, ref=ref, input_type=event.type, reason=message, rule=rule,
                                 input=event.model_dump_json()[:INPUT_QUOTE_LIMIT], input_seq=seq), f"rejected:{seq}")


_Handler = Callable[[AdmissionState, Event, int, list[Outcome]], None]

# The one table that wires event types to their handlers.
_HANDLERS: dict[type[Event], _Handler] = with_views({
    GangEnqueued: _on_enqueued,
    TaskStateChanged: _on_task,
    GangCancelled: _on_cancelled,
    GangAdmitted: _on_admitted,
    GangMovedToQueue: _on_moved,
    PreemptionRequested: _on_preemption,
    EntitlementsComputed: _on_entitlements,
    CycleCompleted: _on_cycle,
    PoolConfigChanged: _on_pool_changed,
    ClockTicked: _on_tick,
    TreeConfigured: _on_tree_configured,
    PoolDeleted: _on_config,
    HostRegistered: _on_config,
    HostRemoved: _on_config,
})  # the views of gang events (events.views) as their models
