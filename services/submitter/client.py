"""`Submitter` (async) and `SyncSubmitter`: publish gang and task events to poolwise's log.

Every publish waits for JetStream's acknowledgement (the event is stored, or was already: a
retry of the same call has the same id and is stored once). What admission then decides about
the event (admitted, refused, ...) is on the log and in `poolwise explain GANG`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from types import TracebackType
from typing import Any

import anyio
from anyio.from_thread import BlockingPortal, start_blocking_portal

from events import Envelope, subjects
from services.common.connection import CONNECT_TIMEOUT, connect_nats
from services.common.jetstream import JetStreamLog
from services.common.log import AppendRefused, EventLog
from services.submitter.build import TaskLike, cancel_event, enqueue_event, envelope, task_state_event


class PublishError(RuntimeError):
    """The event could not be stored: NATS is unreachable, or no stream takes its subject."""


@dataclass(frozen=True, slots=True)
class Receipt:
    """Where an event landed: its id, its log position, and whether it was there already (a retry)."""

    id: str
    seq: int
    duplicate: bool
    subject: str


class Submitter:
    """An async client that submits gangs and reports task states.

    Connects on first use (or `await connect()`, or `async with`); `close()` when done.
    `source` is recorded in each envelope (`sdk` by default: say who you are, e.g. `sdk:ci`).
    """

    def __init__(self, nats_url: str | None = None, *, source: str = "sdk", tree: str = "default",
                 connect_timeout: float = CONNECT_TIMEOUT, log: EventLog | None = None) -> None:
        if nats_url is None and log is None:
            raise ValueError("Submitter needs a NATS URL (or an event log)")
        self.nats_url = nats_url
        self.source = source
        self.tree = tree
        self.connect_timeout = connect_timeout
        self._log = log
        self._owned: JetStreamLog | None = None
        self._lock = anyio.Lock()

    # --- connection -----------------------------------------------------------------------------

    async def connect(self) -> Submitter:
        async with self._lock:
            if self._log is None:
                assert self.nats_url is not None
                try:
                    nc = await connect_nats(self.nats_url, name=f"poolwise-{self.source}",
                                            timeout=self.connect_timeout)
                except ConnectionError as exc:
                    raise PublishError(str(exc)) from None
                self._owned = JetStreamLog(nc, owns_connection=True)
                self._log = self._owned
        return self

    async def close(self) -> None:
        async with self._lock:
            owned, self._owned = self._owned, None
            if owned is not None:
                self._log = None
                with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                    await owned.close()

    async def __aenter__(self) -> Submitter:
        return await self.connect()

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    # --- what a submitter says ------------------------------------------------------------------

    async def enqueue(self, *, gang: str, pool: str, tasks: Sequence[TaskLike] | None = None,
                      count: int | None = None, resources: Mapping[str, float] | None = None,
                      size: int | None = None, job: str | None = None, user: str | None = None, priority: int = 0,
                      preemptible: bool = True, revocable: bool = False, controller: bool = False,
                      timeout: float | None = None, tree: str | None = None, first_member: int = 0) -> Receipt:
        """Enqueue members of gang `gang` for leaf pool `pool`: `tasks` (each a `TaskSpec` or a
        mapping with `resources` and optionally `id`), or `count` members needing `resources`
        each, with ids `<gang>/<first_member>`, `<gang>/<first_member + 1>`, ...

        `size` (default: the members given) is how many members must arrive before the gang may
        be admitted: send the others later with the same gang id and size. `job` defaults to the
        gang id, `user` to `anonymous`, `timeout` (seconds to wait for all members, and for all
        to be placed once admitted) to the tree's. Raises `SubmitError` for invalid input and
        `PublishError` when the event cannot be stored."""
        event = enqueue_event(gang=gang, pool=pool, tasks=tasks, count=count, resources=resources, size=size,
                              job=job, user=user, priority=priority, preemptible=preemptible, revocable=revocable,
                              controller=controller, timeout=timeout, tree=tree or self.tree,
                              first_member=first_member)
        (receipt,) = await self.publish([envelope(event, source=self.source)])
        return receipt

    async def enqueue_many(self, gangs: Iterable[Mapping[str, Any]]) -> list[Receipt]:
        """Several `enqueue`s (each a mapping of its keyword arguments), checked first, then
        published together (all or none checked; each stored once)."""
        envelopes = []
        for spec in gangs:
            options = dict(spec)
            options.setdefault("tree", self.tree)
            envelopes.append(envelope(enqueue_event(**options), source=self.source))
        return await self.publish(envelopes)

    async def task_state(self, task: str, gang: str, state: str, *, message: str | None = None,
                         attempt: int | None = None, tree: str | None = None) -> Receipt:
        """Report that task `task` of gang `gang` is now in `state` (`placing`, `placed`,
        `launching`, `running`, `succeeded`, `failed`, `killed`, `lost`, `preempted`).

        The same report sent twice is stored once; pass the gang's `attempt` (from its
        `GangAdmitted`) so that the same state in a later attempt is a new report."""
        event = task_state_event(task=task, gang=gang, state=state, message=message, tree=tree or self.tree)
        (receipt,) = await self.publish([envelope(event, source=self.source, attempt=attempt)])
        return receipt

    async def cancel(self, gang: str, *, reason: str | None = None, tree: str | None = None) -> Receipt:
        """Cancel gang `gang`: its queued members leave the queues, its running tasks are killed."""
        event = cancel_event(gang=gang, reason=reason, tree=tree or self.tree)
        (receipt,) = await self.publish([envelope(event, source=self.source)])
        return receipt

    async def publish(self, envelopes: Sequence[Envelope]) -> list[Receipt]:
        """Append envelopes to the log, acknowledged; ids de-duplicate."""
        if not envelopes:
            return []
        if self._log is None:
            await self.connect()
        assert self._log is not None
        try:
            appended = await self._log.append(envelopes)
        except AppendRefused as exc:
            raise PublishError(f"not stored: {exc.reason} (is poolwise running on {self.nats_url}?)") from None
        except TimeoutError as exc:
            raise PublishError(f"not acknowledged: {exc}") from None
        return [Receipt(e.id, a.seq, a.duplicate, subjects.for_event(e.type, getattr(e.event, "tree", None), e.source))
                for e, a in zip(envelopes, appended, strict=True)]


class SyncSubmitter:
    """`Submitter` for code that is not async: the same methods, blocking (an event loop of its
    own runs in a thread). Use it as a context manager, or call `close()`."""

    def __init__(self, nats_url: str, **options: Any) -> None:
        self._stack = contextlib.ExitStack()
        self._portal: BlockingPortal = self._stack.enter_context(start_blocking_portal(backend="asyncio"))
        self._client = Submitter(nats_url, **options)
        try:
            self._portal.call(self._client.connect)
        except BaseException:
            self._stack.close()
            raise

    def enqueue(self, **options: Any) -> Receipt:
        return self._portal.call(partial(self._client.enqueue, **options))

    def enqueue_many(self, gangs: Iterable[Mapping[str, Any]]) -> list[Receipt]:
        return self._portal.call(self._client.enqueue_many, list(gangs))

    def task_state(self, task: str, gang: str, state: str, **options: Any) -> Receipt:
        return self._portal.call(partial(self._client.task_state, task, gang, state, **options))

    def cancel(self, gang: str, **options: Any) -> Receipt:
        return self._portal.call(partial(self._client.cancel, gang, **options))

    def close(self) -> None:
        try:
            self._portal.call(self._client.close)
        finally:
            self._stack.close()

    def __enter__(self) -> SyncSubmitter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
