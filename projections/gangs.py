"""Gangs and their tasks, as the admission service's decisions and the inputs it accepted left them.

Tables:

    gangs(tree, gang, job, user, pool, requested_pool, size, members, resources MAP, priority,
          preemptible, revocable, controller, timeout, state, queue, attempt, arrival, requeues,
          enqueued_at, admitted_at, finished_at, last_reason, updated_seq, updated_at)
    tasks(tree, task, gang, job, pool, member, resources MAP, state, preemption_requested,
          started_at, updated_seq, updated_at)

`gangs.state` is one of waiting | pending | admitted | done | timed_out | cancelled | rejected (the
states of the scenario report and `poolwise gangs`); `queue` is the queue a pending gang is in
(NULL otherwise). `pool` is the leaf admission put the gang in; until a decision names it (moved,
admitted, timed out, finished) it is the pool the submitter asked for, which differs only for
ephemeral pools (`/users` -> `/users/users$alice`, `/scratch` -> `/adhoc/scratch`).
`requested_pool` is always what the submitter asked for. `arrival` is the log position of the
members that completed the gang (DOMAIN §4); `requeues` counts its requeues (placement timeout or
preemption); `resources` is the sum of its members' resources. `tasks.state` is the task's state
as admission holds it (DOMAIN §5); `started_at` is when it last became `running`.

The tables follow admission's fold (services/admission/domain/state.py) event by event, in the
order the fold applies them, and never show a refused input. Three things make that so:

1. Inputs (`GangEnqueued`, `TaskStateChanged`, `GangCancelled`) take effect where they stand in the
   log, unless admission refuses them; the refusal comes later, as an `InputRejected` naming the
   input's position (`input_seq`). So an input is *held* until admission has answered it: until
   its refusal has been read (it is then skipped), or an admission decision based on a later
   position (`basis` > its seq; a cycle's `CycleCompleted`, basis >= its seq: admission publishes
   what it decides in the order it folds the log, so a refusal would have come first). A tick
   (`ClockTicked`) waits the same way: a cycle it starts takes effect right after it.
2. What comes after a held input or tick waits behind it (the events are applied in order).
3. Admission's decisions take effect where its fold applies them, which is not where they land:
   what its timers do (`GangTimedOut`, `GangFinished(timed_out)`, `GangRequeued` after a
   placement timeout) happens just *before* the event at their `basis` (time advanced there);
   what it announces as it folds an input (a gang done, cancelled, refused, requeued after a
   preemption) just *after* that input; a cycle's decisions (`GangAdmitted`, `GangMovedToQueue`)
   just after the message at their `basis` (the cycle's trigger: a tick, or a pack of enqueues),
   before anything later. Preemption's decisions take effect where they land.

`gangs_held` holds what waits (the encoded events, with the position a decision takes effect
at) and `gangs_answered` the highest position admission has answered; both are internal.
The projection keeps them in memory as well (read once, then kept in step with its writes, forgotten
on a rollback), and the rows of waiting and pending gangs (`projections/gang_rows.py`): a fold reads
back only the other gangs it touches, and updates the changed columns of a row it changed in place.
Most gangs under load arrive whole and are admitted by the cycle that answers their enqueue, in
the same fold: their rows are built at once from those two events, as tuples
(`GangFold._admitted_at_once`; in a 50k-gang burst the projection's cost per gang fell by about a
third).

The modules: `gang_order.py` (where admission's fold applies each event, what waits: points 1-3
above), `gang_fold.py` (the effects below, on the rows), `gang_tables.py` (schemas, DDL, writing
the rows back), `gang_rows.py` (the rows and keys kept in memory).

Known limits: a gang's `pool` before any decision (above); a timer's announcement that lands after
a decision admission made before that timer fired is applied where it lands (the states agree again
from there); `gangs_answered` is one position for the whole log, not one per tree (a tick answered
by its first tree's cycle lets a preemption that lands before another tree's decisions of the same
tick go first: the later requeue puts that right); and if admission's publish batches land out of
order (a reconnect, on a nats-server without atomic batches: docs/architecture.md), what the
later batch answers (a refusal, a cycle's `CycleCompleted`) counts for inputs before the earlier
batch's decisions are in: the rows of the gangs involved can then differ from admission's for good
(a stale admission is ignored); the log and every service's state are right, and so is the read
model rebuilt from the log.

Effects, as admission's fold has them:
- first members: the gang is `waiting` (refused: `rejected`, with the refusal as `last_reason`);
  once `size` members are in, `pending` in queue `pending`; refused members are no tasks;
- `GangMovedToQueue` and `GangAdmitted` take effect only on a pending gang (an admission only for
  the next attempt); admitted tasks are `ready`;
- an accepted report sets the task's state; once every task of an admitted gang has ended, the
  gang is `done`, or, if any was preempted, back to `pending` (a new attempt, its tasks `pending`);
- `PreemptionRequested`: the gang's `ready` and `placing` tasks are `preempted` at once, the
  others get `preemption_requested` and keep running until they report an end;
- an accepted `GangCancelled`: `cancelled`, and the live tasks of an admitted gang `killed`;
- `GangRequeued` (placement timeout) puts an admitted gang back to pending, its tasks to pending;
  `GangTimedOut` ends a waiting gang; `GangFinished` confirms an end (and gives `finished_at`).

Retention (the store's `retention`, off by default): a gang in a finished state (done, timed_out,
cancelled, rejected) that finished (`finished_at`, else `updated_at`) before the horizon is deleted
with its tasks (`tasks.gang`: a task id another gang took over stays with that gang). Waiting,
pending and admitted gangs are never deleted. What comes later for a deleted gang brings nothing
back: its late inputs are refused by admission (rule `gang_forgotten` once admission forgot it
too, `TreeOptions.gang_retention`: a refused enqueue then makes no `rejected` row), reports and
decisions for a gang with no row change nothing, and with retention on a `GangFinished` for a gang
with no row makes none (without it, it makes one: a log that starts later). If admission keeps
gangs longer than this retention, a late enqueue for a deleted gang that admission refuses with
another rule shows as a new `rejected` gang (deleted again one retention later).
The key columns are stored uncompressed: a deleted row's key is read back to take it out of the
primary key's index, and reading one row of a compressed string column (DICT_FSST) costs ~100 µs.

    SELECT state, count(*) FROM gangs GROUP BY state;
    SELECT pool, queue, gang, last_reason FROM gangs WHERE state = 'pending' ORDER BY pool, arrival;
    SELECT pool, sum(resources['cpu']) AS cpu FROM tasks
     WHERE state IN ('ready', 'placing', 'placed', 'launching', 'running') GROUP BY pool;
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import pyarrow as pa

from events import InputRejected
from projections.base import Connection, Item, Malformed, Projection, registered
from projections.gang_fold import GangFold
from projections.gang_order import (
    ADMISSION,
    CYCLE_DECISIONS,
    DECISIONS,
    HELD_TYPES,
    INPUTS,
    OWN,
    TICK,
    Held,
    anchor,
    keep_held,
    load_held,
    place,
    split,
)
from projections.gang_rows import RowCache
from projections.gang_tables import DDL, FINISHED


class GangsProjection(Projection):
    """`gangs` and `tasks`: every gang and task with its state, from admission's answers."""

    name = "gangs"
    schema_version = 4  # 3: a cycle's decisions take effect at its trigger; 4: key columns uncompressed
    tables = ("gangs", "tasks", "gangs_held", "gangs_answered")
    prune_rows = 10_000  # gangs deleted by one prune, with their tasks

    def __init__(self) -> None:
        # `gangs_held` (decoded) and `gangs_answered` as this store's transactions left them: read
        # once, then kept in step with every write (None: read them again, after a rollback).
        self._held: list[Held] | None = None
        self._answered = 0
        self._rows = RowCache()

    def create(self, conn: Connection) -> None:
        for ddl in DDL:
            conn.execute(ddl)
        self.rolled_back()

    def rolled_back(self) -> None:
        self._held = None
        self._rows.clear()

    def apply(self, conn: Connection, items: Sequence[Item]) -> None:
        fresh: list[Held] = []
        refusals: dict[tuple[int, int], str] = {}  # (input_seq, part in its pack) -> the refusal
        answered = 0
        for item in items:
            envelope = item.event
            if isinstance(envelope, Malformed):
                continue
            event = envelope.event
            kind = event.type
            if envelope.source == ADMISSION and envelope.basis is not None and kind not in CYCLE_DECISIONS:
                # a cycle is complete after its trigger's message was folded whole: answered too
                answered = max(answered, envelope.basis + (kind == "CycleCompleted"))
            if kind in HELD_TYPES:
                at, rank = anchor(envelope) if kind in DECISIONS else (None, OWN)
                fresh.append(Held(item.seq, kind, envelope, None, at, item.part, item.raw, rank))
            elif isinstance(event, InputRejected) and event.input_seq is not None and event.input_type in INPUTS:
                refusals[(event.input_seq, event.input_part or 0)] = f"{event.rule}: {event.reason}"
        if not fresh and not refusals and not answered:
            return
        if self._held is None:
            self._held, self._answered = load_held(conn)
        if answered > self._answered:
            conn.execute("UPDATE gangs_answered SET answered = ?", [answered])
            self._answered = answered
        answered = self._answered
        held = self._held
        newly_refused = [h for h in held if h.refused is None and h.key in refusals] if refusals else []
        for h in [*newly_refused, *fresh] if refusals else ():
            h.refused = refusals.get(h.key, h.refused)
        queue = held + fresh
        place(queue, fresh)
        ready, waiting = split(queue, answered)
        if ready:
            GangFold(conn, [queue[i] for i in ready if queue[i].type != TICK], self._rows,
                  pruning=self.retention is not None).write()
        keep_held(conn, queue, len(held), ready, waiting, newly_refused)
        self._held = [queue[i] for i in waiting]

    def prune(self, conn: Connection, horizon: datetime) -> int:
        """The finished gangs that finished before `horizon` (the first `prune_rows` of them, by
        that time and key) and their tasks. They are in no cache (`RowCache` keeps waiting and
        pending gangs only); `RowCache.keys` may keep their hashes (a hash only says "ask")."""
        finished = ", ".join(f"'{state}'" for state in sorted(FINISHED))
        # (`coalesce(finished_at, updated_at) < $1`, written so that DuckDB skips row groups by their
        # min/max: half the cost at 1M gangs)
        found = conn.execute(
            "SELECT tree, gang FROM gangs WHERE (finished_at < $1 OR (finished_at IS NULL AND updated_at < $1)) "
            f"AND state IN ({finished}) ORDER BY coalesce(finished_at, updated_at), tree, gang LIMIT $2",
            [horizon, self.prune_rows]).fetchall()
        if not found:
            return 0
        keys = pa.table({"tree": pa.array([row[0] for row in found], pa.string()),
                         "gang": pa.array([row[1] for row in found], pa.string())})
        with registered(conn, keys) as view:
            ((tasks,),) = conn.execute(
                f"DELETE FROM tasks USING {view} AS k WHERE tasks.tree = k.tree AND tasks.gang = k.gang").fetchall()
            conn.execute(
                f"DELETE FROM gangs USING {view} AS k WHERE gangs.tree = k.tree AND gangs.gang = k.gang").fetchall()
        return len(found) + int(tasks)


__all__ = ["GangsProjection"]
