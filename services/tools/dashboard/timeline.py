"""The dashboard's timeline: the newest decisions of the log (admissions, moves between queues,
timeouts, requeues, preemptions, starvation changes, finished gangs, refused inputs), read from
its tail.

`Timeline.follow(log, last)` reads what the log holds after the last position it read before
(at most `WINDOW` positions back from `last`) in one batch (`log.read`: one short-lived
consumer filtered to the decision and refusal subjects, instead of a request per position),
and goes through it newest first, stopping at `TIMELINE` new entries (under a burst, one pack
of a cycle's admissions is enough). It decodes only what it keeps: a pack's envelopes are split
without decoding (`events.pack_parts`), and a cycle's `EntitlementsComputed` and
`CycleCompleted` (what every cycle writes, not a decision about a gang or a pool) are skipped
unread. It keeps the newest `TIMELINE` entries."""

from __future__ import annotations

from collections import deque
from typing import Any

from events import DecodeError, decode, subjects
from events.codec import pack_parts
from services.common.log import EventLog

WINDOW = 64  # log positions looked at per refresh, at most
TIMELINE = 100  # entries kept
SUBJECTS = (subjects.decision("*", "*"), subjects.rejected("*"))  # the subjects read
SKIPPED = (b'"type":"EntitlementsComputed"', b'"type":"CycleCompleted"')


class Timeline:
    def __init__(self) -> None:
        self.entries: deque[dict[str, Any]] = deque(maxlen=TIMELINE)
        self.read_to = 0  # the last log position read

    async def follow(self, log: EventLog, last: int) -> list[dict[str, Any]]:
        """The entries, newest first, once what the log holds up to `last` is read: the decisions
        after the last position read before (or `WINDOW` positions back), in one read, taken
        newest first, and no more than `TIMELINE` new entries (under a burst, one pack of a
        cycle's admissions is enough)."""
        if last < self.read_to:  # another log (a new stream): start again
            self.entries.clear()
            self.read_to = 0
        start = max(self.read_to, last - WINDOW) + 1
        found = await log.read(start, SUBJECTS, end_seq=last) if start <= last else []
        new: list[dict[str, Any]] = []
        for stored in reversed(found):
            if len(new) >= TIMELINE:
                break
            for part, raw in reversed(list(enumerate(pack_parts(stored.data)))):
                if len(new) >= TIMELINE:
                    break
                if not any(skip in raw for skip in SKIPPED):
                    new.append(entry(stored.seq, part, raw))
        self.read_to = last
        self.entries.extendleft(reversed(new))
        return list(self.entries)


def entry(seq: int, part: int, raw: bytes) -> dict[str, Any]:
    """One event as the timeline shows it: where it is, when, its type, and what it is about."""
    try:
        envelope = decode(raw)
    except DecodeError as exc:
        return {"seq": seq, "part": part, "time": None, "type": "malformed", "text": str(exc)[:200]}
    event = envelope.event
    found = {name: getattr(event, name, None) for name in ("tree", "pool", "gang")}
    return {"seq": seq, "part": part, "time": envelope.time.isoformat(), "type": event.type, **found,
            "text": describe(event)}


def describe(event: Any) -> str:
    """A line for people, from the event's own fields."""
    kind = event.type
    if kind == "GangAdmitted":
        return f"gang {event.gang} admitted to {event.pool} from queue {event.queue} ({len(event.tasks)} tasks)"
    if kind == "GangMovedToQueue":
        return f"gang {event.gang} moved to queue {event.queue} of {event.pool}: {event.reason}"
    if kind == "GangTimedOut":
        return f"gang {event.gang} timed out in {event.pool} with {event.members} of {event.size} members"
    if kind == "GangRequeued":
        return f"gang {event.gang} requeued in {event.pool} ({event.cause}): {event.reason}"
    if kind == "PreemptionRequested":
        return f"preempt {len(event.tasks)} tasks of gang {event.gang} in {event.pool}: {event.reason}"
    if kind == "PoolStarvationChanged":
        kinds = f" on {', '.join(event.kinds)}" if event.kinds else ""
        return f"pool {event.pool}: {event.previous.replace('_', ' ')} -> {event.status.replace('_', ' ')}{kinds}"
    if kind == "GangFinished":
        return f"gang {event.gang} finished in {event.pool}: {event.outcome.replace('_', ' ')}"
    if kind == "InputRejected":
        return f"refused {event.input_type} ({event.rule}): {event.reason}"[:300]
    return str(kind)
