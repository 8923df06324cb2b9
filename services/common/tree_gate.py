"""A service instance that decides per tree: the log as it sees it (`TreeGate`), and its run
(`run_per_tree`). See `services.common.tree_leases` for the leases and how trees are shared.

Every instance folds the whole log and makes every decision: a decision is a function of the log
(its id too: service, basis, tree, what), so all instances make the same ones, in the same order,
whichever holds a tree. The gate lets through those of the trees whose lease this instance holds
and keeps the others (`pending`, in the order made) until they are seen in the log (published by
the tree's holder) or the lease comes to this instance: then what is still missing goes out
first, before anything newer of that tree. So a tree whose holder dies mid-cycle is taken over
by an instance that has decided the same cycle already and publishes the rest of it; a decision
that both publish is one message (the same id: JetStream's duplicate window), whatever packs
group them (a pack is one cycle's run of decisions, the same for every instance).

- **Fencing per tree**: a decision of tree T is sent only while T's lease is valid; while it is
  in doubt (renewals unanswered) the append waits; once lost, the decision is kept back. A send
  that the connection delays past the lease's end can land after the next holder's copy of it:
  the same id, stored once.
- **Inputs** the service appends (the clock's ticks) go through: a tick is an input, not a
  decision, and whoever sends it the fold treats it alike.
- **Reading**: each instance consumes the log through a durable consumer of its own
  (`<service>-<tag>`: instances must not share one), which it deletes when it stops; one left by
  a killed instance is deleted by the others when its presence expires. It also reads the refusal
  subjects, so that a refusal published by another instance drops the kept copy.
- **Trees**: every tree met in a message read, or in a decision made, is learnt by the leases.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Sequence
from functools import partial
from itertools import chain, count
from operator import itemgetter
from typing import Any

import anyio
from anyio.abc import TaskStatus
from nats.aio.client import Client as NATS

from events import Envelope
from events.subjects import NO_TREE
from services.common.folding import ids_in
from services.common.jetstream import JetStreamLog
from services.common.lease import LeaseLost, new_holder_id
from services.common.lease_renewer import Connect
from services.common.log import Appended, BatchHandler, Stored
from services.common.memlog import envelope_subject, subject_filter
from services.common.requests import Answer
from services.common.tree_leases import PRESENCE, TreeLeases, consumer_name, holders, tree_of

__all__ = ["LeasesFailed", "TreeGate", "naming_holders", "run_per_tree", "while_holding", "work_line"]


class TreeGate(JetStreamLog):
    """The log of one per-tree instance (module doc): appends pass the tree leases, consuming
    goes through the instance's own consumer."""

    def __init__(self, log: JetStreamLog, leases: TreeLeases, consumer: str) -> None:
        super().__init__(log.nc, stream=log.stream, prefix=log.prefix)
        self.leases = leases
        self.consumer = consumer
        # tree -> id -> (when made, decision): kept back, per tree (a tree's go out together)
        self.pending: dict[str, dict[str, tuple[int, Envelope]]] = {}
        self._made = count()
        self._lock = anyio.Lock()  # appends in order: what was kept goes out before what is newer

    async def append(self, envelopes: Sequence[Envelope]) -> list[Appended]:
        """Send the inputs, and the decisions of the trees held (after what was kept of them); keep
        the others. Returns where the sent ones of `envelopes` landed, in order."""
        async with self._lock:
            trees: set[str] = set()
            for envelope in envelopes:
                if envelope.basis is not None:
                    tree = tree_of(envelope_subject(envelope)) or NO_TREE
                    trees.add(tree)
                    self.pending.setdefault(tree, {}).setdefault(envelope.id, (next(self._made), envelope))
            self.leases.learn(trees)
            sent = await self._send_held()
            out: list[Appended] = []
            inputs = [e for e in envelopes if e.basis is None]
            if inputs:
                out = await super().append(inputs)
            return [*[sent[e.id] for e in envelopes if e.id in sent], *out]

    async def flush(self) -> None:
        """Send what is kept of the trees held now (a tree just taken over)."""
        async with self._lock:
            await self._send_held()

    async def _send_held(self) -> dict[str, Appended]:
        """Send the kept decisions of the trees whose lease is valid (waiting while one is in
        doubt), in the order made; they leave `pending`. Under the lock."""
        ready: list[tuple[int, Envelope]] = []
        for tree in list(self.pending):
            lease = self.leases.lease(tree)
            if lease is None:
                continue
            try:
                await lease.wait_valid()
            except LeaseLost:
                continue
            ready += self.pending[tree].values()
        if not ready:
            return {}
        ordered = [envelope for _, envelope in sorted(ready, key=itemgetter(0))]  # the order made
        landed = await super().append(ordered)
        for envelope in ordered:
            self._drop(envelope.id, tree_of(envelope_subject(envelope)) or NO_TREE)
        return {e.id: where for e, where in zip(ordered, landed, strict=True)}

    def _drop(self, event_id: str, tree: str) -> None:
        kept = self.pending.get(tree)
        if kept is not None and kept.pop(event_id, None) is not None and not kept:
            del self.pending[tree]

    def kept(self) -> list[Envelope]:
        """The decisions kept back, in the order made: a snapshot saves them as its `pending`
        (they are not in the log yet; `services.common.snapshots.policy_for`)."""
        kept = chain.from_iterable(of_tree.values() for of_tree in self.pending.values())
        return [envelope for _, envelope in sorted(kept, key=itemgetter(0))]

    def _landed(self, batch: Sequence[Stored]) -> None:
        """Drop what is kept and seen in the log (only the messages of trees with something kept
        are looked into: a pack's ids need its decoding)."""
        pending = self.pending
        if not pending:
            return
        for stored in batch:
            tree = tree_of(stored.subject)
            if tree is not None and tree in pending:
                for seen in ids_in((stored,)):
                    self._drop(seen, tree)

    async def consume(self, durable: str, subjects: Sequence[str], after_seq: int, handler: BatchHandler, *,
                      max_batch: int = 1000, linger: float = 0.0) -> None:
        """The service's consumer, as this instance's own (`<durable>-<tag>`), also reading the
        refusals (for what is kept); the handler gets what it asked for."""
        wanted = subject_filter(tuple(subjects))
        refusals = f"{self.prefix}.rejected.*"
        learn = self.leases.learn

        async def seen(batch: Sequence[Stored]) -> None:
            self._landed(batch)
            learn({tree for stored in batch if (tree := tree_of(stored.subject)) is not None})
            asked = [stored for stored in batch if wanted(stored.subject)]
            if asked:
                await handler(asked)

        read = (*subjects, refusals) if refusals not in subjects else tuple(subjects)  # (no filter twice)
        await super().consume(self.consumer, read, after_seq, seen, max_batch=max_batch,
                              linger=linger)


async def while_holding(leases: TreeLeases, serve: Callable[[], Coroutine[Any, Any, Any]]) -> None:
    """Run `serve()` while this instance holds a tree (cancelled when it holds none), until
    cancelled: requests are answered by instances that hold a lease, which proves they are in
    touch with NATS (their fold is the whole log's, whatever tree is asked about); and by every
    instance while there is no tree yet (nothing to hold: `poolwise gangs` says there is none)."""

    def answering() -> bool:
        return bool(leases.held()) or not leases.known()

    while True:
        while not answering():
            await leases.changed()
        async with anyio.create_task_group() as serving:
            serving.start_soon(serve)
            while answering():
                await leases.changed()
            serving.cancel_scope.cancel()


HOLDERS_EVERY = 0.5  # seconds an answer's `holders` may be old (a look at the leases: a request per tree)


def naming_holders(gate: TreeGate, answer: Answer) -> Answer:
    """`answer`, its reply naming who decides the tree asked about (every tree, if none is named):
    `holders`, tree -> holder id (`host:pid:tag`). Every per-tree instance folds every tree (the
    others' cycles read from the log: `services.admission.held_trees`), so whichever instance the
    request reaches answers it from its own fold, as of the position the reply names (`seq`), and
    says which instance decides the tree (whose fold may be a cycle ahead)."""
    looked: list[tuple[float, dict[str, str]]] = []

    async def current() -> dict[str, str]:
        if not looked or time.monotonic() - looked[0][0] > HOLDERS_EVERY:
            found: dict[str, str] = {}
            with contextlib.suppress(Exception), anyio.move_on_after(1.0):  # (an answer without them, else)
                found = {tree: holder for tree, holder in (await holders(
                    gate.nc, gate.stream, gate.leases.service, gate.leases.bucket)).items()
                    if not tree.startswith(PRESENCE)}
            looked[:] = [(time.monotonic(), found)]
        return looked[0][1]

    async def answering(op: str, data: bytes) -> Any:
        found = await current()  # (before the answer, which is built between two folds)
        reply = answer(op, data)
        if inspect.isawaitable(reply):
            reply = await reply
        if reply.ok and isinstance(reply.data, dict):
            tree = _tree_asked(data)
            reply.data["holders"] = {tree: found.get(tree)} if tree is not None else found
        return reply

    return answering


def _tree_asked(data: bytes) -> str | None:
    with contextlib.suppress(ValueError, UnicodeDecodeError, AttributeError):
        tree = json.loads(data or b"{}").get("tree")
        return tree if isinstance(tree, str) else None
    return None


Serve = Callable[..., Coroutine[Any, Any, None]]  # serve(log, *, task_status, trees=...)
OnTrees = Callable[[str, frozenset[str], str], None]  # (service, trees held, holder)


async def run_per_tree(service: str, serve: Serve, *, log: JetStreamLog, bucket: str, connect: Connect,
                       on_trees: OnTrees | None = None, holder_id: str | None = None,
                       task_status: TaskStatus[Any] = anyio.TASK_STATUS_IGNORED) -> None:
    """Run `service` as one instance of several sharing the trees, until cancelled: `serve(gate,
    trees=leases, task_status=...)` folds and decides from the start (a warm instance even while
    it holds no tree); the leases are taken once it is ready. `on_trees(service, held, holder)`
    hears each change of the trees held. Ready with what the service reported."""
    holder = holder_id or new_holder_id()
    leases = TreeLeases(connect, bucket, log.stream, service, holder, prefix=log.prefix)
    gate = TreeGate(log, leases, consumer_name(service, leases.tag))
    if on_trees is not None:
        leases.on_change = lambda held: on_trees(service, held, holder)
    leases.start()
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_flush_on_change, gate, leases)
            value = await tg.start(partial(serve, gate, trees=leases))
            leases.ready()
            if on_trees is not None:
                on_trees(service, leases.held(), holder)  # deciding per tree, holding none yet
            task_status.started(value)
    finally:
        with anyio.CancelScope(shield=True):
            await leases.stop()
            await _delete_consumer(log.nc, log.stream, gate.consumer)


def work_line(what: str, decided: Counter[str], read: Counter[str]) -> str:
    """What an instance deciding per tree has done so far, as it says on stderr: `what` (admission
    cycles, preemption passes) decided here and read from the log, per tree."""
    def counts(counter: Counter[str]) -> str:
        return ", ".join(f"{tree} {n}" for tree, n in sorted(counter.items())) or "none"

    return f"poolwise: {what} decided here: {counts(decided)}; read from the log: {counts(read)}"


class LeasesFailed(Exception):
    """The tree leases' thread stopped (it holds nothing any more): the service stops, to be started
    again (by `poolwise up`'s supervisor, systemd, Kubernetes), rather than fold on holding nothing."""


async def _flush_on_change(gate: TreeGate, leases: TreeLeases) -> None:
    while True:
        await leases.changed()
        if leases.failed is not None:
            raise LeasesFailed(f"{leases.service}: the tree leases stopped: {leases.failed}") from leases.failed
        await gate.flush()


async def _delete_consumer(nc: NATS, stream: str, name: str) -> None:
    with contextlib.suppress(Exception), anyio.move_on_after(2.0):  # else the others delete it
        await nc.jetstream().delete_consumer(stream, name)
