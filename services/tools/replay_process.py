"""The replay's derivation process (`services/tools/replay/worker.py` is what it runs), as a
process handle that can be made before the replay's own modules are imported.

Why a module of its own, outside `services.tools.replay`: importing that package imports every
service's fold (~0.4 s of CPU), and so does the spawned child (its interpreter starts empty). The
CLI starts the child first (`started_child`, as soon as it knows the log is long enough to want
one: `PROCESS_FROM`), then imports the replay, so the two imports run at once on two cores instead
of one after the other. Only `multiprocessing` and `anyio` are imported here; the child's target
(`_run`) imports the worker in the child.
"""

from __future__ import annotations

import importlib
import multiprocessing
from multiprocessing.connection import Connection
from typing import Any

import anyio

PROCESS_FROM = 50_000  # positions of log from which the verifier runs in a process of its own


def wants_child(first: int, stop: int, process_from: int | None) -> bool:
    """Whether a replay of the positions `first` through `stop` folds in a child process."""
    return stop - first + 1 >= (PROCESS_FROM if process_from is None else process_from)


REPLAY_CHILD = "services.tools.replay.worker:child"  # what the child runs: named, imported in the child


def _run(entry: str, inbox: Connection, outbox: Connection) -> None:
    """The child's target: the function `entry` names (module:name), imported here, in the child
    (the worker imports this module: named, not imported, the two do not import each other)."""
    module, name = entry.split(":")
    getattr(importlib.import_module(module), name)(inbox, outbox)


class ChildFailed(Exception):
    """The derivation's process failed (its traceback is the message)."""


class ChildProcess:
    """The derivation's process and its two pipes (`worker.child`'s inbox and outbox)."""

    def __init__(self) -> None:
        context = multiprocessing.get_context("spawn")  # (nothing of the parent's event loop or threads)
        self.inbox_r, self.inbox_w = context.Pipe(duplex=False)
        self.outbox_r, self.outbox_w = context.Pipe(duplex=False)
        self.process = context.Process(target=_run, args=(REPLAY_CHILD, self.inbox_r, self.outbox_w),
                                       name="poolwise-replay", daemon=True)

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
        try:
            self.inbox_w.send(message)
        except OSError:  # (a broken pipe: the child is gone)
            raise self.ended() from None

    def ended(self) -> ChildFailed:
        """What to say when the child is gone (its exit code once it is reaped)."""
        self.process.join(timeout=1.0)
        return ChildFailed(f"the derivation's process ended (exit code {self.process.exitcode})")

    def received(self) -> tuple[Any, ...]:
        """The child's next message: ("error", traceback) raised as `ChildFailed`."""
        try:
            message: tuple[Any, ...] = self.outbox_r.recv()
        except (EOFError, OSError):
            raise self.ended() from None
        if message[0] == "error":
            raise ChildFailed(message[1])
        return message


async def started_child() -> ChildProcess:
    """A child process started (its interpreter imports the folds meanwhile, ~0.5 s of CPU), to be
    given to the replay (`verify_log(child=...)`, which stops it whether it uses it or not), or
    stopped with `stop_child`."""
    worker = ChildProcess()
    await anyio.to_thread.run_sync(worker.start)
    return worker


async def stop_child(worker: ChildProcess) -> None:
    with anyio.CancelScope(shield=True):
        await anyio.to_thread.run_sync(worker.stop)
