"""The fold of the gangs read model (projections/gangs.py): the events admission's fold applies
now, in its order (projections/gang_order.py), applied to the `gangs` and `tasks` rows they touch,
read back (or taken from the `RowCache`, projections/gang_rows.py), folded in Python and written
back (projections/gang_tables.py). The effects of each event are those of the gangs module's
docstring ("Effects").
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, cast

import pyarrow as pa

from events import (
    Envelope,
    GangAdmitted,
    GangCancelled,
    GangEnqueued,
    GangFinished,
    GangMovedToQueue,
    GangRequeued,
    GangTimedOut,
    PreemptionRequested,
    TaskStateChanged,
    event_class,
)
from projections.base import Connection, fetch_rows, registered
from projections.gang_order import Held
from projections.gang_rows import RowCache
from projections.gang_tables import FINISHED, GANGS, TASKS, TERMINAL, write_rows

Row = dict[str, Any]

FAST_PATH = True  # `GangFold._admitted_at_once` (off: every event applied one by one; tests compare)
# A refusal (as `Held.refused` holds it) of an input for a gang admission has forgotten: with no
# row (deleted by retention), it makes none.
FORGOTTEN = "gang_forgotten:"


def _gang_key(envelope: Envelope) -> tuple[str, str]:
    event = envelope.event
    return str(getattr(event, "tree", "")), str(getattr(event, "gang", ""))


class GangFold:
    """The gangs and tasks that the events touch, read back (or taken from the `RowCache`),
    folded in Python and written back with one delete and one insert per table."""

    def __init__(self, conn: Connection, events: list[Held], cache: RowCache, *, pruning: bool = False) -> None:
        self.conn = conn
        self.cache = cache
        self.pruning = pruning  # the store's retention is on: a gang with no row may have been deleted
        self.gangs: dict[tuple[str, str], Row] = {}
        self.members: dict[tuple[str, str], list[Row]] = {}  # (tree, gang) -> its tasks, in member order
        self.tasks: dict[tuple[str, str], Row] = {}  # (tree, task) -> row
        # the rows read (from the tables or the cache), with their `resources` as read: a row the
        # fold changed in place, but not its resources, is updated; any other row is replaced
        self.stored: dict[tuple[str, str], tuple[Row, object]] = {}  # (tree, gang) -> row, resources
        self.stored_tasks: dict[tuple[str, str], tuple[Row, object]] = {}  # (tree, task) -> row, resources
        # what the fold changed, in the order it first changed it (and so writes it: no sort)
        self.touched_gangs: dict[tuple[str, str], None] = {}
        self.touched_tasks: dict[tuple[str, str], None] = {}
        self.gang_columns: set[str] = {"updated_seq", "updated_at"}  # the columns changed (in any row)
        self.task_columns: set[str] = {"updated_seq", "updated_at"}
        self.taken_over = False  # a new task row replaced one of the same key read before
        self.keys = cache.read_keys(conn)
        envelopes = [(h.seq, h.envelope, h.refused) for h in events if h.envelope is not None]
        keys = [_gang_key(envelope) for _, envelope, _ in envelopes]
        self._load(set(keys))
        # rows built at once, as tuples (`_admitted_at_once`): gangs and tasks, and each task's gang
        self.new_gangs: list[tuple[Any, ...]] = []
        self.new_tasks: list[tuple[Any, ...]] = []
        self.new_owners: dict[tuple[str, str], tuple[str, str]] = {}
        skip = self._admitted_at_once(envelopes, keys) if FAST_PATH else set()
        for index, (seq, envelope, refused) in enumerate(envelopes):
            if index not in skip:
                self._apply(seq, envelope, refused)

    def _admitted_at_once(self, envelopes: list[tuple[int, Envelope, str | None]],
                          keys: list[tuple[str, str]]) -> set[int]:
        """The rows of the gangs that arrive whole and are admitted in this fold, with no other
        event of theirs in it (most gangs under load: `CYCLE_DECISIONS`), built at once as tuples;
        the indexes in `envelopes` (whose gangs are `keys`) of their two events, which `_apply`
        then skips. Applied one by one they give the same rows: a new gang (no row, `_load`),
        `pending` with all its members, then `admitted` at attempt 1, its tasks `ready` in its
        admitted pool. A gang is left to `_apply` if anything else of it is in the fold, or if a
        task id of it is any other task's (in the fold, or read: a task taken over)."""
        events: dict[tuple[str, str], list[int]] = {}
        task_ids: dict[tuple[str, str], int] = {}
        for index, key in enumerate(keys):
            indexes = events.get(key)
            if indexes is None:
                events[key] = [index]
            else:
                indexes.append(index)
            _, envelope, refused = envelopes[index]
            event: Any = envelope.event
            if refused is None and event.type == "GangEnqueued":
                tree = key[0]
                for spec in event.tasks:
                    task_key = (tree, spec.id)
                    task_ids[task_key] = task_ids.get(task_key, 0) + 1
        skip: set[int] = set()
        gangs, tasks = self.gangs, self.tasks
        for key, indexes in events.items():
            if len(indexes) != 2 or key in gangs:
                continue
            first, second = indexes
            enqueue_seq, enqueue_envelope, refused = envelopes[first]
            admit_seq, admit_envelope, _ = envelopes[second]
            enqueued: Any = enqueue_envelope.event
            admitted: Any = admit_envelope.event
            if (refused is not None or enqueued.type != "GangEnqueued" or admitted.type != "GangAdmitted"
                    or admitted.attempt != 1 or len(enqueued.tasks) < enqueued.size):
                continue
            tree = key[0]
            for spec in enqueued.tasks:
                task_key = (tree, spec.id)
                if task_ids[task_key] != 1 or task_key in tasks:
                    break
            else:
                skip.add(first)
                skip.add(second)
                self._add_admitted(enqueued, admitted, enqueue_seq, enqueue_envelope.time, admit_seq,
                                   admit_envelope.time)
        return skip

    def _add_admitted(self, enqueued: GangEnqueued, admitted: GangAdmitted, enqueue_seq: int,
                      enqueued_at: datetime, seq: int, time: datetime) -> None:
        tree, gang, job, pool = enqueued.tree, enqueued.gang, enqueued.job, admitted.pool
        resources: dict[str, float] = {}
        new_tasks, owners = self.new_tasks, self.new_owners
        for member, spec in enumerate(enqueued.tasks):
            amounts = spec.resources
            new_tasks.append((tree, spec.id, gang, job, pool, member, amounts, "ready", False, None, seq, time))
            owners[(tree, spec.id)] = (tree, gang)
            for kind, amount in amounts.items():
                resources[kind] = resources.get(kind, 0.0) + amount
        self.new_gangs.append((
            tree, gang, job, enqueued.user, pool, enqueued.pool, enqueued.size, len(enqueued.tasks), resources,
            enqueued.priority, enqueued.preemptible, enqueued.revocable, enqueued.controller, enqueued.timeout,
            "admitted", None, 1, enqueue_seq, 0, enqueued_at, time, None, None, seq, time))

    def _load(self, keys: Iterable[tuple[str, str]]) -> None:
        wanted: list[tuple[str, str]] = []
        for key in keys:
            gang = self.cache.gangs.get(key)
            if gang is None:
                wanted.append(key)
                continue
            self._loaded_gang(gang)
            rows = self.cache.members.get(key)
            if rows:
                self.members[key] = rows
                for task in rows:
                    self._loaded_task(task)
        if wanted and self.keys is not None:
            present = self.keys.gangs
            wanted = [key for key in wanted if hash(key) in present]  # the others have no row
        if not wanted:
            return
        table = pa.table({"tree": [k[0] for k in wanted], "gang": [k[1] for k in wanted]})
        with registered(self.conn, table) as view:
            for row in fetch_rows(self.conn, f"SELECT g.* FROM gangs g JOIN {view} USING (tree, gang)"):
                self._loaded_gang(row)
            for row in fetch_rows(self.conn, f"SELECT t.* FROM tasks t JOIN {view} USING (tree, gang) "
                                             "ORDER BY t.tree, t.gang, t.member"):
                self.members.setdefault((row["tree"], row["gang"]), []).append(row)
                self._loaded_task(row)

    def _loaded_gang(self, row: Row) -> None:
        key = (row["tree"], row["gang"])
        self.gangs[key] = row
        self.stored[key] = (row, row["resources"])

    def _loaded_task(self, row: Row) -> None:
        key = (row["tree"], row["task"])
        self.tasks[key] = row
        self.stored_tasks[key] = (row, row["resources"])

    # --- applying one event -------------------------------------------------------------------

    def _apply(self, seq: int, envelope: Envelope, refused: str | None) -> None:
        event = envelope.event
        time = envelope.time
        kind = event_class(event)  # gang events may be views of their models (events.views)
        if kind is GangEnqueued:
            self._enqueued(cast(GangEnqueued, event), seq, time, refused)
        elif refused is not None:
            return  # a refused input changes nothing
        elif kind is GangAdmitted:  # the most common decision first
            self._admitted(cast(GangAdmitted, event), seq, time)
        elif kind is TaskStateChanged:  # (the model, or its view: events.views)
            self._reported(cast(TaskStateChanged, event), seq, time)
        elif isinstance(event, GangCancelled):
            self._cancelled(event, seq, time)
        elif kind is GangMovedToQueue:
            event = cast(GangMovedToQueue, event)
            gang = self.gangs.get((event.tree, event.gang))
            if gang is not None and gang["state"] == "pending" and gang["queue"] != event.queue:
                self._touch(gang, seq, time, queue=event.queue, last_reason=event.reason)
                self._set_pool(gang, event.pool)
        elif isinstance(event, GangRequeued):
            gang = self.gangs.get((event.tree, event.gang))
            if gang is not None and gang["state"] == "admitted":
                self._requeue(gang, seq, time, event.reason)
        elif isinstance(event, PreemptionRequested):
            self._preempted(event, seq, time)
        elif isinstance(event, GangTimedOut):
            gang = self.gangs.get((event.tree, event.gang))
            if gang is not None and gang["state"] == "waiting":
                self._touch(gang, seq, time, state="timed_out", queue=None,
                            last_reason=f"{event.members} of {event.size} members at its deadline")
                self._set_pool(gang, event.pool)
        elif isinstance(event, GangFinished):
            self._finished(event, seq, time)

    def _enqueued(self, event: GangEnqueued, seq: int, time: datetime, refused: str | None) -> None:
        key = (event.tree, event.gang)
        gang = self.gangs.get(key)
        if refused is not None:
            if gang is None and not refused.startswith(FORGOTTEN):  # first members refused: the id is used up
                gang = self._new_gang(event, seq, time)
                self._touch(gang, seq, time, state="rejected", last_reason=refused)
            return
        if gang is None:
            gang = self._new_gang(event, seq, time)
        elif gang["state"] != "waiting":
            return  # cannot be: admission takes members only for a waiting gang
        tasks = self.members.setdefault(key, [])
        resources = dict(gang["resources"] or {})
        tree, job, pool = event.tree, gang["job"], gang["pool"]
        for spec in event.tasks:
            amounts = spec.resources
            task = {
                "tree": tree, "task": spec.id, "gang": event.gang, "job": job, "pool": pool,
                "member": len(tasks), "resources": dict(amounts), "state": "pending",
                "preemption_requested": False, "started_at": None, "updated_seq": seq, "updated_at": time,
            }
            tasks.append(task)
            task_key = (tree, spec.id)
            if task_key in self.tasks:
                self.taken_over = True
            self.tasks[task_key] = task
            self.touched_tasks[task_key] = None
            for kind, amount in amounts.items():
                resources[kind] = resources.get(kind, 0.0) + amount
        changes: Row = {"members": len(tasks), "resources": resources}
        if len(tasks) >= gang["size"]:
            changes.update(state="pending", queue="pending", arrival=seq)
        self._touch(gang, seq, time, **changes)

    def _new_gang(self, event: GangEnqueued, seq: int, time: datetime) -> Row:
        gang: Row = {
            "tree": event.tree, "gang": event.gang, "job": event.job, "user": event.user, "pool": event.pool,
            "requested_pool": event.pool, "size": event.size, "members": 0, "resources": {},
            "priority": event.priority, "preemptible": event.preemptible, "revocable": event.revocable,
            "controller": event.controller, "timeout": event.timeout, "state": "waiting", "queue": None,
            "attempt": 0, "arrival": None, "requeues": 0, "enqueued_at": time, "admitted_at": None,
            "finished_at": None, "last_reason": None, "updated_seq": seq, "updated_at": time,
        }
        self.gangs[(event.tree, event.gang)] = gang
        self.touched_gangs[(event.tree, event.gang)] = None
        return gang

    def _admitted(self, event: GangAdmitted, seq: int, time: datetime) -> None:
        gang = self.gangs.get((event.tree, event.gang))
        if gang is None or gang["state"] != "pending" or event.attempt != (gang["attempt"] or 0) + 1:
            return  # decided on a state that moved on: no effect (as in admission's fold)
        self._touch(gang, seq, time, state="admitted", queue=None, attempt=event.attempt, admitted_at=time)
        self._set_pool(gang, event.pool)
        for task in self._tasks_of(gang):
            self._set_task(task, seq, time, state="ready")

    def _reported(self, event: TaskStateChanged, seq: int, time: datetime) -> None:
        task = self.tasks.get((event.tree, event.task))
        gang = self.gangs.get((event.tree, event.gang))
        if task is None or gang is None or task["gang"] != event.gang or task["state"] == event.state:
            return
        changes: Row = {"state": event.state}
        if event.state == "running" and task["started_at"] is None:
            changes["started_at"] = time
        self._set_task(task, seq, time, **changes)
        self._maybe_stopped(gang, seq, time)

    def _preempted(self, event: PreemptionRequested, seq: int, time: datetime) -> None:
        gang = self.gangs.get((event.tree, event.gang))
        if gang is None or gang["state"] != "admitted":
            return
        for task in self._tasks_of(gang):  # whole gangs: every live task, whichever the request names
            if task["state"] in TERMINAL or task["state"] == "pending":
                continue
            if task["state"] in ("ready", "placing"):  # nothing runs yet: given back at once
                self._set_task(task, seq, time, state="preempted")
            elif not task["preemption_requested"]:
                self._set_task(task, seq, time, preemption_requested=True)
        self._touch(gang, seq, time, last_reason=f"preemption requested: {event.reason}")
        self._maybe_stopped(gang, seq, time)

    def _maybe_stopped(self, gang: Row, seq: int, time: datetime) -> None:
        """Every task of an admitted gang ended: done, or back to pending if any was preempted."""
        tasks = self._tasks_of(gang)
        if gang["state"] != "admitted" or not tasks or any(t["state"] not in TERMINAL for t in tasks):
            return
        if any(t["state"] == "preempted" for t in tasks):
            self._requeue(gang, seq, time, "its tasks were preempted")
        else:
            self._touch(gang, seq, time, state="done", finished_at=time)

    def _requeue(self, gang: Row, seq: int, time: datetime, reason: str) -> None:
        self._touch(gang, seq, time, state="pending", queue="pending", admitted_at=None,
                    requeues=(gang["requeues"] or 0) + 1, last_reason=reason)
        for task in self._tasks_of(gang):
            self._set_task(task, seq, time, state="pending", started_at=None, preemption_requested=False)

    def _cancelled(self, event: GangCancelled, seq: int, time: datetime) -> None:
        gang = self.gangs.get((event.tree, event.gang))
        if gang is None or gang["state"] in FINISHED:
            return  # cannot be: admission refuses to cancel such a gang
        if gang["state"] == "admitted":
            for task in self._tasks_of(gang):
                if task["state"] not in TERMINAL:
                    self._set_task(task, seq, time, state="killed")
        reason = f"cancelled: {event.reason}" if event.reason else "cancelled"
        self._touch(gang, seq, time, state="cancelled", queue=None, finished_at=time, last_reason=reason)

    def _finished(self, event: GangFinished, seq: int, time: datetime) -> None:
        key = (event.tree, event.gang)
        gang = self.gangs.get(key)
        if gang is None:  # not seen before (a log that starts later): what the decision says
            if self.pruning:  # or deleted (retention): it stays so
                return
            gang = {column: None for column in GANGS.names}
            gang.update(tree=event.tree, gang=event.gang, pool=event.pool, state=event.outcome, members=0,
                        requeues=0, attempt=0)
            self.gangs[key] = gang
        if gang["state"] not in FINISHED:
            if event.outcome == "cancelled" and gang["state"] == "admitted":
                for task in self._tasks_of(gang):
                    if task["state"] not in TERMINAL:
                        self._set_task(task, seq, time, state="killed")
            self._touch(gang, seq, time, state=event.outcome, queue=None)
        if gang["finished_at"] is None:
            self._touch(gang, seq, time, finished_at=time)
        self._set_pool(gang, event.pool)

    # --- small helpers ------------------------------------------------------------------------

    def _tasks_of(self, gang: Row) -> list[Row]:
        return self.members.get((gang["tree"], gang["gang"]), [])

    def _touch(self, gang: Row, seq: int, time: datetime, **changes: Any) -> None:
        gang.update(changes)
        gang["updated_seq"], gang["updated_at"] = seq, time
        self.gang_columns.update(changes)
        self.touched_gangs[(gang["tree"], gang["gang"])] = None

    def _set_task(self, task: Row, seq: int, time: datetime, **changes: Any) -> None:
        for column, value in changes.items():
            if task.get(column) != value:
                break
        else:
            return  # nothing changes
        task.update(changes)
        task["updated_seq"], task["updated_at"] = seq, time
        self.task_columns.update(changes)
        self.touched_tasks[(task["tree"], task["task"])] = None

    def _set_pool(self, gang: Row, pool: str) -> None:
        if gang["pool"] == pool:
            return
        gang["pool"] = pool
        self.gang_columns.add("pool")
        self.task_columns.add("pool")
        self.touched_gangs[(gang["tree"], gang["gang"])] = None
        for task in self._tasks_of(gang):
            task["pool"] = pool
            self.touched_tasks[(task["tree"], task["task"])] = None

    # --- writing ------------------------------------------------------------------------------

    def write(self) -> None:
        write_rows(self.conn, "gangs", GANGS, ("tree", "gang"), [(k, self.gangs[k]) for k in self.touched_gangs],
                   self.stored, self.gang_columns, self.new_gangs, self.keys)
        tasks = list(self.touched_tasks)
        write_rows(self.conn, "tasks", TASKS, ("tree", "task"), [(k, self.tasks[k]) for k in tasks], self.stored_tasks,
                   self.task_columns, self.new_tasks, self.keys)
        self.cache.written(self.touched_gangs, self.gangs, self.members, self.tasks, tasks, self.taken_over)
        if self.new_owners:
            self.cache.written_new(self.new_owners)


__all__ = ["FAST_PATH", "FORGOTTEN", "GangFold"]
