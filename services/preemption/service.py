"""The preemption service: its folder on the log (it runs a pass after each admission cycle),
and its queries over NATS request/reply (`poolwise.cmd.preemption.list`), answered from the
folded state."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskStatus
from pydantic import ValidationError

from events import subjects
from events.commands import CommandError, Reply
from projections.store import ProjectionStore
from services.common.folding import run_folder
from services.common.log import EventLog
from services.preemption.commands import COMMANDS, SERVICE, PreemptionList
from services.preemption.folder import SUBJECTS, PreemptionFolder


def _error(rule: str, message: str, field: str | None = None) -> Reply:
    return Reply(ok=False, error=CommandError(rule=rule, message=message, field=field))


def answer(folder: PreemptionFolder, op: str, data: bytes) -> Reply:
    """One request, as it comes over NATS: the op from the subject, the command as JSON."""
    model = COMMANDS.get(op)
    if model is None:
        return _error("unknown_op", f"unknown preemption request {op!r}; known: {', '.join(sorted(COMMANDS))}")
    try:
        command = model.model_validate_json(data or b"{}")
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in err["loc"]) or None
        return _error("invalid_command", f"{where}: {err['msg']}" if where else str(err["msg"]), where)
    assert isinstance(command, PreemptionList)
    state = folder.state
    records = state.preemptions(tree=command.tree, pool=command.pool, state=command.state)
    if command.limit is not None:
        records = records[-command.limit:]
    return Reply(ok=True, seq=state.admission.last_seq, data={
        "preemptions": [r.to_dict() for r in records],
        "starvation": state.starvation(tree=command.tree, pool=command.pool),
    })


async def serve_requests(nc: Any, folder: PreemptionFolder) -> None:
    """Answer `poolwise.cmd.preemption.<op>` (queue group: one instance answers each request).
    The answer is built from the state between two folds (no await in between)."""
    prefix = subjects.command(SERVICE, "")

    async def on_request(msg: Any) -> None:
        try:
            reply = answer(folder, msg.subject[len(prefix):], msg.data)
        except Exception as exc:  # the service stays up; the asker gets the reason
            reply = _error("internal", f"{exc.__class__.__name__}: {exc}")
        await msg.respond(reply.model_dump_json().encode())

    await nc.subscribe(subjects.command(SERVICE, "*"), queue=SERVICE, cb=on_request)


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
            nc = getattr(log, "nc", None)
            if nc is not None:
                await serve_requests(nc, folder)
            task_status.started("preemption")
    finally:
        if store is not None:
            store.close()
