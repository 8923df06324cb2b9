"""The dashboard's timeline: the newest decisions of the log (admissions, moves between queues,
timeouts, requeues, preemptions, starvation changes, finished gangs, refused inputs), read from
its tail.

`Timeline.follow(log, last)` reads the decision and refusal subjects among the log's last
`WINDOW` positions that it has not read before (so at most `WINDOW` messages per refresh however
busy the log), newest first, and decodes only what it keeps: a pack's envelopes are split without
decoding (`events.pack_parts`), and a cycle's `EntitlementsComputed` and `CycleCompleted` (what
every cycle writes, not a decision about a gang or a pool) are skipped unread. It keeps the
newest `TIMELINE` entries."""

from __future__ import annotations

from collections import deque
from typing import Any

from events import DecodeError, decode, subjects
from events.codec import pack_parts

WINDOW = 64  # log positions looked at per refresh, at most
TIMELINE = 100  # entries kept
SUBJECTS = (f"{subjects.PREFIX}.decision.*.*", f"{subjects.PREFIX}.rejected.*")
SKIPPED = (b'"type":"EntitlementsComputed"', b'"type":"CycleCompleted"')


class Timeline:
    def __init__(self) -> None:
        self.entries: deque[dict[str, Any]] = deque(maxlen=TIMELINE)
        self.read_to = 0  # the last log position read

    async def follow(self, log: Any, last: int) -> list[dict[str, Any]]:
        """The entries, newest first, once what the log holds up to `last` is read."""
        if last < self.read_to:  # another log (a new stream): start again
            self.entries.clear()
            self.read_to = 0
        start = max(self.read_to + 1, last - WINDOW + 1, 1)
        if start <= last:
            stored = await log.read(start, SUBJECTS, last)
            self.read_to = last
            new: list[dict[str, Any]] = []
            for message in reversed(stored):
                for part, raw in reversed(list(enumerate(pack_parts(message.data)))):
                    if len(new) >= TIMELINE:
                        break
                    if any(skip in raw for skip in SKIPPED):
                        continue
                    new.append(entry(message.seq, part, raw))
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
