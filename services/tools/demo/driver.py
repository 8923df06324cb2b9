"""The demo's driver: the system on an embedded NATS, the cluster applied, the workload submitted,
the executors simulated, the clock ticked, then `replay --verify`.

1. The tree, admission and preemption services run in this process on an embedded nats-server
   in the demo's data dir (`services.launcher.run_system`, what `poolwise up --single-process`
   runs), with admission's clock off: the driver is the clock, as a scenario run is.
2. The cluster file is applied with `poolwise apply`'s machinery (planned on the live
   configuration with the tree service's rules, then sent command by command), which the CLI
   hands down (`apply`: nothing below the CLI imports it).
3. Step by step in log time: the executor's reports due by then (jobs that ended), the cancels,
   the jobs submitted then (`Submitter`, events stamped with the step's log time), then a
   `ClockTicked` at that time; the driver reads the log back until the tick's admission cycle
   and preemption pass are closed, and the executor answers what they decided (tasks running,
   tasks stopped) at the same log time. A paced workload steps every `step_ms` at the wall time
   its log time maps to; otherwise the driver steps to the next time anything happens, at once.
4. `replay --verify` re-derives every decision of the log (`services.tools.replay`).

Event times come from the driver, never from a clock: the same workload gives the same log.
"""

from __future__ import annotations

import os
import resource
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import anyio

from events import ClockTicked, Envelope, at_seconds, derived_id
from services.admission.domain.model import FINISHED
from services.common.jetstream import JetStreamLog
from services.sdk import Submitter, cancel_event, enqueue_event, envelope
from services.tools.demo.executor import Executor, Report
from services.tools.demo.reader import LogReader
from services.tools.demo.record import Recorder
from services.tools.demo.workload import Job, Workload

SERVICES = ["tree", "admission", "preemption"]
SUBMITTER = "demo:submitter"
EXECUTOR = "demo:executor"
CLOCK = "demo:clock"


class Watcher(Protocol):
    """Who shows the run: told of the apply, of every step, and of the end."""

    def applied(self, outcome: dict[str, Any]) -> None: ...
    def step(self, now_ms: int, reader: LogReader, recorder: Recorder) -> None: ...
    def finished(self) -> None: ...


@dataclass
class DemoResult:
    workload: Workload
    summary: dict[str, Any]
    replay: Any  # services.tools.replay.Report
    wall_seconds: float
    cpu_seconds: float  # this process (services, driver, reader) and its children (nats-server, replay's)
    cpu_run: float  # this process from its start to the last step (services, driver, executor, reader)
    cpu_nats: float | None  # the nats-server, over its life (None where /proc does not say)
    cpu_replay: float  # the replay (in this process, and its verifier's process on a long log)
    steps: int
    log_positions: int
    stopped_early: bool  # the wall-clock budget ended the workload before its last job
    read_models_behind: tuple[int, int] | None = None  # (where the tree's SQL tables stopped, the log's end)


# applies a cluster file (its path) to the system at a URL, as `poolwise apply -f` does, and
# returns apply's outcome document: the CLI's code (services.tools.cli.demo_cmd.apply_file), handed down
Apply = Callable[[str, Path], Awaitable[dict[str, Any]]]
# waits until the tree service's read models (its SQL tables) hold the whole log at a URL, and
# returns None, or where they stopped and where the log ends: the CLI's code, handed down, run
# when the demo's data dir is kept (services.tools.cli.demo_cmd.read_models_settled)
Settle = Callable[[str], Awaitable[tuple[int, int] | None]]


async def run_demo(workload: Workload, data_dir: Path, watcher: Watcher, apply: Apply, *,
                   deadline: float | None = None,
                   beside: Callable[..., Coroutine[Any, Any, None]] | None = None,
                   settle: Settle | None = None) -> DemoResult:
    """Run `workload` on a new system in `data_dir` (a fresh directory), its cluster file applied
    with `apply`; `deadline`: the `time.monotonic()` after which no more steps are taken (the
    replay and summary still run); `beside(url, task_status=...)`: started once the system is up,
    before the cluster is applied, and stopped with the system (the CLI's dashboard); `settle`:
    awaited after the replay, before the system stops (the kept data dir's SQL tables made whole)."""
    from services.launcher import run_system

    started, cpu0 = time.monotonic(), _cpu()
    ready = anyio.Event()
    urls: list[str] = []

    def on_ready(url: str) -> None:
        urls.append(url)
        ready.set()

    async with anyio.create_task_group() as tg:
        # no leases (one instance of each on a private server): a loaded machine cannot cost one its lease
        tg.start_soon(lambda: run_system(SERVICES, data_dir, None, on_ready,
                                         options={"admission": {"clock": False}, "leadership": False}))  # type: ignore[dict-item]
        await ready.wait()
        url = urls[0]
        if beside is not None:
            await tg.start(beside, url)
        cluster = data_dir / f"{workload.name}-cluster.yaml"
        cluster.write_text(workload.cluster)
        watcher.applied(await apply(url, cluster))
        drive = Drive(workload, await JetStreamLog.connect(url, name="poolwise-demo"), url, watcher)
        try:
            await drive.run(deadline)
        finally:
            watcher.finished()  # (a live table gives the terminal back, on Ctrl-C too)
            with anyio.CancelScope(shield=True):
                await drive.close()
        from services.tools.replay.reader import verify_url

        cpu_run = _cpu() - cpu0
        report = await verify_url(url)
        cpu_replay = _cpu() - cpu0 - cpu_run
        behind = None if settle is None else await settle(url)
        cpu_nats = _server_cpu(data_dir)
        positions = drive.reader.position
        tg.cancel_scope.cancel()
    summary = drive.recorder.summary(workload.capacity(), workload.classes)
    return DemoResult(workload, summary, report, time.monotonic() - started, _cpu() - cpu0, cpu_run, cpu_nats,
                      cpu_replay, drive.steps, positions, drive.stopped_early, behind)


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)  # reaped ones: the server once stopped
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _server_cpu(data_dir: Path) -> float | None:
    """The CPU seconds of the embedded nats-server so far (its pid file, then /proc), or None."""
    try:
        pid = int((data_dir / "nats" / "nats.pid").read_text().strip())
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime
    except (OSError, ValueError, IndexError):
        return None


class Drive:
    def __init__(self, workload: Workload, log: JetStreamLog, url: str, watcher: Watcher) -> None:
        self.workload = workload
        self.log = log
        self.watcher = watcher
        jobs = {job.gang: job for job in workload.jobs}
        self.recorder = Recorder(classes={gang: job.klass for gang, job in jobs.items()})
        self.reader = LogReader(log, self.recorder)
        self.executor = Executor(jobs)
        self.submitter = Submitter(url, source=SUBMITTER)
        self.machines = Submitter(url, source=EXECUTOR)  # the executors' reports
        self.pending_jobs = deque(workload.jobs)  # sorted by time
        self.cancels = deque(sorted((j.cancel_ms, j.gang) for j in workload.jobs if j.cancel_ms is not None))
        self.steps = 0
        self.stopped_early = False

    async def close(self) -> None:
        await self.submitter.close()
        await self.machines.close()
        await self.log.close()

    async def run(self, deadline: float | None) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.reader.follow)
            await self._steps(deadline)
            tg.cancel_scope.cancel()

    async def _steps(self, deadline: float | None) -> None:
        paced = self.workload.paced
        begun = time.monotonic()
        now_ms: int | None = 0 if paced else self._next_time(None)
        while now_ms is not None:
            if deadline is not None and time.monotonic() >= deadline and self.steps:  # one step at least
                self.stopped_early = True
                break
            if paced:
                await anyio.sleep(max(0.0, begun + now_ms / 1000 / self.workload.speed - time.monotonic()))
            await self.step(now_ms)
            self.watcher.step(now_ms, self.reader, self.recorder)
            now_ms = (now_ms + self.workload.step_ms if now_ms + self.workload.step_ms <= self.workload.horizon_ms
                      else None) if paced else self._next_time(now_ms)

    async def step(self, now_ms: int) -> None:
        at = at_seconds(now_ms / 1000)
        state = self.reader.state
        await self._report(self.executor.ended(state, now_ms), now_ms)
        cancels = []
        while self.cancels and self.cancels[0][0] <= now_ms:
            _, gang = self.cancels.popleft()
            if not self._live(gang):
                continue  # finished meanwhile: its user does not cancel it
            cancels.append(envelope(cancel_event(gang=gang, reason="cancelled by its user"), source=SUBMITTER,
                                    time=at))
        arrivals: list[Job] = []
        while self.pending_jobs and self.pending_jobs[0].at_ms <= now_ms:
            arrivals.append(self.pending_jobs.popleft())
        enqueues = [envelope(enqueue_event(**job.enqueue_options()), source=SUBMITTER, time=at)  # type: ignore[arg-type]
                    for job in arrivals]
        await self.submitter.publish(enqueues + cancels)
        tick = Envelope(id=derived_id("demo", self.workload.name, "tick", now_ms), time=at, source=CLOCK,
                        event=ClockTicked())
        (landed,) = await self.log.append([tick])
        await self.reader.settle(landed.seq)
        self.steps += 1
        await self._report(self.executor.started(state, self.reader.take_touched(), now_ms), now_ms)
        self.recorder.hold(now_ms / 1000, self._held_cpu())

    async def _report(self, reports: list[Report], now_ms: int) -> None:
        if reports:
            at = at_seconds(now_ms / 1000)
            await self.machines.publish([envelope(event, source=EXECUTOR, attempt=attempt, time=at)
                                         for event, attempt in reports])

    def _live(self, gang: str) -> bool:
        rt = self.reader.state.trees.get("default")
        found = rt.gangs.get(gang) if rt is not None else None
        return found is not None and found.state not in FINISHED

    def _held_cpu(self) -> float:
        rt = self.reader.state.trees.get("default")
        if rt is None:
            return 0.0
        # non-revocable tasks: revocable ones run on the machines' spare cpu, beyond the capacity
        return sum(ledger.allocation.get("cpu", 0.0) for ledger in rt.ledgers.values())

    def _next_time(self, now_ms: int | None) -> int | None:
        """When something happens next: a job arrives, ends or is cancelled (the next step, if that
        is now or before); None when no job is left to come, run or cancel (a gang still waiting
        then would wait for good: nothing would free room for it)."""
        candidates = [t for t in (self.pending_jobs[0].at_ms if self.pending_jobs else None,
                                  self.executor.next_end(), self.cancels[0][0] if self.cancels else None)
                      if t is not None]
        if not candidates:
            return None
        found = min(candidates)
        return found if now_ms is None or found > now_ms else now_ms + self.workload.step_ms
