"""Child processes kept running: what `poolwise up` uses to run each service in a process of its own.

`Supervisor(children, ...)` starts one OS process per `Child` and keeps it running:

- **Ready** (anyio's readiness pattern: `await tg.start(supervisor.run)` returns the children's
  pids) once every child is *up*: a line of its stderr satisfied `is_up(name, line)` since it was
  last started. Every stderr line of a child goes to `on_line(name, line)`; what the supervisor
  itself has to say (started, exited, restarting) goes to `echo(text)`, one line each.
- **Restart**: a child that exits by itself is started again after a delay that doubles from
  `Restarts.first` up to `Restarts.most`, back to `first` once a run lasted `Restarts.reset_after`
  seconds. A child that exits before it was up `Restarts.start_failures` times in a row makes
  the supervisor give up: every other child is stopped and `run` raises `GaveUp`.
- **Stop**: when `run` is cancelled, every child gets SIGTERM at once, up to `Restarts.stop_timeout`
  seconds to exit (its stderr still forwarded meanwhile), then SIGKILL.
- **Dying with the parent**: each child starts in a session of its own (a terminal's Ctrl-C
  reaches the supervisor only, which stops the children in order), with `PARENT_ENV` naming the
  supervising process. A child calls `die_with_parent()` first thing: on Linux it asks the kernel
  for SIGTERM when its parent dies (`prctl(PR_SET_PDEATHSIG)`), so a supervisor killed with
  SIGKILL leaves no child behind, and it exits at once if the parent has gone already. (The
  kernel sends that signal when the *thread* that forked the child ends: children are forked by
  the event loop's thread, which lives as long as the process.)
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import anyio
from anyio import CancelScope
from anyio.abc import ByteReceiveStream, Process, TaskStatus

__all__ = ["PARENT_ENV", "Child", "GaveUp", "Restarts", "Supervisor", "describe_exit", "die_with_parent"]

PARENT_ENV = "POOLWISE_PARENT_PID"  # set for a supervised child: the pid of the process it must die with
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
MAX_LINE = 64 * 1024  # bytes of a stderr line without a newline before it is passed on as it is


@dataclass(frozen=True, slots=True)
class Child:
    """A process to keep running: `argv` with `env` (None: the supervisor's environment)."""

    name: str
    argv: tuple[str, ...]
    env: Mapping[str, str] | None = None


@dataclass(frozen=True, slots=True)
class Restarts:
    """The restart and stop policy (seconds)."""

    first: float = 0.5  # delay before the first restart
    factor: float = 2.0  # each further restart waits this much longer ...
    most: float = 10.0  # ... up to this
    reset_after: float = 60.0  # a run this long resets the delay to `first`
    start_failures: int = 5  # exits before being up, in a row, after which the supervisor gives up
    stop_timeout: float = 10.0  # between SIGTERM and SIGKILL when stopping a child


class GaveUp(Exception):
    """A child could not be started (or kept failing before it was up): the supervisor stopped."""


def describe_exit(code: int) -> str:
    """`exit code 2`, `killed by SIGKILL`."""
    if code >= 0:
        return f"exit code {code}"
    try:
        return f"killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"killed by signal {-code}"


def die_with_parent(sig: signal.Signals = signal.SIGTERM) -> bool:
    """In a child started by a `Supervisor` (`PARENT_ENV` is set): have the kernel send `sig` when
    the parent dies (Linux), and exit at once if it has died already. The variable is removed, so
    the child's own children do not inherit it. Returns whether this process is supervised."""
    value = os.environ.pop(PARENT_ENV, None)
    if not value:
        return False
    try:
        parent = int(value)
    except ValueError:
        return False
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    if os.getppid() != parent:  # it died before the kernel was asked: nobody would stop this one
        raise SystemExit(f"poolwise: the supervising process {parent} has gone; exiting")
    return True


class LineReader:
    """A byte stream as text lines (a line longer than `MAX_LINE` comes in pieces)."""

    def __init__(self, stream: ByteReceiveStream) -> None:
        self._stream = stream
        self._buffer = bytearray()
        self._ended = False

    async def receive(self) -> str | None:
        """The next line, without its line ending; None at the end of the stream."""
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                return self._take(end, end + 1)
            if len(self._buffer) >= MAX_LINE or (self._ended and self._buffer):
                size = min(len(self._buffer), MAX_LINE)
                return self._take(size, size)
            if self._ended:
                return None
            try:
                self._buffer += await self._stream.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                self._ended = True

    def _take(self, size: int, consumed: int) -> str:
        line = bytes(self._buffer[:size])
        del self._buffer[:consumed]
        return line.decode("utf-8", errors="replace").rstrip("\r")


@dataclass(slots=True)
class _Run:
    """One run of a child: whether it was up, its last non-blank stderr line, its exit code."""

    up: bool = False
    last: str = ""
    code: int = 0


@dataclass(slots=True)
class _State:
    pids: dict[str, int] = field(default_factory=dict)
    up: set[str] = field(default_factory=set)
    all_up: anyio.Event = field(default_factory=anyio.Event)
    gave_up: GaveUp | None = None


class Supervisor:
    """Keeps `children` running (see the module doc)."""

    def __init__(self, children: Sequence[Child], *, is_up: Callable[[str, str], bool],
                 on_line: Callable[[str, str], None], echo: Callable[[str], None],
                 restarts: Restarts | None = None) -> None:
        names = [child.name for child in children]
        if len(set(names)) != len(names):
            raise ValueError(f"children need distinct names: {names}")
        self._children = tuple(children)
        self._is_up = is_up
        self._on_line = on_line
        self._echo = echo
        self.restarts = restarts or Restarts()
        self._state = _State()

    @property
    def pids(self) -> dict[str, int]:
        """The pid of each child running now."""
        return dict(self._state.pids)

    async def run(self, *, task_status: TaskStatus[dict[str, int]] = anyio.TASK_STATUS_IGNORED) -> None:
        """Keep every child running until cancelled (then stop them all); ready with their pids
        once every child is up. Raises `GaveUp` (after stopping the others) if a child cannot start."""
        self._state = _State()
        async with anyio.create_task_group() as tg:
            for child in self._children:
                tg.start_soon(self._keep, child, tg.cancel_scope)
            await self._state.all_up.wait()
            task_status.started(dict(self._state.pids))
        if self._state.gave_up is not None:
            raise self._state.gave_up

    def _give_up(self, scope: CancelScope, message: str) -> None:
        if self._state.gave_up is None:
            self._state.gave_up = GaveUp(message)
        scope.cancel()

    async def _keep(self, child: Child, scope: CancelScope) -> None:
        policy = self.restarts
        delay = policy.first
        failures = 0
        while True:
            began = anyio.current_time()
            try:
                run = await self._run_once(child)
            except OSError as exc:
                self._give_up(scope, f"cannot start {child.name} ({' '.join(child.argv)}): {exc}")
                return
            ran = anyio.current_time() - began
            how = describe_exit(run.code)
            failures = 0 if run.up else failures + 1
            if failures >= policy.start_failures:
                last = f"; its last line: {run.last}" if run.last else ""
                self._give_up(scope, f"{child.name} exited before it was ready {failures} times in a row "
                                     f"(last: {how}{last})")
                return
            if ran >= policy.reset_after:
                delay = policy.first
            self._echo(f"{child.name} exited ({how}) after {ran:.1f} s; restarting in {delay:g} s")
            await anyio.sleep(delay)
            delay = min(delay * policy.factor, policy.most)

    async def _run_once(self, child: Child) -> _Run:
        """Start `child`, follow its stderr until it exits; stop it if cancelled meanwhile."""
        env = dict(os.environ if child.env is None else child.env)
        env[PARENT_ENV] = str(os.getpid())
        with anyio.CancelScope(shield=True):  # a process started is a process stopped below
            process = await anyio.open_process(list(child.argv), stdin=subprocess.DEVNULL, stdout=None,
                                               stderr=subprocess.PIPE, env=env, start_new_session=True)
        self._state.pids[child.name] = process.pid
        self._echo(f"{child.name} started (pid {process.pid})")
        assert process.stderr is not None
        lines = LineReader(process.stderr)
        run = _Run()
        try:
            await self._follow(child, lines, run)
            run.code = await process.wait()
        finally:
            with anyio.CancelScope(shield=True):
                if process.returncode is None:  # cancelled: stop it
                    await self._stop(child, process, lines, run)
                if process.returncode is not None:
                    run.code = process.returncode
                self._state.pids.pop(child.name, None)
                self._state.up.discard(child.name)
                with contextlib.suppress(Exception):
                    await process.aclose()
        return run

    async def _follow(self, child: Child, lines: LineReader, run: _Run) -> None:
        while (line := await lines.receive()) is not None:
            if line.strip():
                run.last = line
            self._on_line(child.name, line)
            if not run.up and self._is_up(child.name, line):
                run.up = True
                self._state.up.add(child.name)
                self._maybe_ready()

    def _maybe_ready(self) -> None:
        if self._state.up >= {child.name for child in self._children}:
            self._state.all_up.set()

    async def _stop(self, child: Child, process: Process, lines: LineReader, run: _Run) -> None:
        """SIGTERM, up to `stop_timeout` s to exit (its stderr still forwarded), then SIGKILL."""
        with contextlib.suppress(ProcessLookupError):
            process.terminate()
        with anyio.move_on_after(self.restarts.stop_timeout):
            await self._follow(child, lines, run)
            await process.wait()
        if process.returncode is None:
            self._echo(f"{child.name} did not stop within {self.restarts.stop_timeout:g} s of SIGTERM; killing it")
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
