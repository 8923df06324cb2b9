"""The dashboard's timeline: the newest decisions of the log (admissions, moves between queues,
timeouts, requeues, preemptions, starvation changes, finished gangs, refused inputs), read from
its tail.

`Timeline.follow(log, last)` reads the log's messages newest first, one at a time, back to the
last one it read before, and stops after `WINDOW` positions or `TIMELINE` new entries (under a
burst, one pack of a cycle's admissions is enough), whichever comes first; of them it keeps the
decision and refusal subjects, and decodes only what it keeps: a pack's envelopes are split
without decoding (`events.pack_parts`), and a cycle's `EntitlementsComputed` and `CycleCompleted`
(what every cycle writes, not a decision about a gang or a pool) are skipped unread. It keeps the
newest `TIMELINE` entries."""

from __future__ import annotations

from collections import deque
from typing import Any

from events import DecodeError, decode, subjects
from events.codec import pack_parts

WINDOW = 64  # log positions looked at per refresh, at most
TIMELINE = 100  # entries kept
DECISIONS = (f"{subjects.PREFIX}.decision.", f"{subjects.PREFIX}.rejected.")  # the subjects read
SKIPPED = (b'"type":"EntitlementsComputed"', b'"type":"CycleCompleted"')


class Timeline:
    def __init__(self) -> None:
        self.entries: deque[dict[str, Any]] = deque(maxlen=TIMELINE)
        self.read_to = 0  # the last log position read

    async def follow(self, log: Any, last: int) -> list[dict[str, Any]]:
        """The entries, newest first, once what the log holds up to `last` is read: its messages
        are read newest first, one at a time, back to the last one read before (or `WINDOW`
        positions back), and no further than `TIMELINE` new entries (under a burst, one pack of a
        cycle's admissions is enough)."""
        if last < self.read_to:  # another log (a new stream): start again
            self.entries.clear()
            self.read_to = 0
        new: list[dict[str, Any]] = []
        seq = last
        while seq > max(self.read_to, last - WINDOW) and len(new) < TIMELINE:
            found = await _message(log, seq)
            if found is not None and found[0].startswith(DECISIONS):
                for part, raw in reversed(list(enumerate(pack_parts(found[1])))):
                    if len(new) >= TIMELINE:
                        break
                    if not any(skip in raw for skip in SKIPPED):
                        new.append(entry(seq, part, raw))
            seq -= 1
        self.read_to = last
        self.entries.extendleft(reversed(new))
        return list(self.entries)


async def _message(log: Any, seq: int) -> tuple[str, bytes] | None:
    """The subject and data of the message at `seq` (None: none there any more)."""
    from nats.js.errors import NotFoundError

    try:
        found = await log.jsm.get_msg(log.stream, seq)
    except NotFoundError:
        return None
    return str(found.subject), bytes(found.data or b"")


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
