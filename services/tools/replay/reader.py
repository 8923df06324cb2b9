"""The thin shell of `poolwise replay`: read the log a piece at a time and feed `Verifier` (pure).

Reads, with the log's last sequence `end` fixed when it starts (the log may grow meanwhile; what
comes after `end` is not looked at):

1. the recorded refusals of commands, through `to_seq` (or `end`): only the `poolwise.rejected.*`
   subjects, filtered by the server (the tree judges a refusal on its state at the refusal's
   basis, before the refusal lands; `Verifier` must know them before it folds past their basis);
2. the whole log in pieces of `chunk` positions (`read_in_chunks`), the next pieces read while the
   verifier works on one, until `end`, or until the verifier is `done` (with `to_seq`: every
   decision re-derived through it found). Memory: three pieces, and what the verifier holds (see
   `services.tools.replay.verify`).

Where the work runs: reading a JetStream log is Python work too (the client parses every
message), so on a log of `PROCESS_FROM` positions or more admission's and preemption's fold (most
of the work) runs in a child process of its own (`services/tools/replay/worker.py`), fed the pieces
through a pipe, while this process reads, folds the tree and compares; the two take a core each.
Below that, the verifier does it all in a worker thread (a process costs a second to start).

`--from SEQ` (`from_seq`, with a `SnapshotStore`): before reading, the newest usable snapshot of
each of admission, preemption and the tree at or before SEQ is loaded (`load_newest`: made by this
code, whole, anchored to this log; the others are passed over and the report says why); the
verifier starts each fold from its snapshot, and the log is read from the earliest of them on. A
service with no usable snapshot folds from position 1 (and so the log is read from 1): the report
names each start (`Report.starts`, 0: from the start).

`on_progress(Progress)` is called after each piece (from the event loop).

Memory: the id record's runs (`UsedIds`: the tree's seen gangs, admission's forgotten tasks; the
one part of a fold that grows with the whole history) are kept in files of a temporary directory,
made for the replay and removed when it ends (`runs_on_disk`), as the services keep theirs in
their data dir (`services.common.id_runs`), not in the heap: the child process keeps its own in a
subdirectory of it. A process whose runs are in files already (a service's, e.g. the demo's
replay in the services' process) keeps them in its store. Only the replay's own records (made or
restored in its task: `used_ids.storing_in`) use that store: the process's store is left as it
is, for its other records and for replays that overlap this one.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from services.common.folding import anchored_on
from services.common.log import EventLog, Stored, read_in_chunks
from services.common.snapshots import ObjectStoreSnapshots, Snapshot, SnapshotStore, load_newest
from services.tools.replay.progress import OnProgress, Progress
from services.tools.replay.verify import REFUSAL_SUBJECTS, Report, Verifier, command_refusals
from services.tools.replay_process import ChildProcess, stop_child, wants_child
from services.tree.domain import used_ids

ADMISSION, PREEMPTION, TREE = "admission", "preemption", "tree"  # (the services' names, as their snapshots have them)

if TYPE_CHECKING:
    from services.common.jetstream import JetStreamLog

CHUNK = 10_000  # positions per read


async def read_log(log: EventLog) -> list[Stored]:
    """Every message of the log, in order (one snapshot: up to the last sequence when called)."""
    return await log.read(1)


SERVICES = (ADMISSION, PREEMPTION, TREE)  # the folds a replay runs, each with its own snapshots


async def snapshots_at(log: EventLog, store: SnapshotStore | None, from_seq: int) -> tuple[list[Snapshot], list[str]]:
    """The newest usable snapshot of each service at or before `from_seq` (as a start loads one;
    admission's fold without explain's notes), and why others were passed over."""
    if store is None:
        return [], ["no snapshots on this server"]


    found: list[Snapshot] = []
    passed_over: list[str] = []
    for service in SERVICES:
        # admission's live snapshot is (its fold, explain's notes), stored part by part: a replay
        # folds, it never explains, so only the fold (part 0) is loaded (a state stored whole is
        # its own part 0)
        part = 0 if service == ADMISSION else None
        # frozen (kept out of the collector's passes, ~1 s of CPU a million objects otherwise): a
        # replay is one-shot, its states alive until it ends
        snapshot, skipped = await load_newest(store, service, at_most=from_seq, anchored=anchored_on(log), part=part,
                                              freeze=True)
        passed_over += skipped
        if snapshot is not None:
            found.append(snapshot)
    return found, passed_over


@contextmanager
def runs_on_disk() -> Iterator[Path | None]:
    """A temporary directory for the id record's runs, removed at the end (None where runs cannot
    be files: a big-endian machine, `id_runs.install`): the replay's in its `id-runs`
    (`replay_runs`), the child's in its `child` (`worker.child`). No store is changed here."""
    if sys.byteorder != "little":
        yield None
        return
    from services.common import id_runs

    with tempfile.TemporaryDirectory(prefix="poolwise-replay-") as directory:
        (Path(directory) / id_runs.DIRECTORY).mkdir()
        yield Path(directory)


def replay_runs(directory: Path | None) -> used_ids.RunStore:
    """The store the replay's records keep their runs in: this process's if it keeps them in
    files already (a service's), else the files of `directory`'s `id-runs` (None: this process's,
    in memory)."""
    from services.common import id_runs

    current = used_ids.current_store()
    if directory is None or isinstance(current, id_runs.FileRuns):
        return current
    id_runs.more_descriptors()  # (a run held keeps its file open)
    return id_runs.FileRuns(directory / id_runs.DIRECTORY)


async def verify_log(log: EventLog, *, tree: str | None = None, to_seq: int | None = None, chunk: int | None = None,
                     on_progress: OnProgress | None = None, process_from: int | None = None,
                     from_seq: int | None = None, snapshots: SnapshotStore | None = None,
                     child: ChildProcess | None = None) -> Report:
    """Verify `log`: with admission's state folded once for both services where the verifier can
    (`Verifier(shared=True)`), and when that finds anything, once more with each service's own
    fold (the log read again; no progress reported meanwhile): the report of a log with findings
    is always the latter's. The id record's runs in files meanwhile (`runs_on_disk`), those of the
    records made or restored here (in this task: `used_ids.storing_in`). `child`: a derivation
    process started already (`replay_process.started_child`) for the first pass, if it wants one;
    stopped here in any case."""
    try:
        with runs_on_disk() as runs, used_ids.storing_in(replay_runs(runs)):
            report = await _verify_log(log, tree=tree, to_seq=to_seq, chunk=chunk, on_progress=on_progress,
                                       process_from=process_from, from_seq=from_seq, snapshots=snapshots,
                                       shared=True, runs=runs, child=child)
            if not report.ok and report.shared:
                report = await _verify_log(log, tree=tree, to_seq=to_seq, chunk=chunk, on_progress=None,
                                           process_from=process_from, from_seq=from_seq, snapshots=snapshots,
                                           shared=False, runs=runs)
    finally:
        if child is not None:  # (stopped already where the first pass took it: stopping is idempotent)
            await stop_child(child)
    return report


async def _verify_log(log: EventLog, *, tree: str | None, to_seq: int | None, chunk: int | None,
                      on_progress: OnProgress | None, process_from: int | None, from_seq: int | None,
                      snapshots: SnapshotStore | None, shared: bool, runs: Path | None = None,
                      child: ChildProcess | None = None) -> Report:
    began = time.perf_counter()
    chunk = chunk or CHUNK
    end = await log.last_seq()
    stop = end if to_seq is None else min(to_seq, end)
    starts: list[Snapshot] = []
    passed_over: list[str] = []
    if from_seq is not None:
        starts, passed_over = await snapshots_at(log, snapshots, from_seq)
    # the log is read after the earliest start (a service without a snapshot: from 1)
    first = 1 + (min(s.seq for s in starts) if len(starts) == len(SERVICES) else 0)
    tree_start = next((s.seq for s in starts if s.service == TREE), 0)
    if wants_child(first, stop, process_from):
        from services.tools.replay import worker
        from services.tools.replay.derive import FOLDED

        folded = [s for s in starts if s.service in FOLDED]  # (the child's to hold: emptied once sent)

        async def made_verifier() -> Verifier:  # (made while the child folds the first pieces)
            nonlocal starts
            given, starts = starts, []  # (the snapshots' states not held here once it has what it needs)
            return await _verifier(log, given, passed_over, tree_start, stop, chunk, tree=tree, to_seq=to_seq,
                                   from_seq=from_seq, shared=shared, elsewhere=True, on_progress=on_progress,
                                   began=began, first=first)

        # (the child started now if not given: its interpreter's start and imports, ~0.5 s, go on
        # while this process reads the first pieces)
        return await worker.verify_in_process(log, made_verifier, end, chunk, began, tree=tree, to_seq=to_seq,
                                              on_progress=on_progress, snapshots=folded, first=first, shared=shared,
                                              runs=None if runs is None else runs / "child", worker=child)
    if child is not None:  # (not wanted after all: its memory not held while this process verifies)
        await stop_child(child)
    verifier = await _verifier(log, starts, passed_over, tree_start, stop, chunk, tree=tree, to_seq=to_seq,
                               from_seq=from_seq, shared=shared, elsewhere=False, on_progress=on_progress,
                               began=began, first=first)
    del starts  # (the folds hold what they need of them)
    send, receive = anyio.create_memory_object_stream[list[Stored]](1)  # one piece read ahead

    async def read() -> None:
        async with send:
            async for piece in read_in_chunks(log, first, (), chunk, end_seq=end):
                await send.send(piece)

    with receive:
        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            async for piece in receive:
                await anyio.to_thread.run_sync(verifier.feed, piece)
                if on_progress is not None:
                    report = verifier.report
                    on_progress(Progress(min(piece[-1].seq, stop), stop, report.messages, report.events,
                                         time.perf_counter() - began))
                if verifier.done:  # with `to_seq`: nothing further can change the report
                    break
            tg.cancel_scope.cancel()
    return await anyio.to_thread.run_sync(verifier.finish)


async def _verifier(log: EventLog, starts: list[Snapshot], passed_over: list[str], tree_start: int, stop: int,
                    chunk: int, *, tree: str | None, to_seq: int | None, from_seq: int | None, shared: bool,
                    elsewhere: bool, on_progress: OnProgress | None, began: float, first: int) -> Verifier:
    """The verifier, given the log's refusals of commands (read first, from their subjects)."""
    refusals: list[Stored] = []  # the messages that hold refusals of commands
    async for piece in read_in_chunks(log, tree_start + 1, REFUSAL_SUBJECTS, max(chunk, 100_000), end_seq=stop):
        refusals.extend(stored for stored in piece if command_refusals([stored]))
    if on_progress is not None:
        on_progress(Progress(first - 1, stop, 0, 0, time.perf_counter() - began))
    verifier = Verifier(command_refusals(refusals), tree=tree, to_seq=to_seq, snapshots=starts, from_seq=from_seq,
                        shared=shared, derived_elsewhere=elsewhere)
    verifier.report.passed_over = passed_over
    return verifier


class NoLog(Exception):
    """The server has no poolwise stream to read."""


async def _store_of(log: JetStreamLog) -> SnapshotStore | None:
    from nats.js import JetStreamContext
    from nats.js.errors import BucketNotFoundError, NotFoundError

    store = ObjectStoreSnapshots(JetStreamContext(log.nc), log.stream, read_only=True)  # a replay makes no bucket
    try:
        await store.opened()
    except (BucketNotFoundError, NotFoundError):
        return None
    return store


async def verify_jetstream(log: JetStreamLog, *, tree: str | None = None, to_seq: int | None = None,
                           chunk: int | None = None, on_progress: OnProgress | None = None,
                           process_from: int | None = None, from_seq: int | None = None,
                           child: ChildProcess | None = None) -> Report:
    """Verify the log of `log`'s stream; `NoLog` when the server does not have it. With `from_seq`,
    from the snapshots in the server's object store (`BUCKET`). `child`: as `verify_log` takes it
    (the caller stops it if this raises before)."""
    from nats.js.errors import NotFoundError

    try:
        await log.last_seq()
    except NotFoundError:
        raise NoLog(f"no stream {log.stream} on this server: nothing was ever recorded there") from None
    store = await _store_of(log) if from_seq is not None else None
    return await verify_log(log, tree=tree, to_seq=to_seq, chunk=chunk, on_progress=on_progress,
                            process_from=process_from, from_seq=from_seq, snapshots=store, child=child)


async def verify_url(url: str, *, tree: str | None = None, to_seq: int | None = None, chunk: int | None = None,
                     on_progress: OnProgress | None = None, process_from: int | None = None,
                     from_seq: int | None = None) -> Report:
    """Verify the log of the poolwise stream on the NATS server at `url`."""
    from services.common.jetstream import JetStreamLog

    log = await JetStreamLog.connect(url, name="poolwise-replay")
    try:
        return await verify_jetstream(log, tree=tree, to_seq=to_seq, chunk=chunk, on_progress=on_progress,
                                      process_from=process_from, from_seq=from_seq)
    finally:
        with anyio.CancelScope(shield=True):
            await log.close()
