"""How a service process runs: an anyio task group, cancelled gracefully on SIGINT / SIGTERM.

A service's entry point follows anyio's readiness pattern, so whoever starts it (`poolwise up`,
a test) knows when it is serving:

    async def serve(log: EventLog, *, task_status: TaskStatus[str] = anyio.TASK_STATUS_IGNORED) -> None:
        state = await rebuild(log)       # fold the log, open projections ...
        task_status.started("tree")      # ... ready: the starter's `await tg.start(serve, log)` returns
        await run_forever(state)         # until cancelled

    run_until_signalled(lambda: main(...))   # in the process's entry point

The first SIGINT/SIGTERM cancels everything (finally blocks and `async with` exits run); a second
one, while shutting down, is not intercepted any more and stops the process the hard way.
"""

from __future__ import annotations

import ctypes
import signal
import sys
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

import anyio
from anyio.abc import TaskGroup, TaskStatus

__all__ = ["TaskStatus", "give_back_memory", "pin_mmap_threshold", "run_until_signalled", "start_all",
           "until_signalled"]

SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM)


Main = Callable[[], Awaitable[Any]]


async def until_signalled(main: Main, signals: Sequence[signal.Signals] = SIGNALS) -> bool:
    """Run `main()` until it returns or a signal arrives; True if a signal stopped it."""
    stopped = False
    async with anyio.create_task_group() as tg:

        async def watch() -> None:
            nonlocal stopped
            with anyio.open_signal_receiver(*signals) as received:
                async for _ in received:
                    stopped = True
                    tg.cancel_scope.cancel()
                    return

        tg.start_soon(watch)
        await main()
        tg.cancel_scope.cancel()
    return stopped


def run_until_signalled(main: Main, signals: Sequence[signal.Signals] = SIGNALS) -> bool:
    """The process entry point: `anyio.run` of `until_signalled` (asyncio backend; nats-py needs it)."""
    return anyio.run(until_signalled, main, signals, backend="asyncio")


async def start_all(tg: TaskGroup, services: Sequence[Callable[..., Coroutine[Any, Any, Any]]]) -> list[Any]:
    """Start each `serve(*, task_status)` in `tg`, in order, each once the previous one is ready;
    returns what each passed to `task_status.started(...)`."""
    return [await tg.start(service) for service in services]


TRIM_EVERY = 30.0  # seconds between two `malloc_trim` calls of a service process
# glibc's `mallopt` parameter (malloc.h) and the value a service process pins it to: glibc's own
# starting value, which it would otherwise raise for good at the first free of a larger block.
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 128 * 1024


def _glibc() -> ctypes.CDLL | None:
    """The C library, where it is glibc with `malloc_trim` and `mallopt` (not on musl, macOS or
    Windows)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.malloc_trim, libc.mallopt  # noqa: B018 (both there, or neither is used)
    except (OSError, AttributeError):
        return None
    return libc


def _malloc_trim() -> Callable[[], object] | None:
    """glibc's `malloc_trim(0)`, where there is one."""
    libc = _glibc()
    if libc is None:
        return None
    trim: Callable[[int], object] = libc.malloc_trim
    return lambda: trim(0)


def pin_mmap_threshold(threshold: int = MMAP_THRESHOLD) -> bool:
    """Keep glibc's mmap threshold at `threshold` bytes for the life of the process (True if set).

    glibc allocates a block of at least the threshold with its own `mmap`, and unmaps it when it
    is freed: the memory goes back to the system at once. But the threshold is dynamic: freeing
    such a block raises it to that block's size (up to 32 MB), and the trim threshold to twice
    that, for good. A service's first snapshot (a state pickled, compressed, sent: buffers of
    several MB, made in a worker thread) raised it to their size, so every later buffer that size
    or smaller stayed in the heaps, and a worker thread's heap kept its free top (a trim does not
    shrink a thread's heap): measured after a 40k-gang history, 4.2 MB of admission's RSS in a
    thread's heap holding nothing, and the main heap 3-4 MB larger than without snapshots, which
    a run of 10k gangs (no snapshot made) never had. Setting the threshold turns that off."""
    libc = _glibc()
    return libc is not None and bool(libc.mallopt(M_MMAP_THRESHOLD, threshold))


async def give_back_memory(every: float = TRIM_EVERY) -> None:
    """Until cancelled, every `every` seconds: hand the C heap's free pages back to the system
    (`malloc_trim(0)`, on a worker thread: ctypes releases the GIL). A service's peaks (a burst of
    decodes, a fold, a snapshot) leave the heap with free pages glibc keeps, so a process that ran
    a long history held more than one restarted on the same state; a trim gives most of them back.
    Python's own arenas and DuckDB's allocator are not the C heap's: they keep theirs. First, the
    mmap threshold is pinned (`pin_mmap_threshold`): large buffers go back when freed."""
    pin_mmap_threshold()
    trim = _malloc_trim()
    if trim is None:
        return
    while True:
        await anyio.sleep(every)
        await anyio.to_thread.run_sync(trim)
