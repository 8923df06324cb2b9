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
the same fold: their rows are built at once from those two events, as tuples (`_Fold.
_admitted_at_once`; in a 50k-gang burst the projection's cost per gang fell by about a third).

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

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from operator import itemgetter
from typing import Any, cast

import pyarrow as pa

from events import (
    CYCLE_DECISION_TYPES,
    DecodeError,
    Envelope,
    GangAdmitted,
    GangCancelled,
    GangEnqueued,
    GangFinished,
    GangMovedToQueue,
    GangRequeued,
    GangTimedOut,
    InputRejected,
    PreemptionRequested,
    TaskStateChanged,
    decode,
    encode,
    event_class,
)
from projections.base import (
    Connection,
    Item,
    Malformed,
    Projection,
    arrow_of_dicts,
    delete_rows,
    insert_rows,
    registered,
    small_write,
    update_rows,
    update_rows_of,
)
from projections.gang_rows import KEYS_LIMIT, Keys, RowCache

Row = dict[str, Any]

# The admission service's envelope `source`: the `basis` of its decisions tells how far it has folded.
ADMISSION = "admission"

INPUTS = frozenset({"GangEnqueued", "TaskStateChanged", "GangCancelled"})
# Waits like an input until admission has answered it: a tick, which may start cycles whose
# decisions take effect right after it (what comes after it must not be applied before them).
TICK = "ClockTicked"
WAITS = INPUTS | {TICK}
DECISIONS = frozenset(
    {"GangAdmitted", "GangMovedToQueue", "GangRequeued", "GangTimedOut", "GangFinished", "PreemptionRequested"}
)
HELD_TYPES = WAITS | DECISIONS
# A cycle's decisions take effect at its trigger (their basis), and answer the inputs before it
# once the cycle is complete (its CycleCompleted, same basis, comes after them): the inputs and the
# cycle's admissions are then applied together, and an admitted gang's rows are written once, not
# written pending and then updated.
CYCLE_DECISIONS = CYCLE_DECISION_TYPES - {"CycleCompleted"}  # (the cycle's close answers its trigger's inputs)
ANCHORED = CYCLE_DECISIONS & DECISIONS  # held decisions that take effect at the trigger
# Where a decision anchored at a position (`Held.anchor`) takes effect, against the event there
# (the part of it that caused the decision, `Held.slot`): before it (a timer's), after it (an
# announcement of its fold), or after the whole message (a cycle's); `OWN`: an event at its own place.
BEFORE, OWN, AFTER, CYCLE = 0, 1, 2, 3
LAST = 1 << 30  # the slot after every part of a message
FAST_PATH = True  # `_Fold._admitted_at_once` (off: every event applied one by one; tests compare)
# A refusal (as `Held.refused` holds it) of an input for a gang admission has forgotten: with no
# row (deleted by retention), it makes none.
FORGOTTEN = "gang_forgotten:"
TERMINAL = frozenset({"succeeded", "failed", "killed", "lost", "preempted"})
FINISHED = frozenset({"done", "timed_out", "cancelled", "rejected"})

_STR = pa.string()
_TIME = pa.timestamp("us", tz="UTC")
_AMOUNTS = pa.map_(pa.string(), pa.float64())

GANGS = pa.schema(
    [
        ("tree", _STR),
        ("gang", _STR),
        ("job", _STR),
        ("user", _STR),
        ("pool", _STR),
        ("requested_pool", _STR),
        ("size", pa.int32()),
        ("members", pa.int32()),
        ("resources", _AMOUNTS),
        ("priority", pa.int64()),
        ("preemptible", pa.bool_()),
        ("revocable", pa.bool_()),
        ("controller", pa.bool_()),
        ("timeout", pa.float64()),
        ("state", _STR),
        ("queue", _STR),
        ("attempt", pa.int32()),
        ("arrival", pa.int64()),
        ("requeues", pa.int32()),
        ("enqueued_at", _TIME),
        ("admitted_at", _TIME),
        ("finished_at", _TIME),
        ("last_reason", _STR),
        ("updated_seq", pa.int64()),
        ("updated_at", _TIME),
    ]
)
TASKS = pa.schema(
    [
        ("tree", _STR),
        ("task", _STR),
        ("gang", _STR),
        ("job", _STR),
        ("pool", _STR),
        ("member", pa.int32()),
        ("resources", _AMOUNTS),
        ("state", _STR),
        ("preemption_requested", pa.bool_()),
        ("started_at", _TIME),
        ("updated_seq", pa.int64()),
        ("updated_at", _TIME),
    ]
)
HELD = pa.schema(
    [("seq", pa.int64()), ("part", pa.int32()), ("type", _STR), ("message", pa.binary()), ("refused", _STR),
     ("anchor", pa.int64()), ("anchor_rank", pa.int32()), ("anchor_part", pa.int32())]
)
HELD_KEY = pa.schema([("seq", pa.int64()), ("part", pa.int32())])

UNCOMPRESSED = "USING COMPRESSION uncompressed"  # (the key columns: module docstring, "Retention")

_DDL = (
    f"""CREATE TABLE gangs (
        tree VARCHAR {UNCOMPRESSED} NOT NULL, gang VARCHAR {UNCOMPRESSED} NOT NULL, job VARCHAR, "user" VARCHAR,
        pool VARCHAR, requested_pool VARCHAR, size INTEGER, members INTEGER, resources MAP(VARCHAR, DOUBLE),
        priority BIGINT, preemptible BOOLEAN, revocable BOOLEAN, controller BOOLEAN, timeout DOUBLE,
        state VARCHAR NOT NULL, queue VARCHAR, attempt INTEGER, arrival BIGINT, requeues INTEGER,
        enqueued_at TIMESTAMPTZ, admitted_at TIMESTAMPTZ, finished_at TIMESTAMPTZ, last_reason VARCHAR,
        updated_seq BIGINT, updated_at TIMESTAMPTZ, PRIMARY KEY (tree, gang))""",
    f"""CREATE TABLE tasks (
        tree VARCHAR {UNCOMPRESSED} NOT NULL, task VARCHAR {UNCOMPRESSED} NOT NULL, gang VARCHAR NOT NULL,
        job VARCHAR, pool VARCHAR, member INTEGER, resources MAP(VARCHAR, DOUBLE), state VARCHAR NOT NULL,
        preemption_requested BOOLEAN, started_at TIMESTAMPTZ, updated_seq BIGINT, updated_at TIMESTAMPTZ,
        PRIMARY KEY (tree, task))""",
    """CREATE TABLE gangs_held (
        seq BIGINT NOT NULL, part INTEGER NOT NULL, type VARCHAR NOT NULL, message BLOB NOT NULL,
        refused VARCHAR, anchor BIGINT, anchor_rank INTEGER, anchor_part INTEGER, PRIMARY KEY (seq, part))""",
    "CREATE TABLE gangs_answered (answered BIGINT NOT NULL)",
    "INSERT INTO gangs_answered VALUES (0)",
)


@dataclass(slots=True)
class Held:
    """An event of interest. `at` is where admission's fold applies it: its own position; or, for
    an admission decision (`_anchor`), against the part (`slot`) of the message it is based on:
    a timer's just before it, an announcement of its fold just after it, a cycle's decision after
    the whole message (its cycle's trigger)."""

    seq: int
    type: str
    envelope: Envelope | None  # None: held in `gangs_held` but no longer decodes (skipped when due)
    refused: str | None = None  # admission's refusal of this input
    anchor: int | None = None  # an admission decision: the position it is based on (`_anchor`)
    part: int = 0  # its place in a pack of decisions (events.encode_pack)
    raw: bytes | None = None  # the bytes it was decoded from, if known (stored as they are when it waits)
    rank: int = OWN  # with an anchor: BEFORE, AFTER or CYCLE
    slot: int = LAST  # with an anchor: the part of the message there it is placed against

    @property
    def at(self) -> tuple[int, int, int, int, int]:
        if self.anchor is None:
            return (self.seq, self.part, OWN, 0, 0)
        return (self.anchor, self.slot, self.rank, self.seq, self.part)

    @property
    def key(self) -> tuple[int, int]:
        return (self.seq, self.part)


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
        for ddl in _DDL:
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
                anchor, rank = _anchor(envelope) if kind in DECISIONS else (None, OWN)
                fresh.append(Held(item.seq, kind, envelope, None, anchor, item.part, item.raw, rank))
            elif isinstance(event, InputRejected) and event.input_seq is not None and event.input_type in INPUTS:
                refusals[(event.input_seq, event.input_part or 0)] = f"{event.rule}: {event.reason}"
        if not fresh and not refusals and not answered:
            return
        if self._held is None:
            self._held, self._answered = _load_waiting(conn)
        if answered > self._answered:
            conn.execute("UPDATE gangs_answered SET answered = ?", [answered])
            self._answered = answered
        answered = self._answered
        held = self._held
        newly_refused = [h for h in held if h.refused is None and h.key in refusals] if refusals else []
        for h in [*newly_refused, *fresh] if refusals else ():
            h.refused = refusals.get(h.key, h.refused)
        queue = held + fresh
        _place(queue, fresh)
        ready, waiting = _split(queue, answered)
        if ready:
            _Fold(conn, [queue[i] for i in ready if queue[i].type != TICK], self._rows,
                  pruning=self.retention is not None).write()
        _keep_waiting(conn, queue, len(held), ready, waiting, newly_refused)
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
        keys = pa.table({"tree": pa.array([row[0] for row in found], _STR),
                         "gang": pa.array([row[1] for row in found], _STR)})
        with registered(conn, keys) as view:
            ((tasks,),) = conn.execute(
                f"DELETE FROM tasks USING {view} AS k WHERE tasks.tree = k.tree AND tasks.gang = k.gang").fetchall()
            conn.execute(
                f"DELETE FROM gangs USING {view} AS k WHERE gangs.tree = k.tree AND gangs.gang = k.gang").fetchall()
        return len(found) + int(tasks)


def _split(queue: list[Held], answered: int) -> tuple[list[int], list[int]]:
    """Where in `queue` (log order: by `key`) is what admission's fold applies now, in the order
    it applies them (by `at`), and what waits: the first input admission has not answered yet,
    and whatever the fold applies after it (a timer's announcement that lands later but fired
    before it does not wait)."""
    first = next((i for i, h in enumerate(queue) if h.type in WAITS and h.refused is None and h.seq >= answered),
                 None)
    if first is None:
        ready = list(range(len(queue)))
        moved = any(h.anchor is not None for h in queue)
        waiting: list[int] = []
    else:
        cut = queue[first].at  # in log order, what comes before it is applied before it, but anchored ones
        ready = [i for i in range(first) if queue[i].anchor is None or queue[i].at < cut]
        later = [i for i in range(first + 1, len(queue)) if queue[i].anchor is not None and queue[i].at < cut]
        moved = bool(later) or any(queue[i].anchor is not None for i in ready)
        if later or len(ready) < first:
            now = set(ready) | set(later)
            ready += later
            waiting = [i for i in range(len(queue)) if i not in now]
        else:
            waiting = list(range(first, len(queue)))
    if moved:
        ready.sort(key=lambda i: queue[i].at)
    return ready, waiting


def _place(queue: list[Held], fresh: list[Held]) -> None:
    """The slot of each new timer's or announcement's anchor: the part of the message at its basis
    that caused it (its envelope's `causation`; admission fires a timer before the part whose time
    passed the deadline, and announces what folding a part decided after that part). Found among
    what waits; if that part was applied already, where exactly does not matter any more."""
    placed = [h for h in fresh if h.anchor is not None and h.rank != CYCLE]
    if not placed:
        return
    parts = {(h.seq, h.envelope.id): h.part for h in queue if h.anchor is None and h.envelope is not None}
    for h in placed:
        causation = h.envelope.causation if h.envelope is not None else None
        found = parts.get((h.anchor or 0, causation)) if causation is not None else None
        h.slot = found if found is not None else (0 if h.rank == BEFORE else LAST)


def _anchor(envelope: Envelope) -> tuple[int | None, int]:
    """Where an admission decision takes effect, if not at its own position (None): at the
    position it is based on, `BEFORE` the event there (what a timer fired when time advanced
    there: admission's fold fires the timers due before it applies the event that advanced time,
    and announces them after, with that event's position as basis), `AFTER` it (what the fold
    announced as it applied that input: a gang done, cancelled, refused, requeued after a
    preemption), or after its message (`CYCLE`: a cycle's decisions, at its trigger)."""
    if envelope.source != ADMISSION or envelope.basis is None:
        return None, OWN
    event = envelope.event
    if event.type in ANCHORED:
        return envelope.basis, CYCLE
    timer = (
        isinstance(event, GangTimedOut)
        or (isinstance(event, GangFinished) and event.outcome == "timed_out")
        or (isinstance(event, GangRequeued) and event.cause == "placement_timeout")
    )
    return envelope.basis, BEFORE if timer else AFTER


def _load_waiting(conn: Connection) -> tuple[list[Held], int]:
    """`gangs_held`, decoded, in log order (a message that no longer decodes is skipped when its
    turn comes), and `gangs_answered`."""
    # fetchall: this DuckDB leaves a result read with fetchone open (a later `register` fails)
    rows = conn.execute("SELECT answered FROM gangs_answered").fetchall()
    answered = int(rows[0][0]) if rows else 0
    held: list[Held] = []
    for seq, part, kind, message, refused, anchor, rank, slot in conn.execute(
            "SELECT seq, part, type, message, refused, anchor, anchor_rank, anchor_part FROM gangs_held "
            "ORDER BY seq, part").fetchall():
        try:
            envelope: Envelope | None = decode(bytes(message))
        except DecodeError:
            envelope = None
        held.append(Held(int(seq), str(kind), envelope, refused, anchor, int(part), None,
                         OWN if rank is None else int(rank), LAST if slot is None else int(slot)))
    return held, int(answered)


def _keep_waiting(conn: Connection, queue: list[Held], held: int, ready: list[int], waiting: list[int],
                  newly_refused: list[Held]) -> None:
    """`gangs_held` after this call: what was applied leaves it; what was not stays (with its
    refusal, if one came) or comes in. `queue[:held]` is what it held before."""
    delete_rows(conn, "gangs_held", HELD_KEY, [(queue[i].seq, queue[i].part) for i in ready if i < held])
    stay = {id(queue[i]) for i in waiting if i < held} if newly_refused else set()
    refused = [h for h in newly_refused if id(h) in stay]
    if refused:
        marks = pa.table({"seq": pa.array([h.seq for h in refused], pa.int64()),
                          "part": pa.array([h.part for h in refused], pa.int32()),
                          "refused": pa.array([h.refused for h in refused], _STR)})
        with registered(conn, marks) as view:
            conn.execute(f"UPDATE gangs_held SET refused = m.refused FROM {view} AS m WHERE gangs_held.seq = m.seq "
                         "AND gangs_held.part = m.part")
    new = [(h, h.envelope) for h in (queue[i] for i in waiting if i >= held) if h.envelope is not None]
    insert_rows(conn, "gangs_held", HELD, [
        (h.seq, h.part, h.type, h.raw if h.raw is not None else encode(e), h.refused, h.anchor, h.rank, h.slot)
        for h, e in new])
    for h, _ in new:
        h.raw = None  # stored: what waits is kept decoded, not twice


def _keys(conn: Connection, cache: RowCache) -> Keys | None:
    """The keys of every `gangs` and `tasks` row (`RowCache.keys`), read once and then kept in
    step with every write; None when the tables hold more rows than `KEYS_LIMIT`."""
    if cache.keys is None and not cache.keys_off:
        ((count,),) = conn.execute("SELECT (SELECT count(*) FROM gangs) + (SELECT count(*) FROM tasks)").fetchall()
        if count > KEYS_LIMIT:
            cache.keys_off = True
            return None
        gangs = conn.execute("SELECT tree, gang FROM gangs").fetchall()
        tasks = conn.execute("SELECT tree, task FROM tasks").fetchall()
        cache.keys = Keys({hash((str(t), str(g))) for t, g in gangs}, {hash((str(t), str(k))) for t, k in tasks})
    return cache.keys


def _gang_key(envelope: Envelope) -> tuple[str, str]:
    event = envelope.event
    return str(getattr(event, "tree", "")), str(getattr(event, "gang", ""))


def fetch_rows(conn: Connection, sql: str, params: Sequence[object] = ()) -> list[Row]:
    """Rows of a query as dicts (maps as dicts, timestamps as aware datetimes), through Arrow."""
    relation = conn.sql(sql, params=list(params))
    to_table = getattr(relation, "to_arrow_table", None)  # duckdb >= 1.4; `arrow()` before
    table = to_table() if to_table is not None else relation.arrow()
    if not isinstance(table, pa.Table):
        table = table.read_all()
    rows: list[Row] = table.to_pylist(maps_as_pydicts="strict")
    return rows


class _Fold:
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
        self.keys = _keys(conn, cache)
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
        self._write("gangs", GANGS, ("tree", "gang"), [(k, self.gangs[k]) for k in self.touched_gangs], self.stored,
                    self.gang_columns, self.new_gangs)
        tasks = list(self.touched_tasks)
        self._write("tasks", TASKS, ("tree", "task"), [(k, self.tasks[k]) for k in tasks], self.stored_tasks,
                    self.task_columns, self.new_tasks)
        self.cache.written(self.touched_gangs, self.gangs, self.members, self.tasks, tasks, self.taken_over)
        if self.new_owners:
            self.cache.written_new(self.new_owners)

    def _write(self, table: str, schema: pa.Schema, key: tuple[str, str], rows: list[tuple[tuple[str, str], Row]],
               stored: dict[tuple[str, str], tuple[Row, object]], changed: set[str],
               new: list[tuple[Any, ...]]) -> None:
        """The rows read and changed in place (not their resources: a MAP is costly to update)
        are updated, in the `changed` columns; the others replace whatever has their key (a new
        task may take over another gang's task id) or are inserted (a gang that had no row), with
        the `new` rows (tuples in the order of `schema`: gangs that had no row, and their tasks)."""
        updated: list[Row] = []
        replaced: list[Row] = []
        for k, row in rows:
            before = stored.get(k)
            if before is not None and before[0] is row and before[1] is row["resources"]:
                updated.append(row)
            else:
                replaced.append(row)
        if updated:
            changes = pa.schema([f for f in schema if f.name in key or (f.name in changed and f.name != "resources")])
            if small_write(changes, len(updated)):
                update_rows_of(self.conn, table, key, changes, list(map(itemgetter(*changes.names), updated)))
            else:
                update_rows(self.conn, table, key, arrow_of_dicts(changes, updated))
        if replaced or new:
            keys = [*map(itemgetter(*key), replaced), *map(itemgetter(*map(schema.names.index, key)), new)]
            if table == "gangs":  # a gang that was not read has no row (`_load`), nor has a new one
                exists = any(k in stored for k in keys[:len(replaced)])
            else:  # a new task may take over a task id of a gang that was not read
                present = None if self.keys is None else self.keys.tasks
                exists = present is None or any(hash(k) in present for k in keys)
            if exists:
                delete_rows(self.conn, table, pa.schema([schema.field(name) for name in key]), keys)
            insert_rows(self.conn, table, schema, [*map(itemgetter(*schema.names), replaced), *new])


__all__ = ["GANGS", "TASKS", "GangsProjection", "fetch_rows"]
