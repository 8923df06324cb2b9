"""Admission's fold of the live log in the CLI's own process, up to now or up to a past position:
what `apply --dry-run` and `whatif` compute on, and what `--at` (`poolwise state`, `pool tree`,
`gangs`, `explain`) answers from (issue 21).

The fold is the service's (`ExplainingFolder`: admission's folder with explain's notes; the
what-if's, `fold_state`, without them: it reads the state alone), started from admission's newest
snapshot at or before the position asked for (the object store keeps
each service's newest `snapshots.KEEP`, taken every `POOLWISE_SNAPSHOT_EVERY` positions), then
the log after it up to that position. With no snapshot that old (or none this code made), it
folds from the start: a position far back in a long history costs a fold of the log up to it.
Nothing is published: the decisions the fold makes again are dropped.

`--at` is a log position (`SEQ`, 1 to the log's last) or an event time (ISO 8601, UTC when no
zone is given): the last position whose event time is at or before it, found by bisecting the
log (event times are their writers' clocks: in log order, give or take those clocks' skew).
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from services.admission.queries import ExplainingFolder
from services.common.input_error import InputError

if TYPE_CHECKING:
    from services.admission.domain.state import AdmissionState
    from services.admission.folder import AdmissionFolder
    from services.common.log import EventLog

SEQ = re.compile(r"^\d+$")
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Position:
    """Where `--at` points: the log position, the event time there, how it was asked for."""

    seq: int
    time: float | None
    asked: str


async def fold_admission(url: str, at: str | None = None) -> tuple[ExplainingFolder, Position | None]:
    """Admission's fold (with explain's notes) of the log at `url` up to now, or up to `--at`;
    where it stopped (None: the end)."""
    folder = ExplainingFolder()
    return folder, await _fold_at(url, folder, at)


async def fold_state(url: str, at: str | None = None) -> tuple[AdmissionState, Position | None]:
    """`fold_admission` without explain's notes (the what-if's: it reads the state alone). The
    notes are a large part of a snapshot's load (a note per gang kept: docs/performance.md,
    "What-if (issue 21)") and a note made per decision folded."""
    from services.admission.folder import AdmissionFolder

    folder = AdmissionFolder()
    position = await _fold_at(url, folder, at)
    return folder.state, position


async def _fold_at(url: str, folder: ExplainingFolder | AdmissionFolder, at: str | None) -> Position | None:
    """Fold the log at `url` into `folder` up to now, or up to `--at`: where it stopped (None: the end)."""
    from services.common.jetstream import JetStreamLog

    log = await JetStreamLog.connect(url, name="poolwise-fold")
    try:
        position = None if at is None else await resolve_at(log, at)
        end = await log.last_seq() if position is None else position.seq
        await fold_into(log, folder, end)
        return position
    finally:
        await log.close()


async def fold_into(log: EventLog, folder: ExplainingFolder | AdmissionFolder, end: int) -> int:
    """Fold `log` into `folder` up to `end`, from the newest snapshot at or before it; the
    position the fold started from (0: the start of the log)."""
    from events import read_envelope
    from services.admission.folder import SUBJECTS
    from services.common.folding import fold_batch, gc_paused
    from services.common.log import read_in_chunks
    from services.common.memlog import subject_filter

    started = await restore(log, folder, end)
    folded = started
    wanted = subject_filter(SUBJECTS)
    async for piece in read_in_chunks(log, folded + 1, end_seq=end):
        with gc_paused():
            fold_batch(folder, [s for s in piece if wanted(s.subject)], folded, read_envelope)
        folded = piece[-1].seq
    return started


async def restore(log: EventLog, folder: ExplainingFolder | AdmissionFolder, end: int) -> int:
    """Load admission's newest usable snapshot at or before `end`: its position (0: none). The
    service's snapshot holds its state and explain's notes, pickled apart: a folder without
    notes loads the state alone (`Snapshot.decode(part=0)`)."""
    from nats.js import JetStreamContext

    from services.common.folding import anchored_on
    from services.common.snapshots import ObjectStoreSnapshots, load_newest

    nc, stream = getattr(log, "nc", None), getattr(log, "stream", None)
    if nc is None or not isinstance(stream, str):
        return 0
    store = ObjectStoreSnapshots(JetStreamContext(nc), stream, read_only=True)
    part = None if isinstance(folder, ExplainingFolder) else 0
    # frozen (kept out of the collector's passes: ~1 s of CPU a million objects otherwise): the
    # CLI's process is one-shot, its state alive until it ends
    snapshot, skipped = await load_newest(store, "admission", at_most=end, anchored=anchored_on(log), part=part,
                                          freeze=True)
    for why in skipped:
        logger.info("snapshot passed over: %s", why)
    if snapshot is None:
        logger.info("no snapshot of admission at or before %d: folding from the start", end)
        return 0
    folder.load(snapshot.state)
    logger.info("admission's fold started from its snapshot at %d (folding to %d)", snapshot.seq, end)
    return snapshot.seq


# --- --at --------------------------------------------------------------------------------------


async def resolve_at(log: EventLog, at: str) -> Position:
    """The log position `--at` names (see the module doc); an `InputError` (one line, exit 2) for
    one that is malformed, before the log or in the future."""
    text = at.strip()
    last = await log.last_seq()
    if SEQ.match(text):
        seq = int(text)
        if seq < 1:
            raise InputError(f"--at {at}: before the log (its first position is 1)")
        if seq > last:
            raise InputError(f"--at {at}: in the future (the log ends at position {last})")
        return Position(seq, await _time_at(log, seq), text)
    wanted = parse_time(at)
    if wanted > time.time():
        raise InputError(f"--at {at}: in the future (it is {_iso(time.time())} now)")
    if last < 1:
        raise InputError(f"--at {at}: before the log (the log is empty)")
    first = await _time_at(log, 1)
    if first is not None and wanted < first:
        raise InputError(f"--at {at}: before the log (its first event is at {_iso(first)})")
    low, high = 1, last  # the last position whose time is at or before `wanted`: bisect
    while low < high:
        middle = (low + high + 1) // 2
        found = await _time_at(log, middle)
        if found is None or found <= wanted:
            low = middle
        else:
            high = middle - 1
    return Position(low, await _time_at(log, low), text)


def parse_time(at: str) -> float:
    """An ISO 8601 time as seconds since the epoch (UTC when it names no zone)."""
    text = at.strip()
    try:
        found = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)
    except ValueError:
        raise InputError(f"--at {at!r}: neither a log position (a whole number) nor an ISO 8601 time "
                         "(2026-11-28T07:30:00Z)") from None
    if found.tzinfo is None:
        found = found.replace(tzinfo=UTC)
    return found.timestamp()


async def _time_at(log: EventLog, seq: int) -> float | None:
    """The event time of the message at `seq` (a pack's last event's); None if it has none."""
    from events import DecodeError, decode_all, read_envelope
    found = await log.read(seq, (), seq)
    if not found:
        return None
    try:
        envelopes = decode_all(found[0].data, read_envelope)
    except DecodeError:
        return None
    return envelopes[-1].seconds if envelopes else None


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def described(position: Position | None) -> str:
    """`as of log position 42 (2026-11-28T07:30:00Z)`, or `as of now` when there is none."""
    if position is None:
        return "as of now"
    when = f" ({_iso(position.time)})" if position.time is not None else ""
    return f"as of log position {position.seq}{when}"
