"""The preemption service: its folder on the log (it runs a pass after each admission cycle)."""

from __future__ import annotations

from pathlib import Path

import anyio
from anyio.abc import TaskStatus

from projections.store import ProjectionStore
from services.common.folding import run_folder
from services.common.log import EventLog
from services.preemption.folder import SUBJECTS, PreemptionFolder


async def serve_preemption(log: EventLog, data_dir: Path | None, *, folder: PreemptionFolder | None = None,
                           task_status: TaskStatus[str] = anyio.TASK_STATUS_IGNORED) -> None:
    folder = folder or PreemptionFolder()
    store = None
    if data_dir is not None:
        from projections.event_log import EventLogProjection

        data_dir.mkdir(parents=True, exist_ok=True)
        store = ProjectionStore(data_dir / "preemption.duckdb", [EventLogProjection()])
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(lambda task_status: run_folder(log, folder, SUBJECTS, durable="preemption", store=store,
                                                          task_status=task_status))
            task_status.started("preemption")
    finally:
        if store is not None:
            store.close()
