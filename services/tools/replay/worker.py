"""Admission's and preemption's fold in a child process of its own, fed the log's pieces through a
pipe (`reader.py`), while this process reads the log and verifies the rest.

Reading a JetStream log is Python work in the reading process (nats-py parses every message), as
is verifying: in one process they share one core (the GIL), in two they take one each. The fold
of admission's and preemption's states is most of a replay's work (about two thirds of the
verifier's CPU on the 100k-gang soak log), so it runs in the child (`Derivation`, derive.py:
`spawn`, nothing of the parent's event loop or threads is inherited), which decodes the messages
on their subjects, folds them and compares the records of its decisions where it reads them
(`unread.py`: a record with the very bytes of a decision it made is matched there, and only
counted back), and sends back each piece's other decisions (as `Made`: id, keys and the bytes the
service would write), which of its messages record decisions it did not take, and the counts. The
parent reads, decodes only the messages the tree folds, those that record decisions the child did
not take and those on no subject of admission's, folds the tree, judges the refusals and compares
(`Verifier(derived_elsewhere=True)`): the same report as one process makes (a log with findings is
verified again without the shared fold, reader.py: its report is always that one's).

The pieces go one ahead: the child folds piece k+1 while the parent verifies piece k with the
child's decisions of it (the verifier takes a piece's decisions before its records, as when it
folds them itself). The child holds its states and a piece, the pipe and the parent two more.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from multiprocessing.connection import Connection
from pathlib import Path
from sys import intern
from typing import Any

import anyio

from services.common import id_runs
from services.common.folding import gc_paused
from services.common.log import EventLog, Stored, read_in_chunks
from services.common.snapshots import Snapshot, pickled_naming_files, split_pickled, unpickled_from_files
from services.tools.replay.derive import Derivation, Derived
from services.tools.replay.progress import Progress
from services.tools.replay.verify import Elsewhere, Made, Report, Verifier
from services.tools.replay_process import ChildFailed, ChildProcess, started_child, stop_child
from services.tree.domain import used_ids

# A Stored as sent: plain values pickle fastest; the subject interned (a piece's few subjects are
# then pickled once each), and no message id (the folds do not read it)
Row = tuple[int, str, bytes]


def _rows(piece: Sequence[Stored]) -> list[Row]:
    return [(s.seq, intern(s.subject), s.data) for s in piece]


def child(inbox: Connection, outbox: Connection) -> None:
    """The child's whole life: ("start", tree, to_seq, snapshots, source, shared, runs), then
    ("piece", rows)..., then ("finish",). Answers each piece, and the finish, with its work
    (`answer`), or ("error", text). `runs`: the directory its id record's runs are kept in (None:
    in memory; the parent removes it, whatever becomes of the child). `source`: the parent's
    directory of run files, which the snapshots (pickled naming them: `_started`) are read from
    (None: they came whole)."""
    try:
        _, tree, to_seq, snapshots, source, shared, runs = inbox.recv()
        if runs is not None:
            id_runs.install(runs)
        if source is not None:  # (read from the parent's files, which stay the parent's: never in the heap)
            snapshots = unpickled_from_files(snapshots, id_runs.FileRuns(source, owned=False))
        derivation = Derivation(tree=tree, to_seq=to_seq, snapshots=snapshots, shared=shared)
        del snapshots
        while True:
            message = inbox.recv()
            if message[0] != "piece":
                if message[0] == "finish":
                    outbox.send(answer(Derived(derivation.rest(), frozenset(), 0, 0)))
                return
            with gc_paused():
                derived = derivation.feed_rows(message[1])
                sent = answer(derived)
            outbox.send(sent)
    except EOFError:  # the parent went away
        return
    except BaseException:
        outbox.send(("error", traceback.format_exc()))


def answer(derived: Derived) -> tuple[Any, ...]:
    """A piece's work as sent: ("made", made rows, recording, events, malformed, matched), each
    `Made` a plain tuple (pickled smaller)."""
    return ("made", [tuple(m) for m in derived.made], derived.recording, derived.events, derived.malformed,
            derived.matched)


def elsewhere(answered: tuple[Any, ...]) -> Elsewhere:
    """`answer` as the verifier takes it."""
    _, rows, recording, events, malformed, matched = answered
    return Elsewhere(list(map(Made._make, rows)), recording, events, malformed, matched)


def take(worker: ChildProcess) -> Elsewhere:
    """The child's next piece's work."""
    return elsewhere(worker.received())


def _started(tree: str | None, to_seq: int | None, snapshots: list[Snapshot], shared: bool,
             runs: Path | None) -> tuple[tuple[Any, ...], list[Any]]:
    """The child's "start": the snapshots' states with their runs as keys of the files of this
    process's store (`pickled_naming_files`) where it keeps them in files, so that the child
    reads them there (a plain pickle would send every run's arrays, and the child would hold the
    whole history's ids in its heap); and those runs, to be held while the child may read them
    (a run let go deletes its file)."""
    store = used_ids.current_store()
    if not isinstance(store, id_runs.FileRuns):
        return ("start", tree, to_seq, snapshots, None, shared, runs), []
    data = pickled_naming_files(snapshots)
    held = [store.local(key) for key in split_pickled(data)[0]]
    return ("start", tree, to_seq, data, store.directory, shared, runs), held


@contextmanager
def _one_failure() -> Iterator[None]:
    """A child that died breaks the sender and the taker at once: say it once (`ChildFailed`,
    its exit code), not as a group of broken pipes and streams."""
    try:
        yield
    except BaseExceptionGroup as group:
        failed, _ = group.split(ChildFailed)
        if failed is None:
            raise
        first: BaseException = failed
        while isinstance(first, BaseExceptionGroup):
            first = first.exceptions[0]
        raise first from None


async def verify_in_process(log: EventLog, make_verifier: Callable[[], Awaitable[Verifier]], end: int, chunk: int,
                            began: float, *, tree: str | None, to_seq: int | None, on_progress: Any,
                            snapshots: list[Snapshot], first: int = 1, shared: bool = False,
                            runs: Path | None = None, worker: ChildProcess | None = None) -> Report:
    """The verifier `make_verifier` makes (`derived_elsewhere`) fed the log from `first` through
    `end` (or until it is `done`), with admission's and preemption's decisions derived in a child
    process, from `snapshots` (of admission and preemption: emptied once sent, the child holds
    them), its id record's runs in files in `runs` (None: in memory). `worker`: the child, started
    already (`started_child`; stopped here whatever happens), or None to start one now. The
    verifier is made while the first pieces are read and folded by the child (making it reads the
    refusals: the server scans the whole log for their subjects, ~0.1-0.4 s on the 100k-gang log,
    which the child need not wait for: it folds no refusal of a command)."""
    stop = end if to_seq is None else min(to_seq, end)  # the progress' total
    if worker is None:
        worker = await started_child()
    held: list[Any] = []  # the runs the child may be reading from this process's files
    try:
        start, held = _started(tree, to_seq, list(snapshots), shared, runs)
        await anyio.to_thread.run_sync(worker.send, start)
        del start
        snapshots.clear()
        # Three tasks: the reader; the sender, piece after piece to the child (a pipe holds less
        # than a piece: sending and taking the child's answers go on in threads of their own, or
        # each end would wait for the other); and here, the verifier, which takes the child's
        # work on a piece and then feeds the piece (the child folds the next piece meanwhile).
        # (pieces held ahead: the verifier blocks this event loop while it feeds a piece, so the
        # reader gets ahead only between pieces; with one held, the child waited ~0.9 s of its
        # ~20 for pieces on the 100k-gang log at load 3, ~0.55 s with these; each piece of
        # `chunk` messages is ~2-3 MB here)
        read_s, read_r = anyio.create_memory_object_stream[list[Stored]](3)
        sent_s, sent_r = anyio.create_memory_object_stream[list[Stored]](2)

        async def read() -> None:
            async with read_s:
                async for piece in read_in_chunks(log, first, (), chunk, end_seq=end):
                    await read_s.send(piece)

        async def send() -> None:
            async with read_r, sent_s:
                async for piece in read_r:
                    # (abandoned when the verifier is done early: the child is killed then)
                    await anyio.to_thread.run_sync(worker.send, ("piece", _rows(piece)), abandon_on_cancel=True)
                    await sent_s.send(piece)

        with sent_r, _one_failure():
            async with anyio.create_task_group() as tg:
                tg.start_soon(read)
                tg.start_soon(send)
                verifier = await make_verifier()
                async for piece in sent_r:
                    elsewhere = await anyio.to_thread.run_sync(take, worker)
                    verifier.feed(piece, elsewhere)
                    if on_progress is not None:
                        report = verifier.report
                        on_progress(Progress(min(verifier.position, stop), stop, report.messages, report.events,
                                             time.perf_counter() - began))
                    if verifier.done:  # with `to_seq`: nothing further can change the report
                        break
                tg.cancel_scope.cancel()  # (before the stream closes: the sender is cancelled, not broken)
        if not verifier.done:  # (the decisions whose record the child did not read: compared here)
            await anyio.to_thread.run_sync(worker.send, ("finish",))
            for made in (await anyio.to_thread.run_sync(take, worker)).made:
                verifier.add_made(made)
        report = verifier.finish()
        if on_progress is not None:
            on_progress(Progress(min(report.read_to, stop), stop, report.messages, report.events,
                                 time.perf_counter() - began))
        return report
    finally:
        await stop_child(worker)
        held.clear()  # (the child is gone: its runs' files may go)
