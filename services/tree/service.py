"""The tree service's shell: commands in (request/reply), validated events out (optimistic append).

Per command (decide, then do):
    1. catch up: fold what the log has beyond our position (another instance may have written);
    2. decide on the state (pure: `services.tree.domain.decide`);
    3. append the accepted events with `Nats-Expected-Last-Subject-Sequence` = the last sequence
       we folded on that subject; a concurrent writer makes the server refuse it (`StaleWrite`):
       catch up and decide again (at most 3 times), so a change is re-validated, never lost;
    4. on a refusal, append an `InputRejected` record and answer with the rule and message;
    5. fold what we appended, and reply with its log position.
An accepted command's events are stamped with the log's time (the newest event time folded) or,
with a `clock` (`poolwise up` and `serve`), the wall clock when it is later: they are inputs,
written when the operator sent them, so a fresh cluster's configuration is not dated 1970 (what
`--at TIME` and SQL's `event_log.time` read). A refusal is a decision: the log's time alone, as
the replay re-derives it. Scenario runs and the demo keep log time (no clock): their time starts
at 0.
A consume loop keeps the state and the projection (pool tree, event log) current between commands.
The projection gets every event of the stream (`event_log` is the whole log); the state folds
only the tree's own subjects (`SUBJECTS`).

The pure parts (`TreeView.fold`, `parse_command`, `judge`, `rejection`) are what `poolwise replay
--verify` re-runs to check the recorded refusals. What is recorded: every refused change (a
domain rule, a `require` precheck, a request that is not a valid command, an unknown op) becomes
exactly one `InputRejected`; queries (`pool_get`, `pool_list`, `tree_list`, `host_list`, `sql`)
and giving up after `ATTEMPTS` concurrent writes (`stale`: nothing was decided) record nothing.
"""

from __future__ import annotations

import gc
import json
import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from time import time, time_ns

import anyio
from anyio.abc import TaskGroup, TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream
from pydantic import BaseModel, ValidationError

from events import (
    DecodeError,
    Envelope,
    InputRejected,
    at_seconds,
    decode_all,
    derived_id,
    read_envelope,
    read_pack,
    subjects,
)
from events.commands import (
    COMMANDS,
    HostList,
    PoolGet,
    PoolList,
    PoolUpsert,
    Reply,
    TreeList,
)
from projections.store import ProjectionStore
from services.common import metrics, tracing
from services.common.folding import (
    Saves,
    anchor_of,
    gc_paused,
    pickled_later,
    rejection_of_malformed,
    save_snapshot,
)
from services.common.log import BatchHandler, EventLog, StaleWrite, Stored, read_in_chunks
from services.common.memlog import subject_filter
from services.common.requests import error_reply, serve_requests
from services.common.snapshots import SnapshotPolicy, load_newest, policy_for
from services.tree.domain import paths
from services.tree.domain.decide import Accepted, ConfigCommand, Decision, Refused, decide
from services.tree.domain.state import TreeState
from services.tree.domain.views import list_hosts, list_pools, list_trees, pool_view

SERVICE = "tree"
logger = logging.getLogger(__name__)
SUBJECTS: tuple[str, ...] = (subjects.HOSTS, subjects.ALL_CONFIG, f"{subjects.PREFIX}.gang.*",
                             f"{subjects.PREFIX}.decision.*.admission")
OWNED = (subjects.HOSTS, f"{subjects.PREFIX}.config.")
ATTEMPTS = 3
INPUT_LIMIT = 4096  # characters of a refused request kept in its record
BATCH = 1000  # messages per consumed batch: one DuckDB transaction (commit and row look-ups paid per batch)
QUERIES = frozenset({"pool_get", "pool_list", "tree_list", "host_list"})
MODELS: dict[str, type[BaseModel]] = {cls.__name__: cls for cls in COMMANDS.values()}
_folded = subject_filter(SUBJECTS)


_error = error_reply


# --- the pure parts (replay re-runs them) ----------------------------------------------------


@dataclass(slots=True)
class TreeView:
    """What the tree service knows: the tree state folded from its subjects, its position (last
    sequence folded), the last sequence per subject (for the append expectations), its clock."""

    state: TreeState = field(default_factory=TreeState)
    position: int = 0
    subject_seq: dict[str, int] = field(default_factory=dict)
    now: float = 0.0

    def fold(self, batch: Sequence[Stored], decoded: dict[int, list[Envelope]] | None = None,
             read: Callable[[Stored], list[Envelope]] | None = None) -> list[Envelope]:
        """Fold the messages on the tree's subjects beyond our position (others are skipped);
        returns the rejections of malformed config/host messages. `decoded`, if given, gets the
        envelope of each message folded, by sequence (the projections take them from there).
        `read`: the envelopes of a message decoded already (as `decode_all(data, read_envelope,
        read_pack)` decodes them, `DecodeError` alike), e.g. by the replay."""
        rejections: list[Envelope] = []
        for stored in batch:
            if stored.seq <= self.position or not _folded(stored.subject):
                continue
            self.position = stored.seq
            self.subject_seq[stored.subject] = stored.seq
            try:
                envelopes = decode_all(stored.data, read_envelope, read_pack) if read is None else read(stored)
            except DecodeError as error:
                if stored.subject == subjects.HOSTS or stored.subject.startswith(OWNED[1]):
                    rejections.append(rejection_of_malformed(SERVICE, stored, error, self.now))
                continue
            if decoded is not None:
                decoded[stored.seq] = envelopes
            # the latest time of the message as `envelope.seconds` (the aware time less the epoch,
            # in C), converted once: aware times compare as the instants they are
            latest = max((envelope.time for envelope in envelopes), default=None)
            if latest is not None:
                self.now = max(self.now, latest.timestamp())
            apply, seq = self.state.apply, stored.seq
            for envelope in envelopes:
                apply(envelope.event, seq)
        return rejections


def parse_command(op: str, data: bytes | str) -> BaseModel | Refused:
    """A request as it comes over NATS (the op from the subject, the command as JSON), or why not."""
    model = COMMANDS.get(op)
    if model is None:
        return Refused(op, "unknown_command", f"unknown command {op!r}; known: {', '.join(sorted(COMMANDS))}",
                       None, _tree_of(data))
    try:
        return model.model_validate_json(data or b"{}")
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in err["loc"]) or None
        return Refused(op, "invalid_command", f"{where}: {err['msg']}" if where else str(err["msg"]), where,
                       _tree_of(data))


def _tree_of(data: bytes | str) -> str | None:
    """The tree a request names, if it can be read and is a valid tree name (for the record's subject)."""
    try:
        tree = json.loads(data or b"{}").get("tree")
    except (ValueError, AttributeError, UnicodeDecodeError, RecursionError):
        return None
    return tree if isinstance(tree, str) and subjects.TREE_NAME.match(tree) else None


def precheck(state: TreeState, command: BaseModel) -> Refused | None:
    """`pool create` (require new) and `pool update` (require existing) before the rules."""
    if not isinstance(command, PoolUpsert) or command.require == "any":
        return None
    exists = state.tree(command.tree).pool(paths.normalize(command.path)) is not None
    if command.require == "new" and exists:
        return Refused(command.path, "exists", f"pool {command.path} already exists in tree {command.tree}", "path",
                       command.tree)
    if command.require == "existing" and not exists:
        return Refused(command.path, "not_found", f"pool {command.path} does not exist in tree {command.tree}",
                       "path", command.tree)
    return None


def judge(state: TreeState, command: ConfigCommand) -> Decision:
    """The precheck, then the domain's `decide`: pure."""
    return precheck(state, command) or decide(state, command)


def rejection(refused: Refused, input_type: str, text: str, basis: int, now: float) -> Envelope:
    """The `InputRejected` record of a refused request, decided on the tree at `basis`."""
    tree = refused.tree if refused.tree is None or subjects.TREE_NAME.match(refused.tree) else None
    event = InputRejected(tree=tree, ref=refused.ref, input_type=input_type, reason=refused.message,
                          rule=refused.rule, field=refused.field, input=text)
    return Envelope(id=derived_id(SERVICE, "refused", basis, input_type, text), time=at_seconds(now),
                    source=SERVICE, basis=basis, event=event)


# --- the shell ----------------------------------------------------------------------------------


class TreeService:
    def __init__(self, log: EventLog, store: ProjectionStore | None = None,
                 snapshots: SnapshotPolicy | None = None, clock: Callable[[], float] | None = None) -> None:
        self.log = log
        self.clock = clock  # what accepted commands are stamped with when later than the log's time
        self.store = store
        self.view = TreeView()
        self.lock = anyio.Lock()
        self.snapshots = snapshots
        self.tg: TaskGroup | None = None  # while serving: where snapshots are saved from
        self.started_from: int | None = None  # the position of the snapshot it started from
        self.saves = Saves()  # the snapshots being saved (ended with the service: `serve_tree`)

    async def restore(self) -> None:
        """Start from the newest usable snapshot of the view, if any (`services/common/snapshots.py`)."""
        if self.snapshots is None:
            return
        async def anchored(seq: int, anchor: int | None) -> bool:
            return anchor is not None and anchor == await anchor_of(self.log, seq)

        # frozen as it loads (the view is kept): `serve_tree` unfreezes it when it stops
        snapshot, skipped = await load_newest(self.snapshots.store, SERVICE, anchored=anchored, freeze=True)
        for why in skipped:
            logger.warning("snapshot passed over: %s", why)
        if snapshot is not None:
            self.view = snapshot.state
            self.started_from = snapshot.seq
            logger.info("tree: started from its snapshot at %d", snapshot.seq)
        self.snapshots.started(self.position, self.now, restored=self.started_from or 0)

    def snapshot_if_due(self, tg: TaskGroup) -> None:
        """After a batch folded (its rejections published): a snapshot of the view, when due."""
        policy = self.snapshots
        if policy is not None and policy.due(self.position, self.now):
            self.saves.start(tg, policy, self.log, SERVICE, self.position, self.now, pickled_later(self.view))

    @property
    def state(self) -> TreeState:
        return self.view.state

    @property
    def position(self) -> int:
        """The last log sequence folded (of the tree's subjects)."""
        return self.view.position

    @property
    def subject_seq(self) -> dict[str, int]:
        return self.view.subject_seq

    @property
    def now(self) -> float:
        return self.view.now

    # --- folding ----------------------------------------------------------------------------

    async def fold(self, batch: Sequence[Stored], decoded: dict[int, list[Envelope]] | None = None) -> list[Envelope]:
        """Fold messages beyond our position; returns rejections of malformed config/host messages."""
        return self.view.fold(batch, decoded)

    async def catch_up(self) -> None:
        """Fold what the log holds beyond our position (at a start: the whole log, a piece at a time)."""
        async for batch in read_in_chunks(self.log, self.position + 1, SUBJECTS):
            rejections = await self.fold(batch)
            if rejections:
                await self.log.append(rejections)

    async def on_batch(self, batch: Sequence[Stored]) -> None:
        """Fold a consumed batch, then project it (`fold_consumed`, then the projections)."""
        decoded = await self.fold_consumed(batch)
        if self.tg is not None:
            self.snapshot_if_due(self.tg)
        if self.store is not None:
            await anyio.to_thread.run_sync(self.store.apply_isolating, batch, decoded)

    async def fold_consumed(self, batch: Sequence[Stored]) -> dict[int, list[Envelope]]:
        """Fold a consumed batch and publish the rejections of malformed config/host messages;
        returns the envelopes it decoded, by sequence, for the projections (each message is
        decoded once)."""
        decoded: dict[int, list[Envelope]] = {}
        traced = tracing.ON  # (a batch with sampled work is a span in its gangs' traces: `tracing.folded`)
        began = time_ns() if traced else 0
        async with self.lock:
            with gc_paused():  # decoding makes many small objects: no collector passes over them
                rejections = await self.fold(batch, decoded if self.store is not None or traced else None)
            if rejections:
                await self.log.append(rejections)
        if traced and decoded:
            tracing.folded(SERVICE, began, len(batch), decoded.values())
        watched = metrics.status(SERVICE)  # what the metrics read: the position consumed, every subject
        watched.folded, watched.events = max(watched.folded, batch[-1].seq if batch else 0), watched.events + len(batch)
        return decoded

    # --- commands ---------------------------------------------------------------------------

    async def handle(self, command: BaseModel) -> Reply:
        async with self.lock:
            await self.catch_up()  # 1.
            query = self._query(command)
            if query is not None:
                return query
            for _ in range(ATTEMPTS):
                decision = judge(self.state, command)  # type: ignore[arg-type]  # 2.
                if isinstance(decision, Refused):
                    return await self._refuse(type(command).__name__, command.model_dump_json(), decision)  # 4.
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

    def stamp(self) -> float:
        """The time of an accepted command's events: the log's time, or the clock's when later."""
        return self.now if self.clock is None else max(self.now, self.clock())

    async def _append(self, decision: Accepted) -> int | None:
        seq: int | None = None
        stamp = at_seconds(self.stamp())
        for event in decision.events:
            tree = getattr(event, "tree", None)
            subject = subjects.for_event(event.type, tree, SERVICE)
            expected = self.subject_seq.get(subject, 0)
            envelope = Envelope(id=derived_id(SERVICE, subject, expected, event.model_dump_json()),
                                time=stamp, source=SERVICE, basis=self.position, event=event)
            appended = await self.log.append_expecting(envelope, subject, self.subject_seq.get(subject, 0))
            if appended.duplicate:
                raise StaleWrite(subject, self.subject_seq.get(subject, 0), "duplicate: already written")
            seq = appended.seq
            self.subject_seq[subject] = appended.seq
        metrics.status(SERVICE).decisions += len(decision.events)
        return seq

    async def _refuse(self, input_type: str, text: str, refused: Refused) -> Reply:
        record = rejection(refused, input_type, text, self.position, self.now)
        await self.log.append([record])
        if metrics.RECORDING:
            metrics.published(SERVICE, [record], None)
        return Reply(ok=False, error=refused.error())

    async def handle_raw(self, op: str, data: bytes) -> Reply:
        """A request as it comes over NATS: the op from the subject, the command as JSON. A request
        for a change that is not a valid command is refused and recorded; a bad query only answered."""
        command = parse_command(op, data)
        if isinstance(command, Refused):
            if op in QUERIES:
                return Reply(ok=False, error=command.error())
            async with self.lock:
                await self.catch_up()
                return await self._refuse(op, data.decode("utf-8", errors="replace")[:INPUT_LIMIT], command)
        return await self.handle(command)

    async def handle_sql(self, data: bytes) -> Reply:
        from services.tree.projection import answer_sql

        found = getattr(getattr(self.log, "nc", None), "max_payload", None)
        return await answer_sql(self.store, data, found if isinstance(found, int) and found > 0 else None)


async def serve_tree(log: EventLog, data_dir: Path | None, *, service: TreeService | None = None,
                     sql_retention: float | None = None, clock: bool = False,
                     task_status: TaskStatus[TreeService] = anyio.TASK_STATUS_IGNORED) -> None:
    """The tree service; with a data dir, its read models in `<data_dir>/tree.duckdb`, keeping
    `sql_retention` seconds of log time of history (None: all of it; `projections/store.py`).
    `clock`: accepted commands are stamped with the wall clock when it is later than the log's
    time (`poolwise up` and `serve`); off, with the log's time (scenario runs, the demo, tests)."""
    store = None
    if data_dir is not None and service is None:
        from projections.event_log import EventLogProjection
        from projections.pool_tree import PoolTreeProjection
        from projections.read_models import read_models

        data_dir.mkdir(parents=True, exist_ok=True)
        store = ProjectionStore(data_dir / "tree.duckdb", [PoolTreeProjection(), EventLogProjection(), *read_models()],
                                retention=sql_retention)
    svc = service or TreeService(log, store, policy_for(log, SERVICE), time if clock else None)
    try:
        async with svc.lock:
            await svc.restore()
            await svc.catch_up()
        start = svc.position if store is None else min(svc.position, store.lowest_checkpoint)
        watched = metrics.status(SERVICE)
        watched.folder, watched.folded = svc, max(watched.folded, svc.position)
        async with anyio.create_task_group() as tg:
            svc.tg = tg
            # every subject: the event_log projection is the whole log (the fold skips the others)
            handler = svc.on_batch if store is None else projecting_behind(tg, svc, store)
            tg.start_soon(lambda: log.consume("tree", subjects.STREAM_SUBJECTS, start, handler, max_batch=BATCH))
            nc = getattr(log, "nc", None)
            if nc is not None:
                await serve_requests(nc, SERVICE, partial(_answer, svc))
            task_status.started(svc)
    finally:
        svc.tg = None
        svc.saves.close()  # (the saves' task group is done: their children reaped, their files closed)
        gc.unfreeze()  # what the folds froze (`gc_paused`), back to the collector (as `run_folder`)
        policy = svc.snapshots
        # a clean stop: keep the view (also when a snapshot started at this position was cancelled
        # with the service before it was stored)
        if policy is not None and policy.unsaved(svc.position):
            with anyio.CancelScope(shield=True), anyio.move_on_after(10):
                await save_snapshot(policy, log, SERVICE, svc.position, svc.now,
                                    pickled_later(svc.view))
        if store is not None:
            store.close()
        metrics.stopped(SERVICE, svc)  # (its entry held the view)


PROJECTION_BACKLOG = 4  # folded batches that may wait for their projections before folding waits
# Seconds from the start of one projection transaction to the start of the next at the soonest: a
# trickle of small batches (an admission cycle's decisions, a few enqueues, tens of times a second)
# is gathered into one transaction, whose statements and commit cost about the same whatever they
# hold; the read models lag the fold by at most this much more. A lone event after a quiet spell
# is written at once; under a steady load there are at most five transactions a second
# (docs/performance.md, session 5: "Projection transactions at most every 0.2 s").
PROJECTION_INTERVAL = 0.2


def projecting_behind(tg: TaskGroup, svc: TreeService, store: ProjectionStore) -> BatchHandler:
    """A consumer handler that folds each batch and leaves its projection to a task of its own:
    batch N is written to DuckDB (on a worker thread) while batch N+1 is folded. A batch is
    acknowledged once folded; the projections' checkpoint is what a restart resumes from
    (`start` above: the lowest of the fold's position and the projections' checkpoints). The
    batches folded while a transaction runs, or within `PROJECTION_INTERVAL` of its start, are
    written together in the next one."""
    send, receive = anyio.create_memory_object_stream[tuple[Sequence[Stored], dict[int, list[Envelope]]]](
        PROJECTION_BACKLOG)

    async def project() -> None:
        started = -math.inf
        async with receive:
            async for batch, decoded in receive:
                # the batches folded meanwhile, or until the interval is over, join this one: one
                # transaction for all of them
                messages, merged = list(batch), dict(decoded)
                await _gather(receive, messages, merged, started + PROJECTION_INTERVAL)
                started = anyio.current_time()
                await anyio.to_thread.run_sync(store.apply_isolating, messages, merged)

    tg.start_soon(project)

    async def handle(batch: Sequence[Stored]) -> None:
        decoded = await svc.fold_consumed(batch)
        svc.snapshot_if_due(tg)
        await send.send((batch, decoded))

    return handle


async def _gather(receive: MemoryObjectReceiveStream[tuple[Sequence[Stored], dict[int, list[Envelope]]]],
                  messages: list[Stored], decoded: dict[int, list[Envelope]], until: float) -> None:
    """Add to `messages` and `decoded` every batch waiting in `receive`, and those that come before
    `until` (on anyio's clock)."""
    while True:
        try:
            try:
                more, more_decoded = receive.receive_nowait()
            except anyio.WouldBlock:
                wait = until - anyio.current_time()
                if wait <= 0:
                    return
                with anyio.move_on_after(wait) as scope:
                    more, more_decoded = await receive.receive()
                if scope.cancelled_caught:
                    return
        except anyio.EndOfStream:
            return
        messages.extend(more)
        decoded.update(more_decoded)


def _answer(svc: TreeService, op: str, data: bytes) -> Awaitable[Reply]:
    return svc.handle_sql(data) if op == "sql" else svc.handle_raw(op, data)
