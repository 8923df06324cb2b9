"""The shell every deciding service shares: fold the log, decide, publish, project, acknowledge.

A `Folder` is a service's pure part behind one method: `step(envelope, seq)` folds one event
and returns the decisions to publish (already in envelopes with derived ids). `run_folder` wires
it to the log:

    1. rebuild: read the whole log, fold it, and collect the decisions the fold makes that are
       not in the log yet (a crash between deciding and publishing): publish those;
    2. live: consume after the last folded position in batches; per batch, fold each event
       (decisions collected), publish the batch's decisions (acknowledged), write the
       projections with their checkpoint in one transaction, acknowledge the batch;
    3. a malformed event on a subject the service owns becomes an `InputRejected` and the
       stream moves on.

Decision ids are derived from (service, basis sequence, what was decided), so deciding again
after a restart publishes nothing twice (JetStream de-duplicates on `Nats-Msg-Id`, and step 1
skips ids already stored).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Protocol

import anyio

from events import DecodeError, Envelope, InputRejected, at_seconds, decode, derived_id
from events.subjects import PREFIX
from projections.store import ProjectionStore
from services.common.log import EventLog, Stored
from services.common.memlog import subject_filter
from services.common.telemetry import span


class Folder(Protocol):
    service: str

    def step(self, envelope: Envelope, seq: int) -> list[Envelope]:
        """Fold one event; return the decisions it leads to (in envelopes)."""
        ...

    def owns(self, subject: str) -> bool:
        """Whether malformed messages on `subject` are this service's to reject."""
        ...

    @property
    def now(self) -> float:
        ...


def rejection_of_malformed(service: str, stored: Stored, error: DecodeError, now: float) -> Envelope:
    """The `InputRejected` for a message that is not a valid event."""
    parts = stored.subject.split(".")
    tree = parts[2] if len(parts) >= 3 and parts[0] == PREFIX and parts[1] in ("gang", "task", "clock", "config") \
        else None
    text = stored.data.decode("utf-8", errors="replace")[:4096]
    event = InputRejected(tree=tree, ref=error.event_id or f"seq:{stored.seq}",
                          input_type=error.event_type or "unknown",
                          reason=str(error), rule=error.rule, field=error.field, input=text,
                          input_id=error.event_id, input_seq=stored.seq)
    return Envelope(id=derived_id(service, stored.seq, "malformed"), time=at_seconds(now), source=service,
                    basis=stored.seq, event=event)


@dataclass(slots=True)
class FoldResult:
    decisions: list[Envelope] = field(default_factory=list)
    last_seq: int = 0


def fold_batch(folder: Folder, batch: Sequence[Stored], after: int) -> FoldResult:
    """Fold every event after `after`; malformed ones on owned subjects become rejections."""
    result = FoldResult(last_seq=after)
    for stored in batch:
        if stored.seq <= after:
            continue
        try:
            envelope = decode(stored.data)
        except DecodeError as error:
            if folder.owns(stored.subject):
                result.decisions.append(rejection_of_malformed(folder.service, stored, error, folder.now))
            result.last_seq = stored.seq
            continue
        result.decisions.extend(folder.step(envelope, stored.seq))
        result.last_seq = stored.seq
    return result


OnBatch = Callable[[int], Awaitable[None]]


async def rebuild(log: EventLog, folder: Folder, subjects: Sequence[str]) -> int:
    """Step 1: fold the whole log; publish the decisions it makes that the log lacks. Returns the
    last folded sequence."""
    everything = await log.read(1)  # ids of the whole log: refusals live on subjects we do not fold
    wanted = subject_filter(tuple(subjects))
    history = [s for s in everything if wanted(s.subject)]
    present = {s.msg_id for s in everything if s.msg_id}
    if not any(s.msg_id for s in everything):  # adapters that do not keep ids: read them from the events
        present = set()
        for s in everything:
            with suppress(DecodeError):
                present.add(decode(s.data).id)
    result = fold_batch(folder, history, 0)
    missing = [d for d in result.decisions if d.id not in present]
    if missing:
        await log.append(missing)
    return result.last_seq


async def run_folder(
    log: EventLog,
    folder: Folder,
    subjects: Sequence[str],
    *,
    durable: str,
    store: ProjectionStore | None = None,
    on_batch: OnBatch | None = None,
    max_batch: int = 2000,
    task_status: anyio.abc.TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Steps 1 and 2, forever (until cancelled). `on_batch(last_seq)` runs after each batch
    (the service's clock uses it)."""
    folded = await rebuild(log, folder, subjects)
    start = folded if store is None else min(folded, store.lowest_checkpoint)
    task_status.started(folded)

    async def handle(batch: Sequence[Stored]) -> None:
        nonlocal folded
        with span("fold batch", service=folder.service, events=len(batch)) as current:
            result = fold_batch(folder, batch, folded)
            current.set_attribute("decisions", len(result.decisions))
            if result.decisions:
                await log.append(result.decisions)
            if store is not None:
                await anyio.to_thread.run_sync(store.apply, batch)
        folded = result.last_seq
        if on_batch is not None:
            await on_batch(folded)

    await log.consume(durable, subjects, start, handle, max_batch=max_batch)
