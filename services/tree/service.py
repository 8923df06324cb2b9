"""The tree service's shell: commands in (request/reply), validated events out (optimistic append).

Per command (decide, then do):
    1. catch up: fold what the log has beyond our position (another instance may have written);
    2. decide on the state (pure: `services.tree.domain.decide`);
    3. append the accepted events with `Nats-Expected-Last-Subject-Sequence` = the last sequence
       we folded on that subject; a concurrent writer makes the server refuse it (`StaleWrite`):
       catch up and decide again (at most 3 times), so a change is re-validated, never lost;
    4. on a refusal, append an `InputRejected` record and answer with the rule and message;
    5. fold what we appended, and reply with its log position.
A consume loop keeps the state and the projection (pool tree, event log) current between commands.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskStatus
from pydantic import BaseModel, ValidationError

from events import DecodeError, Envelope, InputRejected, at_seconds, decode, derived_id, subjects
from events.commands import (
    COMMANDS,
    CommandError,
    HostList,
    PoolGet,
    PoolList,
    PoolUpsert,
    Reply,
    TreeList,
)
from projections.store import ProjectionStore
from services.common.folding import rejection_of_malformed
from services.common.log import EventLog, StaleWrite, Stored
from services.tree.domain import paths
from services.tree.domain.decide import Accepted, Refused, decide
from services.tree.domain.state import TreeState
from services.tree.domain.views import list_hosts, list_pools, list_trees, pool_view

SERVICE = "tree"
SUBJECTS: tuple[str, ...] = (subjects.HOSTS, subjects.ALL_CONFIG, f"{subjects.PREFIX}.gang.*",
                             f"{subjects.PREFIX}.decision.*.admission")
OWNED = (subjects.HOSTS, f"{subjects.PREFIX}.config.")
ATTEMPTS = 3


def _error(rule: str, message: str, field: str | None = None) -> Reply:
    return Reply(ok=False, error=CommandError(rule=rule, message=message, field=field))


class TreeService:
    def __init__(self, log: EventLog, store: ProjectionStore | None = None) -> None:
        self.log = log
        self.store = store
        self.state = TreeState()
        self.position = 0  # last log sequence folded
        self.subject_seq: dict[str, int] = {}  # last sequence folded per subject (for expectations)
        self.lock = anyio.Lock()
        self.now = 0.0

    # --- folding ----------------------------------------------------------------------------

    async def fold(self, batch: Sequence[Stored]) -> list[Envelope]:
        """Fold messages beyond our position; returns rejections of malformed config/host messages."""
        rejections: list[Envelope] = []
        for stored in batch:
            if stored.seq <= self.position:
                continue
            self.position = stored.seq
            self.subject_seq[stored.subject] = stored.seq
            try:
                envelope = decode(stored.data)
            except DecodeError as error:
                if stored.subject == subjects.HOSTS or stored.subject.startswith(OWNED[1]):
                    rejections.append(rejection_of_malformed(SERVICE, stored, error, self.now))
                continue
            self.now = max(self.now, envelope.seconds)
            self.state.apply(envelope.event, stored.seq)
        return rejections

    async def catch_up(self) -> None:
        batch = await self.log.read(self.position + 1, SUBJECTS)
        rejections = await self.fold(batch)
        if rejections:
            await self.log.append(rejections)

    async def on_batch(self, batch: Sequence[Stored]) -> None:
        async with self.lock:
            rejections = await self.fold(batch)
            if rejections:
                await self.log.append(rejections)
        if self.store is not None:
            await anyio.to_thread.run_sync(self.store.apply, batch)

    # --- commands ---------------------------------------------------------------------------

    async def handle(self, command: BaseModel) -> Reply:
        async with self.lock:
            await self.catch_up()  # 1.
            query = self._query(command)
            if query is not None:
                return query
            for _ in range(ATTEMPTS):
                precheck = self._require(command)
                if precheck is not None:
                    return precheck
                decision = decide(self.state, command)  # type: ignore[arg-type]  # 2.
                if isinstance(decision, Refused):
                    return await self._refuse(command, decision)  # 4.
                try:
                    seq = await self._append(decision)  # 3.
                except StaleWrite:
                    await self.catch_up()
                    continue
                await self.catch_up()  # 5.
                return Reply(ok=True, seq=seq, data={"ref": decision.ref, "changed": bool(decision.events)})
            return _error("stale", "the tree kept changing under this command; try again")

    def _query(self, command: BaseModel) -> Reply | None:
        if isinstance(command, PoolGet):
            view = pool_view(self.state, command.tree, command.path)
            if view is None:
                return _error("not_found", f"pool {command.path} does not exist in tree {command.tree}", "path")
            return Reply(ok=True, data=view)
        if isinstance(command, PoolList):
            names = [command.tree] if command.tree else self.state.tree_names()
            trees = {t["name"]: t for t in list_trees(self.state)}
            return Reply(ok=True, data={"trees": [
                {"tree": n, "capacity": trees.get(n, {}).get("capacity"), "pools": list_pools(self.state, n)}
                for n in names]})
        if isinstance(command, TreeList):
            return Reply(ok=True, data={"trees": list_trees(self.state)})
        if isinstance(command, HostList):
            return Reply(ok=True, data={"hosts": [{**h, "host": h["name"]} for h in list_hosts(self.state)]})
        return None

    def _require(self, command: BaseModel) -> Reply | None:
        if not isinstance(command, PoolUpsert) or command.require == "any":
            return None
        exists = self.state.tree(command.tree).pool(paths.normalize(command.path)) is not None
        if command.require == "new" and exists:
            return _error("exists", f"pool {command.path} already exists in tree {command.tree}", "path")
        if command.require == "existing" and not exists:
            return _error("not_found", f"pool {command.path} does not exist in tree {command.tree}", "path")
        return None

    async def _append(self, decision: Accepted) -> int | None:
        seq: int | None = None
        for event in decision.events:
            tree = getattr(event, "tree", None)
            subject = subjects.for_event(event.type, tree, SERVICE)
            expected = self.subject_seq.get(subject, 0)
            envelope = Envelope(id=derived_id(SERVICE, subject, expected, event.model_dump_json()),
                                time=at_seconds(self.now), source=SERVICE, basis=self.position, event=event)
            appended = await self.log.append_expecting(envelope, subject, self.subject_seq.get(subject, 0))
            if appended.duplicate:
                raise StaleWrite(subject, self.subject_seq.get(subject, 0), "duplicate: already written")
            seq = appended.seq
            self.subject_seq[subject] = appended.seq
        return seq

    async def _refuse(self, command: BaseModel, refused: Refused) -> Reply:
        text = command.model_dump_json()
        event = InputRejected(tree=refused.tree, ref=refused.ref, input_type=type(command).__name__,
                              reason=refused.message, rule=refused.rule, field=refused.field, input=text)
        envelope = Envelope(id=derived_id(SERVICE, "refused", self.position, text), time=at_seconds(self.now),
                            source=SERVICE, basis=self.position, event=event)
        await self.log.append([envelope])
        return Reply(ok=False, error=refused.error())

    async def handle_raw(self, op: str, data: bytes) -> Reply:
        """A request as it comes over NATS: the op from the subject, the command as JSON."""
        model = COMMANDS.get(op)
        if model is None:
            return _error("unknown_command", f"unknown command {op!r}; known: {', '.join(sorted(COMMANDS))}")
        try:
            command = model.model_validate_json(data or b"{}")
        except ValidationError as exc:
            err = exc.errors(include_url=False)[0]
            field = ".".join(str(p) for p in err["loc"]) or None
            return _error("invalid_command", f"{field}: {err['msg']}" if field else str(err["msg"]), field)
        return await self.handle(command)

    async def handle_sql(self, data: bytes) -> Reply:
        if self.store is None:
            return _error("no_store", "this tree service keeps no projections")
        try:
            request: dict[str, Any] = json.loads(data or b"{}")
            columns, rows = await anyio.to_thread.run_sync(self.store.query, str(request.get("sql", "")))
        except Exception as exc:  # a bad query is the asker's problem, reported, never a crash
            return _error("sql", f"{exc.__class__.__name__}: {exc}")
        return Reply(ok=True, data={"columns": list(columns), "rows": [list(r) for r in rows]})


async def serve_tree(log: EventLog, data_dir: Path | None, *, service: TreeService | None = None,
                     task_status: TaskStatus[TreeService] = anyio.TASK_STATUS_IGNORED) -> None:
    store = None
    if data_dir is not None and service is None:
        from projections.event_log import EventLogProjection
        from projections.pool_tree import PoolTreeProjection

        data_dir.mkdir(parents=True, exist_ok=True)
        store = ProjectionStore(data_dir / "tree.duckdb", [PoolTreeProjection(), EventLogProjection()])
    svc = service or TreeService(log, store)
    try:
        async with svc.lock:
            await svc.catch_up()
        start = svc.position if store is None else min(svc.position, store.lowest_checkpoint)
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: log.consume("tree", SUBJECTS, start, svc.on_batch))
            nc = getattr(log, "nc", None)
            if nc is not None:
                await _serve_requests(nc, svc)
            task_status.started(svc)
    finally:
        if store is not None:
            store.close()


async def _serve_requests(nc: Any, svc: TreeService) -> None:
    """Answer `poolwise.cmd.tree.<op>` (queue group: one instance answers each request)."""
    prefix = subjects.command(SERVICE, "")

    async def on_request(msg: Any) -> None:
        op = msg.subject[len(prefix):]
        try:
            reply = await (svc.handle_sql(msg.data) if op == "sql" else svc.handle_raw(op, msg.data))
        except Exception as exc:  # the service stays up; the asker gets the reason
            reply = _error("internal", f"{exc.__class__.__name__}: {exc}")
        await msg.respond(reply.model_dump_json().encode())

    await nc.subscribe(subjects.command(SERVICE, "*"), queue=SERVICE, cb=on_request)
