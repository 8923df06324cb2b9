"""Which services exist and how they start: the one table, wired in one place.

`run_system(names, data_dir, nats_url)` connects to NATS (or starts an embedded server when no
URL is given), makes sure the stream exists, and starts the named services in one task group,
in the table's order, each once the previous one is ready."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

from services.admission.service import serve_admission
from services.common.jetstream import JetStreamLog
from services.common.log import EventLog
from services.common.natsserver import EmbeddedNats, remove_url_file, write_url_file
from services.preemption.service import serve_preemption
from services.tree.service import serve_tree

Serve = Callable[..., Awaitable[None]]

SERVICES: dict[str, Serve] = {
    "tree": serve_tree,
    "admission": serve_admission,
    "preemption": serve_preemption,
}


async def start_services(tg: Any, log: EventLog, names: list[str], data_dir: Path | None,
                         **options: Any) -> list[Any]:
    """Start each named service in `tg` (in the table's order) and return what each reported ready."""
    started = []
    for name in SERVICES:
        if name in names:
            serve = SERVICES[name]
            sub = None if data_dir is None else data_dir / name
            extra = options.get(name, {})
            started.append(await tg.start(lambda task_status, s=serve, d=sub, e=extra: s(
                log, d, task_status=task_status, **e)))
    return started


async def run_system(names: list[str], data_dir: Path, nats_url: str | None,
                     on_ready: Callable[[str], None] | None = None) -> None:
    """Run the named services until cancelled, on `nats_url` or an embedded server."""
    data_dir.mkdir(parents=True, exist_ok=True)
    embedded: EmbeddedNats | None = None
    if nats_url is None:
        embedded = EmbeddedNats(data_dir)
        await anyio.to_thread.run_sync(embedded.start)
        nats_url = embedded.url
        write_url_file(data_dir, nats_url)
    try:
        log = await JetStreamLog.connect(nats_url)
        try:
            await log.ensure_stream()
            async with anyio.create_task_group() as tg:
                await start_services(tg, log, names, data_dir)
                if on_ready is not None:
                    on_ready(nats_url)
        finally:
            with anyio.CancelScope(shield=True):
                await log.close()
    finally:
        if embedded is not None:
            remove_url_file(data_dir)
            await anyio.to_thread.run_sync(embedded.stop)
