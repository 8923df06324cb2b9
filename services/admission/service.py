"""The admission service: its folder on the log, its projections, and its clock.

The clock publishes a `ClockTicked` (time from the wall clock, never earlier than the log's)
when inputs arrived since the last cycle and the previous cycle has been read back (at once
under load; after a quiet spell, `DEBOUNCE` later, so that a burst shares one cycle), and when
the earliest timer is due, so that timeouts fire on a quiet log. Ticks are events: replay sees
the same ones. Scenario runs switch the clock off and publish their own ticks.
"""

from __future__ import annotations

import time
from pathlib import Path

import anyio
from anyio.abc import TaskStatus

from events import ClockTicked, Envelope, at_seconds, derived_id
from projections.store import ProjectionStore
from services.admission.folder import SUBJECTS, AdmissionFolder
from services.admission.queries import ExplainingFolder, serve_queries
from services.common.folding import run_folder
from services.common.log import EventLog

DEBOUNCE = 0.002  # seconds: after a quiet spell, inputs arriving together share one cycle
QUIET = 0.05  # seconds without a tick after which the next one waits DEBOUNCE for more inputs


class Clock:
    def __init__(self, log: EventLog, folder: AdmissionFolder) -> None:
        self.log = log
        self.folder = folder
        self.wake = anyio.Event()
        self.count = 0
        self.last_tick = float("-inf")  # monotonic time of the last tick

    async def on_batch(self, last_seq: int) -> None:
        self.wake.set()

    def _wanted(self) -> bool:
        state = self.folder.state
        return any(rt.dirty and rt.in_flight is None for rt in state.trees.values())

    async def run(self) -> None:
        self.wake.set()  # look once at start: inputs folded by the rebuild may be waiting for a cycle
        while True:
            deadline = self.folder.state.next_deadline()
            timeout = None if deadline is None else max(0.0, deadline - time.time())
            with anyio.move_on_after(timeout if timeout is not None else 3600):
                await self.wake.wait()
            self.wake = anyio.Event()
            due = deadline is not None and time.time() >= deadline
            if self._wanted() or due:
                # Under load a tick goes out as soon as the previous cycle is read back: what came
                # in meanwhile (one cycle in flight per tree) is its batch. After a quiet spell,
                # wait a moment for the rest of a burst to arrive.
                if time.monotonic() - self.last_tick > QUIET:
                    await anyio.sleep(DEBOUNCE)
                await self.tick()

    async def tick(self) -> None:
        state = self.folder.state
        for rt in state.trees.values():
            rt.dirty = False
        now = max(time.time(), state.now)
        self.count += 1
        self.last_tick = time.monotonic()
        await self.log.append([Envelope(id=derived_id("clock", now, self.count, state.last_seq), time=at_seconds(now),
                                        source="admission:clock", event=ClockTicked())])


async def serve_admission(log: EventLog, data_dir: Path | None, *, clock: bool = True,
                          folder: AdmissionFolder | None = None,
                          task_status: TaskStatus[str] = anyio.TASK_STATUS_IGNORED) -> None:
    folder = folder or AdmissionFolder()
    store = None
    if data_dir is not None:
        from services.admission.projection import projections_for

        kept = projections_for()
        if kept:
            data_dir.mkdir(parents=True, exist_ok=True)
            store = ProjectionStore(data_dir / "admission.duckdb", kept)
    ticker = Clock(log, folder) if clock else None
    explaining = ExplainingFolder(folder)  # the same folder, keeping what `explain` needs
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(lambda task_status: run_folder(
                log, explaining, SUBJECTS, durable="admission", store=store,
                on_batch=ticker.on_batch if ticker else None, task_status=task_status))
            if ticker is not None:
                tg.start_soon(ticker.run)
            nc = getattr(log, "nc", None)
            if nc is not None:  # JetStream: answer `poolwise.cmd.admission.*` (gangs, explain)
                await tg.start(lambda task_status: serve_queries(nc, explaining, task_status=task_status))
            task_status.started("admission")
    finally:
        if store is not None:
            store.close()
