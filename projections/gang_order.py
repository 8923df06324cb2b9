"""Where admission's fold applies each event the gangs read model follows, and what waits until
admission has answered it (projections/gangs.py, points 1-3 of its docstring): `Held` is such an
event with the place it takes effect at (`at`), `anchor` finds that place for a decision, `place`
the part of the message it goes against, `split` what can be applied now and in which order, and
`load_held`/`keep_held` keep what waits in `gangs_held` (with `gangs_answered`, the highest
position admission has answered).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from events import (
    CYCLE_DECISION_TYPES,
    DecodeError,
    Envelope,
    GangFinished,
    GangRequeued,
    GangTimedOut,
    decode,
    encode,
)
from projections.base import Connection, delete_rows, insert_rows, registered
from projections.gang_tables import HELD, HELD_KEY

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


@dataclass(slots=True)
class Held:
    """An event of interest. `at` is where admission's fold applies it: its own position; or, for
    an admission decision (`anchor`), against the part (`slot`) of the message it is based on:
    a timer's just before it, an announcement of its fold just after it, a cycle's decision after
    the whole message (its cycle's trigger)."""

    seq: int
    type: str
    envelope: Envelope | None  # None: held in `gangs_held` but no longer decodes (skipped when due)
    refused: str | None = None  # admission's refusal of this input
    anchor: int | None = None  # an admission decision: the position it is based on (`anchor`)
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


def split(queue: list[Held], answered: int) -> tuple[list[int], list[int]]:
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


def place(queue: list[Held], fresh: list[Held]) -> None:
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


def anchor(envelope: Envelope) -> tuple[int | None, int]:
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


def load_held(conn: Connection) -> tuple[list[Held], int]:
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


def keep_held(conn: Connection, queue: list[Held], held: int, ready: list[int], waiting: list[int],
                  newly_refused: list[Held]) -> None:
    """`gangs_held` after this call: what was applied leaves it; what was not stays (with its
    refusal, if one came) or comes in. `queue[:held]` is what it held before."""
    delete_rows(conn, "gangs_held", HELD_KEY, [(queue[i].seq, queue[i].part) for i in ready if i < held])
    stay = {id(queue[i]) for i in waiting if i < held} if newly_refused else set()
    refused = [h for h in newly_refused if id(h) in stay]
    if refused:
        marks = pa.table({"seq": pa.array([h.seq for h in refused], pa.int64()),
                          "part": pa.array([h.part for h in refused], pa.int32()),
                          "refused": pa.array([h.refused for h in refused], pa.string())})
        with registered(conn, marks) as view:
            conn.execute(f"UPDATE gangs_held SET refused = m.refused FROM {view} AS m WHERE gangs_held.seq = m.seq "
                         "AND gangs_held.part = m.part")
    new = [(h, h.envelope) for h in (queue[i] for i in waiting if i >= held) if h.envelope is not None]
    insert_rows(conn, "gangs_held", HELD, [
        (h.seq, h.part, h.type, h.raw if h.raw is not None else encode(e), h.refused, h.anchor, h.rank, h.slot)
        for h, e in new])
    for h, _ in new:
        h.raw = None  # stored: what waits is kept decoded, not twice


__all__ = [
    "ADMISSION", "AFTER", "ANCHORED", "BEFORE", "CYCLE", "CYCLE_DECISIONS", "DECISIONS", "HELD_TYPES", "INPUTS", "LAST",
    "OWN", "TICK", "WAITS", "Held", "anchor", "keep_held", "load_held", "place", "split",
]
