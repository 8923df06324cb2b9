"""The shell every deciding service shares: fold the log, decide, publish, project, acknowledge.

A `Folder` is a service's pure part behind one method: `step(envelope, seq, part, last)` folds one event
and returns the decisions to publish (already in envelopes with derived ids). `run_folder` wires
it to the log:

    1. rebuild: read the whole log, fold it, and collect the decisions the fold makes that are
       not in the log yet (a crash between deciding and publishing): publish those;
    2. live: consume after the last folded position in batches; per batch, fold each event
       (decisions collected) and acknowledge the batch; in order behind the folding, publish
       each batch's decisions (acknowledged), then write the projections with their checkpoint
       in one transaction (folding the next batches overlaps with publishing: a restart
       republishes anything decided but not stored, step 1);
    3. a malformed event on a subject the service owns becomes an `InputRejected` and the
       stream moves on.

Decision ids are derived from (service, basis sequence, what was decided), so deciding again
after a restart publishes nothing twice (JetStream de-duplicates on `Nats-Msg-Id`, and step 1
skips ids already stored).
"""

from __future__ import annotations

import atexit
import gc
import logging
import os
import signal
import tempfile
import weakref
import zlib
from collections.abc import Awaitable, Callable, Generator, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import datetime
from time import perf_counter
from typing import IO, TYPE_CHECKING, Any, Protocol, cast

import anyio

from events import (
    INPUT_QUOTE_LIMIT,
    DecodeError,
    Envelope,
    Event,
    InputRejected,
    at_seconds,
    decode,
    decode_all,
    derived_id,
    fault_text,
    is_pack,
    read_envelope,
)
from events.subjects import PREFIX
from services.common import id_runs, metrics, trace_recovery, tracing
from services.common.decodes import SHARED
from services.common.log import EventLog, Stored, read_in_chunks
from services.common.memlog import subject_filter
from services.common.snapshots import (
    Anchored,
    Snapshot,
    SnapshotPolicy,
    SnapshotStore,
    Snapshotting,
    code_fingerprint,
    load_newest,
    pickled,
    runs_to_save,
    split_pickled,
)
from services.tree.domain import used_ids

_FILTERS = (used_ids.MemoryFilter, id_runs.FileFilter)  # (stored by a snapshot's save: they change)

if TYPE_CHECKING:  # the store is handed in: a service that keeps none loads neither DuckDB nor Arrow
    from projections.store import ProjectionStore


class Folder(Protocol):
    service: str

    def step(self, envelope: Envelope, seq: int, part: int = 0, last: bool = True) -> list[Envelope]:
        """Fold one event (at `seq`, the `part`-th of its message when that is a pack; `last`: the
        message's last event); return the decisions it leads to (in envelopes)."""
        ...

    def owns(self, subject: str) -> bool:
        """Whether malformed messages on `subject` are this service's to reject."""
        ...

    @property
    def now(self) -> float:
        ...


def decision_envelope(service: str, event: Event, key: str, basis: int, causation: str, time: datetime) -> Envelope:
    """A decision in its envelope: id derived from (service, basis, tree, key), stamped with the log's
    time. The tree is part of the id: one tick starts a cycle in every tree, and two trees may
    decide the same thing of the same gang id at the same basis (their decisions must not collide
    and be dropped as duplicates)."""
    tree = getattr(event, "tree", None)
    parts = (service, basis, key) if tree is None else (service, basis, tree, key)
    return Envelope(id=derived_id(*parts), time=time, source=service, causation=causation, basis=basis, event=event)


def rejection_of_malformed(service: str, stored: Stored, error: DecodeError, now: float) -> Envelope:
    """The `InputRejected` for a message that is not a valid event."""
    parts = stored.subject.split(".")
    tree = parts[2] if len(parts) >= 3 and parts[0] == PREFIX and parts[1] in ("gang", "task", "clock", "config") \
        else None
    text = stored.data.decode("utf-8", errors="replace")[:INPUT_QUOTE_LIMIT]
    event = InputRejected(tree=tree, ref=error.event_id or f"seq:{stored.seq}",
                          input_type=error.event_type or "unknown",
                          reason=str(error), rule=error.rule, field=error.field, input=text,
                          input_id=error.event_id, input_seq=stored.seq)
    return Envelope(id=derived_id(service, stored.seq, "malformed"), time=at_seconds(now), source=service,
                    basis=stored.seq, event=event)



def rejection_of_fault(service: str, envelope: Envelope, seq: int, part: int, error: Exception,
                       now: float) -> Envelope:
    """The `InputRejected` (rule `internal_error`) for an event whose fold or decision raised.

    No input may put a service into a crash loop (a restart folds the same entry and raises
    again): the event is refused with the exception's type and message and the service goes on.
    Whatever the fold changed before it raised stays changed (the code that raised is a bug to fix;
    the refusal says where it struck), and a replay derives the same refusal at the same place."""
    event = envelope.event
    tree = getattr(event, "tree", None)
    text = f"{service} could not handle {event.type} {envelope.id}: {fault_text(error)}"
    try:
        quoted = event.model_dump_json()[:INPUT_QUOTE_LIMIT]
    except Exception:  # (a view whose model cannot be built: the type and id say enough)
        quoted = ""
    refusal = InputRejected(tree=tree if isinstance(tree, str) else None, ref=envelope.id, input_type=event.type,
                            reason=text, rule="internal_error", input=quoted, input_id=envelope.id,
                            input_seq=seq, input_part=part or None)
    return Envelope(id=derived_id(service, seq, "fault", envelope.id), time=at_seconds(now), source=service,
                    basis=seq, event=refusal)


class GcPause:
    """Python's cyclic garbage collector kept off the services' state (re-entrant across the event
    loop's tasks).

    A service's state is many small long-lived objects (gangs, tasks, queue entries) and a batch
    makes many more: with the collector on, its collections rescan the whole state again and
    again (a fold took twice as long). So the collector is off while batches are folded and
    published, and when the last one is done what they left alive is moved out of its sight
    (`gc.freeze`: the state is long-lived by nature); reference counting still frees whatever the
    fold drops. Every `UNFREEZE_EVERY` batches everything is handed back to the collector and
    collected, so cyclic garbage made meanwhile (rare: event-loop internals) is freed after all.
    """

    UNFREEZE_EVERY = 1000

    def __init__(self) -> None:
        self.depth = 0
        self.resume = False
        self.batches = 0

    @contextmanager
    def __call__(self) -> Iterator[None]:
        if self.depth == 0:
            self.resume = gc.isenabled()
            gc.disable()
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1
            if self.depth == 0 and self.resume:
                self.batches += 1
                if self.batches % self.UNFREEZE_EVERY == 0:
                    # and collected now: unfrozen objects land in the oldest generation, which
                    # the collector's own schedule scans too rarely to reach before the next
                    # batch freezes them again (cycles made in batches were never freed)
                    gc.unfreeze()
                    gc.collect()
                else:
                    gc.freeze()
                gc.enable()


gc_paused = GcPause()
# Frozen objects are never collected, not even when the interpreter exits (extension modules then
# report them as leaked): hand them back when a folder stops, and at exit.
atexit.register(gc.unfreeze)


@dataclass(slots=True)
class FoldResult:
    decisions: list[Envelope] = field(default_factory=list)
    last_seq: int = 0


def fold_batch(folder: Folder, batch: Sequence[Stored], after: int,
               decoder: Callable[[bytes], Envelope] = decode,
               pack_decoder: Callable[[bytes], list[Envelope] | None] | None = None) -> FoldResult:
    """Fold every event after `after`; malformed ones on owned subjects become rejections."""
    result = FoldResult(last_seq=after)
    for stored in batch:
        if stored.seq <= after:
            continue
        try:
            envelopes = decode_all(stored.data, decoder, pack_decoder)  # one event, or a pack (events.codec)
        except DecodeError as error:
            if folder.owns(stored.subject):
                result.decisions.append(rejection_of_malformed(folder.service, stored, error, folder.now))
            elif (unreadable := getattr(folder, "unreadable", None)) is not None:
                # told, for a fold that may wait for what it held (services/preemption/held_trees.py)
                result.decisions.extend(unreadable(stored))
            result.last_seq = stored.seq
            continue
        end = len(envelopes) - 1
        for part, envelope in enumerate(envelopes):
            try:
                result.decisions.extend(folder.step(envelope, stored.seq, part, part == end))
            except Exception as error:  # a poison input: refused, and the stream moves on
                result.decisions.append(rejection_of_fault(folder.service, envelope, stored.seq, part, error,
                                                           folder.now))
        result.last_seq = stored.seq
    return result


logger = logging.getLogger(__name__)
OnBatch = Callable[[int], Awaitable[None]]
OUTBOX_BATCHES = 8  # folded batches whose decisions may wait to be published before folding waits
RUNS_STORED_EVERY = 5.0  # seconds between looks for id runs sealed and not in the snapshot store yet


async def rebuild(log: EventLog, folder: Folder, subjects: Sequence[str],
                  snapshots: SnapshotStore | None = None, warm: Warm | None = None,
                  policy: SnapshotPolicy | None = None) -> int:
    """Step 1: fold the whole log; publish the decisions it makes that the log lacks. Returns the
    last folded sequence.

    With `snapshots`, the fold starts from the newest snapshot made by this code (its state, the
    position it was taken at: `services/common/snapshots.py`) and folds only the tail after it;
    with none usable, from the start. A snapshot is taken only when every decision made before it
    is in the log, so the tail is all that can hold decisions the log lacks.

    The log is read a piece at a time (`read_in_chunks`), so a restart holds one piece and the
    state, never the whole log. A decision lands after the position it is based on, so a decision
    made again is known to be in the log once its id has been seen in what comes after it: the
    decisions made and not seen yet are kept (by id, in the order they were made), those seen
    dropped, and what is left at the end is missing (a crash came between deciding and
    publishing) and is published. Ids are read from every subject: refusals live on subjects we
    do not fold.

    With `policy`, the fold saves a snapshot every `policy.every` positions as it goes (in the
    background, one at a time; the last one finished before this returns), so that a start
    stopped or killed in a long fold resumes from the newest instead of the start. Such a
    snapshot's `pending` are the decisions made and not seen in the log yet: a start from it
    keeps them as this fold would have, and what it then folds and publishes is what this fold
    would have."""
    start = warm or Warm(folder, subjects)
    if policy is None:
        await start.catch_up(log, snapshots)
    else:
        failed: Exception | None = None
        saving: Saving | None = None
        try:
            async with anyio.create_task_group() as tg:
                try:
                    saving = Saving(policy, log, tg, await log.last_seq())
                    await start.catch_up(log, snapshots, saving)
                except Exception as exc:  # (raised as it was, not in the task group's ExceptionGroup)
                    failed = exc
                    tg.cancel_scope.cancel()
        finally:
            if saving is not None:
                saving.close()
        if failed is not None:
            raise failed
    if start.made:
        await log.append(list(start.made.values()))
        start.made.clear()
    return start.folded


class Warm:
    """A fold of the log that decides nothing on its own: what `rebuild` does before it publishes,
    and what a standby instance does while another leads (`follow`), so that on takeover it is
    caught up already and publishes only what the leader had not (`run_folder(warm=...)`).

    `made`: the decisions the fold made that have not been seen in the log yet (a decision lands
    after its basis: its id seen later drops it). A leader publishes them; what is left when this
    fold takes over is missing from the log."""

    def __init__(self, folder: Folder, subjects: Sequence[str]) -> None:
        self.folder = folder
        self.subjects = tuple(subjects)
        self.wanted = subject_filter(self.subjects)
        self.made: dict[str, Envelope] = {}  # decided again and not seen in the log (yet)
        self.folded = 0
        self.restored = False
        self.restored_at = 0  # the position of the snapshot the fold started from (0: the log's start)

    async def catch_up(self, log: EventLog, snapshots: SnapshotStore | None = None,
                       saving: Saving | None = None) -> int:
        """Fold what the log holds beyond `folded` (the first time: from the newest snapshot);
        with `saving`, snapshots saved as it goes (`rebuild`)."""
        if not self.restored:
            if snapshots is not None:  # (cancelled before it returns: nothing was loaded, tried again)
                self.folded = self.restored_at = await _restore(log, self.folder, snapshots, self.made)
            self.restored = True
        if saving is not None:
            saving.policy.started(self.folded, self.folder.now, restored=self.restored_at)
        wanted, made, folder = self.wanted, self.made, self.folder
        watched = metrics.status(folder.service)  # (a standby's fold is what its gauges read)
        watched.folder = folder
        async for piece in read_in_chunks(log, self.folded + 1):
            with gc_paused():  # (synchronous: a cancellation lands between pieces, never inside one)
                result = fold_batch(folder, [s for s in piece if wanted(s.subject)], self.folded, read_envelope)
            self.folded = max(self.folded, result.last_seq, piece[-1].seq)
            watched.folded = self.folded
            watched.events += len(piece)
            for decision in result.decisions:
                made[decision.id] = decision
            if made:
                for seen in ids_in(piece):
                    made.pop(seen, None)
            if saving is not None:
                saving.if_due(folder, self.folded, made)
                await anyio.lowlevel.checkpoint()  # (a log read that does not wait would starve the save)
        return self.folded

    async def follow(self, log: EventLog, snapshots: SnapshotStore | None = None, every: float = 0.1) -> None:
        """Keep folding the log as it grows, until cancelled (a standby's loop)."""
        try:
            while True:
                await self.catch_up(log, snapshots)
                await anyio.sleep(every)
        finally:
            metrics.stopped(self.folder.service, self.folder)  # (on takeover the term's fold takes it again)


class Saving:
    """A rebuild's snapshots (`rebuild`): one started every `policy.every` positions folded, where
    a piece of the log ends, saved in `tg` while the fold goes on; none while one is being saved,
    and none within `every` positions of `end` (the log's end when the rebuild began): the rebuild
    waits for a save it started before the service goes live, and the live service snapshots at
    its first batch what the rebuild folded since its last. Only where and when it is taken
    depends on the count of positions; what it holds is the fold as it stands there, as anywhere
    else."""

    def __init__(self, policy: SnapshotPolicy, log: EventLog, tg: anyio.abc.TaskGroup, end: int) -> None:
        self.policy, self.log, self.tg, self.end = policy, log, tg, end
        self.busy = False
        # the save's being made (closed by `close` if its task never ran; weakly: let go, it closes itself)
        self.pickling: weakref.ref[Pickling] | None = None

    def if_due(self, folder: Folder, folded: int, made: dict[str, Envelope]) -> None:
        if self.busy or not self.policy.due_folding_again(folded) or self.end - folded < self.policy.every:
            return
        self.busy = True
        # (the decisions not seen in the log yet, as they stand with the state: the fold after a
        # start from it drops those it then sees, and publishes the rest, as this one would)
        pending = list(made.values())
        pickling = take_snapshot(folder, folded)
        self.pickling = weakref.ref(pickling)
        self.tg.start_soon(self._save, folder, folded, pending, pickling)

    async def _save(self, folder: Folder, folded: int, pending: list[Envelope], pickling: Pickling) -> None:
        try:
            await save_snapshot(self.policy, self.log, folder.service, folded, folder.now, pickling, pending)
        finally:
            self.busy = False

    def close(self) -> None:
        """Once its task group is done: the save's pickling closed (its task may have been
        cancelled before it took a step, so it never did)."""
        pickling = self.pickling() if self.pickling is not None else None
        if pickling is not None:
            pickling.close()
        self.pickling = None


async def _restore(log: EventLog, folder: Folder, snapshots: SnapshotStore, made: dict[str, Envelope]) -> int:
    """Load the newest usable snapshot into `folder`: the position it was taken at (0: none)."""
    # frozen as it loads (the fold keeps it): `run_folder` unfreezes it when it stops
    snapshot, skipped = await load_newest(snapshots, folder.service, anchored=anchored_on(log), freeze=True)
    for why in skipped:
        logger.warning("snapshot passed over: %s", why)
    if snapshot is None:
        return 0
    cast(Snapshotting, folder).load(snapshot.state)
    await trace_recovery.recover(log, folder, snapshot.seq)  # (tracing on: its held gangs' contexts, from the log)
    id_runs.sweep_current()  # (its runs taken: the files no one uses left over from earlier)
    for decision in snapshot.pending:
        made[decision.id] = decision
    logger.info("%s: started from its snapshot at %d", folder.service, snapshot.seq)
    return snapshot.seq


async def anchor_of(log: EventLog, seq: int) -> int | None:
    """CRC-32 of the log's message at `seq` (what a snapshot at `seq` is anchored to)."""
    found = await log.read(seq, (), seq)
    return zlib.crc32(found[0].data) if len(found) == 1 and found[0].seq == seq else None


def anchored_on(log: EventLog) -> Anchored:
    """Whether a snapshot taken at `seq` with `anchor` is of this log: its message at `seq` is
    the one the snapshot was anchored to (`anchor_of`)."""

    async def anchored(seq: int, anchor: int | None) -> bool:
        return anchor is not None and await anchor_of(log, seq) == anchor

    return anchored


def take_snapshot(folder: Folder, folded: int) -> Pickling:
    """The folder's state through `folded`, pickled (`pickled_later`); made into a snapshot,
    compressed, by `Snapshot.encode_pickled` (in a thread)."""
    return pickled_later(cast(Snapshotting, folder).export())


class Pickling:
    """A state being pickled (awaited: its bytes), and the id runs alive when it was started:
    held until it is saved, so that none it names is merged away and deleted meanwhile.

    Pickled in a child process (`_pickled_later`), it owns the child and the file it writes:
    awaiting it reaps the one and deletes the other, and so does `close` (the child killed), which
    its owner calls when it will not await it (a save cancelled before its task took a step: a
    task group's task cancelled so never runs its `finally`), and which runs at the latest when
    it is let go (`weakref.finalize`)."""

    def __init__(self, data: bytes | None = None, pid: int | None = None, file: IO[bytes] | None = None) -> None:
        self.runs = [run for store in used_ids.stores_in_use() for run in store.alive()]
        self._data = data
        self._child = _Child(pid, file)
        self._closing = weakref.finalize(self, self._child.close)

    @property
    def closed(self) -> bool:
        return not self._closing.alive

    def __await__(self) -> Generator[Any, None, bytes]:
        return self._made().__await__()

    async def _made(self) -> bytes:
        if self._data is not None:
            return self._data
        try:
            return await anyio.to_thread.run_sync(self._child.result)
        finally:
            self.close()

    def close(self) -> None:
        """The child killed and reaped if it is not yet, its file deleted (idempotent)."""
        self._closing()


def read_whole(fd: int) -> bytes:
    """All of the file `fd` from its start: `pread` may return fewer bytes than asked (Linux gives
    at most 0x7ffff000 per call, and POSIX allows short reads anywhere), and a pickle cut short
    would be saved as a snapshot that fails only when loaded."""
    size = os.fstat(fd).st_size
    parts, done = [], 0
    while done < size:
        part = os.pread(fd, size - done, done)
        if not part:
            raise OSError(f"the snapshot's file ended at {done} of {size} bytes")
        parts.append(part)
        done += len(part)
    return b"".join(parts)


class _Child:
    """A pickling child process and the nameless file it writes (`Pickling`)."""

    def __init__(self, pid: int | None, file: IO[bytes] | None) -> None:
        self.pid, self.file = pid, file

    def result(self) -> bytes:
        """The pickle, once the child is done (blocks: in a thread)."""
        assert self.pid is not None and self.file is not None
        _, status = os.waitpid(self.pid, 0)
        self.pid = None  # (reaped: its number may be another process's from now on)
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            raise RuntimeError(f"the snapshot's child process ended with {code}")
        return read_whole(self.file.fileno())

    def close(self) -> None:
        if self.pid is not None:
            pid, self.pid = self.pid, None
            with suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            with suppress(ChildProcessError):
                os.waitpid(pid, 0)
        if self.file is not None:
            self.file.close()
            self.file = None


def pickled_later(state: object) -> Pickling:
    """`state` pickled for a snapshot (`_pickled_later`). The id records' filters are stored first
    (those changed since they last were: `used_ids.freeze_filters`), so that the snapshot names
    them and a start takes them instead of making them from the runs; one that cannot be stored
    (a disk full) is left out, made again from the runs by the start that needs it."""
    try:
        used_ids.freeze_filters()
    except OSError as exc:
        logger.warning("id filters not stored for a snapshot: %s", exc)
    return _pickled_later(state)


def _pickled_later(state: object) -> Pickling:
    """`snapshots.pickled(state)`, without holding the service up: the process forks, and the child
    pickles the state as it stood at the fork (the parent's pages are shared copy-on-write) into a
    file and exits, while the parent goes on folding; the awaitable reads the file once the child
    is done. (Pickling in the process held its event loop for seconds at 100k live gangs, and a
    lease renewal waits for the GIL.) Where there is no fork, the state is pickled at once."""
    if not hasattr(os, "fork") or os.environ.get("POOLWISE_SNAPSHOT_FORK", "1") == "0":
        return Pickling(pickled(state))
    # A file with no name (unlinked at once, or never linked): the child writes it through the
    # descriptor it inherits, the parent reads it there; whoever is killed when, nothing is left
    # in the temporary directory (a file named there stayed when a service was killed meanwhile).
    file = tempfile.TemporaryFile(prefix="poolwise-snapshot-")  # noqa: SIM115 (owned by the `Pickling`)
    try:
        pid = os.fork()
    except BaseException:
        file.close()
        raise
    if pid == 0:  # the child: pickle, write, and leave at once (no cleanup of the parent's things)
        code = 1
        try:
            data = memoryview(pickled(state))
            written = 0
            while written < len(data):
                written += os.pwrite(file.fileno(), data[written:], written)
            code = 0
        finally:
            os._exit(code)
    return Pickling(pid=pid, file=file)


async def save_snapshot(policy: SnapshotPolicy, log: EventLog, service: str, folded: int, now: float,
                        pickling: Awaitable[bytes], made: Sequence[Envelope] = ()) -> None:
    """Save the snapshot being pickled: `made`, the decisions made and not in the log yet (a
    rebuild's), and those the log keeps back (`policy.kept`) as its pending."""
    policy.last_seq, policy.last_time = folded, now
    try:
        kept = tuple(policy.kept()) if policy.kept is not None else ()  # as the state was pickled
        pending = tuple({decision.id: decision for decision in (*made, *kept)}.values())
        state_bytes = await pickling
        runs = runs_to_save(pickling, split_pickled(state_bytes)[0])
        id_runs.touch(runs.values())
        anchor = await anchor_of(log, folded)
        data = await anyio.to_thread.run_sync(Snapshot.encode_pickled, service, folded, code_fingerprint(), state_bytes,
                                              pending, anchor)
        await policy.store.save(service, folded, data, runs)
        policy.saved = max(policy.saved, folded)
        logger.info("%s: snapshot at %d (%d bytes)", service, folded, len(data))
    except Exception as exc:  # a snapshot is a cache: the service goes on without it
        logger.warning("%s: snapshot at %d not saved: %s: %s", service, folded, type(exc).__name__, exc)
    except BaseException:  # cancelled with the service: a clean stop saves again (`unsaved`)
        logger.debug("%s: snapshot at %d cut short by the service's stop", service, folded)
        raise
    finally:
        close = getattr(pickling, "close", None)  # (a `Pickling`: its child and file, if not awaited)
        if close is not None:
            close()


class Saves:
    """The snapshot saves a live service started, each in a task of the service's task group
    (the fold goes on meanwhile), tracked so that their lifetime is the service's: its stop
    (`close`) kills and reaps every pickling child not reaped yet and closes its file, whatever
    became of the save's task (one cancelled before its first step may never run its `finally`,
    on a backend that cancels a task that has not started), rather than leaving that to the
    pickling's finaliser, which runs whenever the task is let go. A save's errors are its own to
    log (`save_snapshot`: a snapshot is a cache, the service goes on)."""

    def __init__(self) -> None:
        self.picklings: list[Pickling] = []

    def start(self, tg: anyio.abc.TaskGroup, policy: SnapshotPolicy, log: EventLog, service: str, folded: int,
              now: float, pickling: Pickling) -> None:
        """Save `pickling` (the state at `folded`) in `tg`."""
        self.picklings = [*(one for one in self.picklings if not one.closed), pickling]  # (those done let go)
        tg.start_soon(save_snapshot, policy, log, service, folded, now, pickling)

    def close(self) -> None:
        """Once the task group is done: every save's pickling closed (idempotent)."""
        picklings, self.picklings = self.picklings, []
        for pickling in picklings:
            pickling.close()


async def store_runs_as_they_seal(policy: SnapshotPolicy, every: float | None = None) -> None:
    """Put the id runs sealed since the last look into the snapshot store, every `every` seconds
    (default `RUNS_STORED_EVERY`), until cancelled: a snapshot names its runs and its save stores
    those the store lacks, which after many new ids (a merge rewrites the largest run) could be
    tens of MB, too much for a clean stop's budget; stored as they seal, the stop's save stores
    only the filters and the state. A run merged away before a snapshot names it is deleted from
    the store with the others no snapshot names (`RUN_GRACE`)."""
    stored: set[str] = set()
    while True:
        await anyio.sleep(RUNS_STORED_EVERY if every is None else every)
        alive = [run for run in used_ids.current_store().alive() if not isinstance(run, _FILTERS)]
        new = {run.key: run for run in alive if run.key not in stored}
        if not new:
            continue
        try:
            await policy.store.store_runs(new)
        except Exception as exc:  # (the next look, or the snapshot's save, stores them)
            logger.debug("id runs not stored yet: %s: %s", type(exc).__name__, exc)
            continue
        stored = {run.key for run in alive}  # (those merged away forgotten: the set stays small)


def ids_in(piece: Sequence[Stored]) -> Iterator[str]:
    """The event ids of every message: its message id (`Nats-Msg-Id`), and the ids of a pack's
    events (a pack's message id is not theirs); a message stored without one (an adapter that
    keeps none) is read for them."""
    for stored in piece:
        if stored.msg_id:
            yield stored.msg_id
        if not stored.msg_id or is_pack(stored.data):
            with suppress(DecodeError):
                yield from (e.id for e in decode_all(stored.data, read_envelope))


async def run_folder(
    log: EventLog,
    folder: Folder,
    subjects: Sequence[str],
    *,
    durable: str,
    store: ProjectionStore | None = None,
    snapshots: SnapshotPolicy | None = None,
    warm: Warm | None = None,
    on_batch: OnBatch | None = None,
    max_batch: int = 2000,
    linger: float = 0.0,
    task_status: anyio.abc.TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Steps 1 and 2, forever (until cancelled). `on_batch(last_seq)` runs after each batch, once
    its decisions are in the log (the service's clock uses it). `linger`: see `EventLog.consume`."""
    warm = warm or Warm(folder, subjects)
    try:
        folded = await rebuild(log, folder, subjects, snapshots.store if snapshots is not None else None, warm,
                               snapshots)
    except BaseException:  # stopped in its start: what it loaded and folded frozen, handed back
        gc.unfreeze()
        metrics.stopped(folder.service, folder)
        raise
    if snapshots is not None:  # (kept from the position of the newest snapshot, the rebuild's own included)
        snapshots.started(folded, folder.now, restored=max(warm.restored_at, snapshots.saved))
    start = folded if store is None else min(folded, store.lowest_checkpoint)
    watched = metrics.status(folder.service)  # what the metrics read (plain numbers: no SDK call here)
    watched.folder, watched.folded, watched.snapshots = folder, folded, snapshots
    published = folded  # the last position whose decisions are all in the log
    idle = anyio.Event()  # set while no folded batch waits to be published
    idle.set()
    task_status.started(folded)
    # Folding and publishing overlap: a batch's decisions go out (in order, batch after batch)
    # while the next batch is folded. What follows a batch's publication (its projections, then
    # `on_batch`) still waits for its decisions to be acknowledged. Acknowledging a batch to the
    # consumer before its decisions are stored loses nothing: a restart folds the whole log and
    # publishes what it decides that the log lacks (`rebuild`).
    # (a batch's decisions, the batch, the position folded, when the batch arrived: `perf_counter`)
    send, receive = anyio.create_memory_object_stream[tuple[list[Envelope], Sequence[Stored], int, float]](
        OUTBOX_BATCHES)
    saves = Saves()  # the live snapshots' saves (their picklings closed when the service stops)

    async def handle(batch: Sequence[Stored]) -> None:
        nonlocal folded, idle
        arrived = perf_counter() if metrics.RECORDING else 0.0  # (decision latency: from here to stored)
        if snapshots is not None and snapshots.due(folded, folder.now):
            # A snapshot is taken where every decision made so far is in the log: the batches
            # folded before wait to be published first (a moment, once per `every` positions).
            await idle.wait()
            saves.start(tg, snapshots, log, folder.service, folded, folder.now, take_snapshot(folder, folded))
        with tracing.live(folder.service, len(batch)) as current, gc_paused():  # (its span: while a provider records)
            result = fold_batch(folder, batch, folded, SHARED.decode, SHARED.decode_pack)
            if current is not None:
                current.decisions = len(result.decisions)
        folded = result.last_seq
        watched.folded = folded
        watched.events += len(batch)
        if idle.is_set():
            idle = anyio.Event()
        await send.send((result.decisions, batch, folded, arrived))

    async def publish() -> None:
        nonlocal published
        async for first in receive:
            # Group commit: the batches folded meanwhile go out with this one: their decisions in
            # one append, their projections in one transaction, one `on_batch` (under a trickle of
            # events every message is a batch of its own, and each append, transaction and wake-up
            # has a fixed cost that would be paid per message).
            ready = [first]
            with suppress(anyio.WouldBlock):
                while True:
                    ready.append(receive.receive_nowait())
            decisions = [d for made, _, _, _ in ready for d in made]
            if decisions:
                with gc_paused():
                    await log.append(decisions)
                if metrics.RECORDING:
                    metrics.decisions_stored(folder.service, [(at, len(made)) for made, _, _, at in ready],
                                             perf_counter())
                    metrics.published(folder.service, decisions, folder)
            if store is not None:
                messages = ready[0][1] if len(ready) == 1 else [m for _, batch, _, _ in ready for m in batch]
                await anyio.to_thread.run_sync(store.apply, messages)
            if on_batch is not None:
                await on_batch(ready[-1][2])
            published = ready[-1][2]
            if published == folded:
                idle.set()

    try:
        with SHARED.user():
            async with anyio.create_task_group() as tg:
                tg.start_soon(publish)
                if snapshots is not None:
                    tg.start_soon(store_runs_as_they_seal, snapshots)
                await log.consume(durable, subjects, start, handle, max_batch=max_batch, linger=linger)
    finally:
        gc.unfreeze()
        saves.close()
        if snapshots is not None and published == folded and snapshots.unsaved(folded):
            # a clean stop: everything decided is in the log; keep the state for the next start
            with anyio.CancelScope(shield=True), anyio.move_on_after(10):
                await save_snapshot(snapshots, log, folder.service, folded, folder.now, take_snapshot(folder, folded))
        metrics.stopped(folder.service, folder)  # (its entry held the fold)
