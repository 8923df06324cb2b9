"""Gangs' trace contexts recovered after a start from a snapshot.

A fold remembers each gang's carried context (`tracing.GangTraces`) as it folds the gang's
enqueue. A snapshot holds the domain state only (the replay and the time-travel folds load it
too; a context is never part of a decision): a service that starts from a snapshot at `seq` folds
only what comes after it, so a gang enqueued before it and decided after it had no context, and
its trace broke at the restart. `recover` reads the contexts back from the log: each unfinished
gang the loaded state holds was completed by the message at its `arrival`, whose `GangEnqueued`
carries the submitter's context. The tail after the snapshot is folded as before (its enqueues,
and admission's decisions for preemption, are seen by the fold).

What comes back is the enqueue's context: a gang admitted before the restart is joined, after it,
to its enqueue's span (the same trace) rather than to admission's decision span. A gang still
waiting for members (no `arrival` yet) is not looked for. Only while tracing is on (`tracing.ON`),
for at most `GangTraces.LIMIT` gangs (the newest arrivals) and `SECONDS` of reading: a start is
never held longer for a trace."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import anyio

from events import DecodeError, decode_all, read_envelope, read_pack
from events.subjects import PREFIX
from services.admission.domain.model import FINISHED
from services.admission.domain.state import AdmissionState
from services.common import tracing
from services.common.log import EventLog

logger = logging.getLogger(__name__)
SECONDS = 10.0  # the most a start spends reading contexts back
GAP = 256  # wanted positions closer than this are read in one range (the gang subjects only)
SPAN = 4096  # the most positions one read covers
GANG_SUBJECTS = (f"{PREFIX}.gang.*",)


def held_arrivals(state: AdmissionState, upto: int) -> dict[int, set[tuple[str, str]]]:
    """The unfinished gangs `state` holds that were completed at or before `upto`, by the position
    of the message that completed them: {arrival: {(tree, gang)}}."""
    out: dict[int, set[tuple[str, str]]] = {}
    for tree, rt in state.trees.items():
        for gang in rt.gangs.values():
            if 0 < gang.arrival <= upto and gang.state not in FINISHED:
                out.setdefault(gang.arrival, set()).add((tree, gang.id))
    return out


def ranges(positions: Iterable[int], gap: int = GAP, span: int = SPAN) -> list[tuple[int, int]]:
    """Sorted positions gathered into (first, last) ranges: a position within `gap` of the range's
    last joins it, unless the range would cover more than `span` positions."""
    out: list[tuple[int, int]] = []
    for seq in sorted(positions):
        if out and seq - out[-1][1] <= gap and seq - out[-1][0] < span:
            out[-1] = (out[-1][0], seq)
        else:
            out.append((seq, seq))
    return out


async def recover(log: EventLog, folder: Any, upto: int) -> int:
    """After `folder` (admission's or preemption's, or a wrapper's `inner`: `state`, or
    `state.admission`, and `traces`) loaded a snapshot taken at `upto`: its unfinished gangs'
    contexts, read back from their enqueues. Returns how many gangs got theirs (an unsampled
    enqueue carries none)."""
    if not tracing.ON:
        return 0
    while not hasattr(folder, "traces") and hasattr(folder, "inner"):  # (a wrapper: explain's folder)
        folder = folder.inner
    state = getattr(folder, "state", None)
    state = getattr(state, "admission", state)
    traces: tracing.GangTraces | None = getattr(folder, "traces", None)
    if not isinstance(state, AdmissionState) or traces is None:
        return 0
    wanted = held_arrivals(state, upto)
    if len(wanted) > tracing.GangTraces.LIMIT:  # (the newest, as the fold would keep)
        wanted = {seq: wanted[seq] for seq in sorted(wanted)[-tracing.GangTraces.LIMIT:]}
    found: dict[tuple[str, str], dict[str, str]] = {}
    with anyio.move_on_after(SECONDS) as scope:
        for first, last in ranges(wanted):
            for stored in await log.read(first, GANG_SUBJECTS, last):
                gangs = wanted.get(stored.seq)
                if gangs is None:
                    continue
                try:
                    envelopes = decode_all(stored.data, read_envelope, read_pack)
                except DecodeError:
                    continue
                for envelope in envelopes:
                    event: Any = envelope.event
                    carried = envelope.trace
                    if event.type != "GangEnqueued" or carried is None or tracing.context_of(carried) is None:
                        continue
                    key = (event.tree, event.gang)
                    if key in gangs:
                        found[key] = carried
    if scope.cancelled_caught:
        logger.warning("%s: trace contexts of %d gangs read back in %.0f s; the others' traces break at this start",
                       getattr(folder, "service", "?"), len(found), SECONDS)
    # in their arrival order, before what the fold remembers from the tail: the oldest go first
    traces.found = {**found, **traces.found}
    while len(traces.found) > tracing.GangTraces.LIMIT:
        del traces.found[next(iter(traces.found))]
    return len(found)
