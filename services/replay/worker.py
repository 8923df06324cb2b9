"""The verifier in a child process of its own, fed the log's pieces through a pipe (`reader.py`).

Reading a JetStream log is Python work in the reading process (nats-py parses every message), as
is verifying: in one process they share one core (the GIL), in two they take one each. The child
(`spawn`: nothing of the parent's event loop or threads is inherited) runs the same `Verifier`;
the parent sends it the command refusals, then each piece as it is read, and takes back after
each piece its position (progress; `done` with `to_seq`), and at the end the `Report`. A piece is
sent from a worker thread, so the next ones are read meanwhile; the child holds one piece at a
time, the pipe and the parent at most two more.
"""

from __future__ import annotations

import multiprocessing
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import anyio

from services.common.log import EventLog, Stored, read_in_chunks
from services.common.snapshots import Snapshot
from services.replay.progress import Progress
from services.replay.verify import Report, Verifier, command_refusals

Row = tuple[int, str, bytes, str | None]  # a Stored as sent (plain values pickle fastest)


@dataclass(frozen=True, slots=True)
class Status:
    position: int = 0
    messages: int = 0
    events: int = 0
    done: bool = False


def _rows(piece: Sequence[Stored]) -> list[Row]:
    return [(s.seq, s.subject, s.data, s.msg_id) for s in piece]


def _stored(rows: list[Row]) -> list[Stored]:
    return [Stored(*row) for row in rows]


def child(inbox: Connection, outbox: Connection) -> None:
    """The child's whole life: ("start", refusals, tree, to_seq, snapshots, from_seq, shared), then ("piece",
    rows)..., then ("finish",). Answers ("fed", Status) per piece, ("report", Report) at the end, or
    ("error", text)."""
    try:
        _, refusals, tree, to_seq, snapshots, from_seq, shared = inbox.recv()
        verifier = Verifier(command_refusals(_stored(refusals)), tree=tree, to_seq=to_seq, snapshots=snapshots,
                            from_seq=from_seq, shared=shared)
        del snapshots
        while True:
            message = inbox.recv()
            if message[0] == "piece":
                verifier.feed(_stored(message[1]))
                report = verifier.report
                outbox.send(("fed", Status(verifier.position, report.messages, report.events, verifier.done)))
            else:
                outbox.send(("report", verifier.finish()))
                return
    except EOFError:  # the parent went away
        return
    except BaseException:
        outbox.send(("error", traceback.format_exc()))


class ChildFailed(Exception):
    """The verifier's process failed (its traceback is the message)."""


class _Child:
    def __init__(self) -> None:
        context = multiprocessing.get_context("spawn")
        self.inbox_r, self.inbox_w = context.Pipe(duplex=False)
        self.outbox_r, self.outbox_w = context.Pipe(duplex=False)
        self.process = context.Process(target=child, args=(self.inbox_r, self.outbox_w), name="poolwise-replay",
                                       daemon=True)
        self.status = Status()

    def start(self) -> None:
        self.process.start()
        self.inbox_r.close()
        self.outbox_w.close()

    def stop(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join()
        for end in (self.inbox_w, self.outbox_r):
            end.close()

    def send(self, message: Any) -> None:
        self.inbox_w.send(message)

    def take(self, block: bool) -> Any:
        """The child's next answer (None when not `block` and there is none yet)."""
        while block or self.outbox_r.poll():
            try:
                kind, *rest = self.outbox_r.recv()
            except EOFError:
                raise ChildFailed(f"the verifier's process ended (exit code {self.process.exitcode})") from None
            if kind == "fed":
                self.status = rest[0]
                continue
            if kind == "error":
                raise ChildFailed(rest[0])
            return rest[0]
        return None


async def verify_in_process(log: EventLog, refusals: Sequence[Stored], end: int, chunk: int, began: float, *,
                            tree: str | None, to_seq: int | None, on_progress: Any,
                            snapshots: Sequence[Snapshot] = (), from_seq: int | None = None, first: int = 1,
                            shared: bool = False) -> Report:
    stop = end if to_seq is None else min(to_seq, end)  # the progress' total
    worker = _Child()
    await anyio.to_thread.run_sync(worker.start)
    try:
        await anyio.to_thread.run_sync(worker.send, ("start", _rows(refusals), tree, to_seq, list(snapshots), from_seq,
                                                       shared))
        async for piece in read_in_chunks(log, first, (), chunk, end_seq=end):
            await anyio.to_thread.run_sync(worker.send, ("piece", _rows(piece)))  # waits for the child to take it
            worker.take(block=False)
            status = worker.status
            if on_progress is not None:
                on_progress(Progress(min(status.position, stop), stop, status.messages, status.events,
                                     time.perf_counter() - began))
            if status.done:
                break
        await anyio.to_thread.run_sync(worker.send, ("finish",))
        report: Report = await anyio.to_thread.run_sync(worker.take, True)
        if on_progress is not None:
            on_progress(Progress(min(report.read_to, stop), stop, report.messages, report.events,
                                 time.perf_counter() - began))
        return report
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(worker.stop)
