"""The thin shell of `poolwise replay`: read the log a piece at a time and feed `Verifier` (pure).

Reads, with the log's last sequence `end` fixed when it starts (the log may grow meanwhile; what
comes after `end` is not looked at):

1. the recorded refusals of commands, through `to_seq` (or `end`): only the `poolwise.rejected.*`
   subjects, filtered by the server (the tree judges a refusal on its state at the refusal's
   basis, before the refusal lands; `Verifier` must know them before it folds past their basis);
2. the whole log in pieces of `chunk` positions (`read_in_chunks`), the next pieces read while the
   verifier works on one, until `end`, or until the verifier is `done` (with `to_seq`: every
   decision re-derived through it found). Memory: three pieces, and what the verifier holds (see
   `services.replay.verify`).

Where the verifier runs: reading a JetStream log is Python work too (the client parses every
message), so on a log of `PROCESS_FROM` positions or more the verifier runs in a child process of
its own (`services/replay/worker.py`), fed the pieces through a pipe, and the reading and the
verifying take a core each; below that, in a worker thread (a process costs a second to start).

`on_progress(Progress)` is called after each piece (from the event loop).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from services.common.log import EventLog, Stored, read_in_chunks
from services.replay.verify import REFUSAL_SUBJECTS, Report, Verifier, command_refusals

if TYPE_CHECKING:
    from services.common.jetstream import JetStreamLog

CHUNK = 10_000  # positions per read
PROCESS_FROM = 50_000  # positions of log from which the verifier runs in a process of its own


@dataclass(frozen=True, slots=True)
class Progress:
    position: int  # the last position verified
    end: int  # the last position to fold: the stream's last sequence when the replay started, or `to_seq`
    messages: int
    events: int
    elapsed: float  # seconds since the replay started

    @property
    def events_per_second(self) -> float:
        return self.events / self.elapsed if self.elapsed > 0 else 0.0


OnProgress = Callable[[Progress], None]


async def read_log(log: EventLog) -> list[Stored]:
    """Every message of the log, in order (one snapshot: up to the last sequence when called)."""
    return await log.read(1)


async def verify_log(log: EventLog, *, tree: str | None = None, to_seq: int | None = None, chunk: int | None = None,
                     on_progress: OnProgress | None = None, process_from: int | None = None) -> Report:
    began = time.perf_counter()
    chunk = chunk or CHUNK
    end = await log.last_seq()
    stop = end if to_seq is None else min(to_seq, end)
    refusals: list[Stored] = []  # the messages that hold refusals of commands
    async for piece in read_in_chunks(log, 1, REFUSAL_SUBJECTS, max(chunk, 100_000), end_seq=stop):
        refusals.extend(stored for stored in piece if command_refusals([stored]))
    if on_progress is not None:
        on_progress(Progress(0, stop, 0, 0, time.perf_counter() - began))
    if stop >= (PROCESS_FROM if process_from is None else process_from):
        from services.replay.worker import verify_in_process

        return await verify_in_process(log, refusals, end, chunk, began, tree=tree, to_seq=to_seq,
                                       on_progress=on_progress)
    verifier = Verifier(command_refusals(refusals), tree=tree, to_seq=to_seq)
    send, receive = anyio.create_memory_object_stream[list[Stored]](1)  # one piece read ahead

    async def read() -> None:
        async with send:
            async for piece in read_in_chunks(log, 1, (), chunk, end_seq=end):
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


class NoLog(Exception):
    """The server has no poolwise stream to read."""


async def verify_jetstream(log: JetStreamLog, *, tree: str | None = None, to_seq: int | None = None,
                           chunk: int | None = None, on_progress: OnProgress | None = None,
                           process_from: int | None = None) -> Report:
    """Verify the log of `log`'s stream; `NoLog` when the server does not have it."""
    from nats.js.errors import NotFoundError

    try:
        await log.last_seq()
    except NotFoundError:
        raise NoLog(f"no stream {log.stream} on this server: nothing was ever recorded there") from None
    return await verify_log(log, tree=tree, to_seq=to_seq, chunk=chunk, on_progress=on_progress,
                            process_from=process_from)


async def verify_url(url: str, *, tree: str | None = None, to_seq: int | None = None, chunk: int | None = None,
                     on_progress: OnProgress | None = None, process_from: int | None = None) -> Report:
    """Verify the log of the poolwise stream on the NATS server at `url`."""
    from services.common.jetstream import JetStreamLog

    log = await JetStreamLog.connect(url, name="poolwise-replay")
    try:
        return await verify_jetstream(log, tree=tree, to_seq=to_seq, chunk=chunk, on_progress=on_progress,
                                      process_from=process_from)
    finally:
        with anyio.CancelScope(shield=True):
            await log.close()


async def verify_data_dir(data_dir: Path, *, tree: str | None = None, to_seq: int | None = None,
                          chunk: int | None = None, on_progress: OnProgress | None = None,
                           process_from: int | None = None) -> Report:
    """Verify the log kept in `data_dir` by `poolwise up`, while no server runs on it: start a private
    one on its store for the time of the read."""
    from services.common.natsserver import EmbeddedNats

    async with EmbeddedNats(data_dir) as server:
        return await verify_url(server.url, tree=tree, to_seq=to_seq, chunk=chunk, on_progress=on_progress,
                                process_from=process_from)
