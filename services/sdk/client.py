"""`Submitter` (async) and `SyncSubmitter`: publish gang and task events to poolwise's log.

Every publish waits for JetStream's acknowledgement (the event is stored, or was already: a
retry of the same call has the same id and is stored once), for at most the client's `timeout`
(10 s by default): a call made while NATS is gone raises `PublishError` then, and the connection
goes on reconnecting in the background (to any server of the URL list), so a later call succeeds
once NATS is back. What admission then decides about the event (admitted, refused, ...) is on
the log and in `poolwise explain GANG`.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from types import TracebackType
from typing import Any

import anyio
from anyio.from_thread import BlockingPortal, start_blocking_portal
from nats.errors import ConnectionClosedError, MaxPayloadError

from events import Envelope, subjects
from services.common.connection import CONNECT_TIMEOUT, Auth, Tls, Urls, connect_nats, connect_options, shown
from services.common.jetstream import JetStreamLog
from services.common.log import Appended, AppendRefused, EventLog
from services.common.tracing import producing
from services.sdk.build import (
    MAX_PAYLOAD,
    SubmitError,
    TaskLike,
    cancel_event,
    check_size,
    enqueue_event,
    envelope,
    task_state_event,
)

TIMEOUT = 10.0  # seconds a call waits for its events to be stored (a `Submitter` option)


class PublishError(RuntimeError):
    """The event could not be stored: NATS is unreachable, it did not acknowledge within the
    client's timeout, or no stream takes its subject. Retrying is safe (an event is stored once)."""


@dataclass(frozen=True, slots=True)
class Receipt:
    """Where an event landed: its id, its log position, and whether it was there already (a retry)."""

    id: str
    seq: int
    duplicate: bool
    subject: str


class Submitter:
    """An async client that submits gangs and reports task states.

    `nats_url`: one URL, several comma-separated (`nats://n1:4222,nats://n2:4222`), or a list;
    the client connects to any of them, and reconnects to any. Connects on first use (or `await
    connect()`, or `async with`); `close()` when done. `source` is recorded in each envelope
    (`sdk` by default: say who you are, e.g. `sdk:ci`).

    `timeout` (seconds, default 10) is every call's deadline: a call whose events are not
    acknowledged by then (NATS gone, restarted elsewhere, overloaded) raises `PublishError` instead
    of waiting on; the connection keeps reconnecting in the background, so a later call succeeds
    once NATS is back. `connect_timeout` bounds the first connection (within the first call's
    deadline).

    Credentials: a user and password in the URL, or `creds` (a `.creds` file) or `nkey` (a file
    holding a user nkey seed); `tls`: `Tls(ca=..., cert=..., key=...)` (or an `ssl.SSLContext`),
    for servers that require TLS or a `tls://` URL. What is not given is read from `NATS_CREDS`,
    `NATS_NKEY`, `NATS_CA`, `NATS_CERT`, `NATS_KEY` (`services.common.connection.Auth`). A file
    that is missing or not what it should be raises `ValueError` naming it.

    Traces: when the application has installed an OpenTelemetry SDK tracer provider, each event
    published is a span (`enqueue`, `task state`, `cancel`; a child of the current span) whose
    W3C context, when sampled, rides in the envelope's `trace` and the message's headers: the
    gang's trace then runs through admission and preemption (docs/observability.md, "Traces").
    """

    def __init__(self, nats_url: Urls | None = None, *, source: str = "sdk", tree: str = "default",
                 timeout: float = TIMEOUT, connect_timeout: float = CONNECT_TIMEOUT,
                 log: EventLog | None = None, creds: str | None = None, nkey: str | None = None,
                 tls: Tls | ssl.SSLContext | None = None) -> None:
        if nats_url is None and log is None:
            raise ValueError("Submitter needs a NATS URL (or an event log)")
        if not timeout > 0:
            raise ValueError(f"timeout: a deadline in seconds above 0, got {timeout!r}")
        given = Auth(creds=None if creds is None else str(creds), nkey=None if nkey is None else str(nkey), tls=tls)
        if given != Auth():
            try:
                connect_options(given)  # a missing or bad file: said now, naming it
            except ConnectionError as exc:
                raise ValueError(str(exc)) from None
        self._auth: Auth | None = given if given != Auth() else None
        self.nats_url = nats_url
        self.source = source
        self.tree = tree
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self._log = log
        self._owned: JetStreamLog | None = None
        self._lock = anyio.Lock()
        self._refusals: list[str] = []  # the server's permissions violations, as it said them
        self._waiting: set[asyncio.Event] = set()  # publishes that end at the next refusal

    # --- connection -----------------------------------------------------------------------------

    async def connect(self) -> Submitter:
        async with self._lock:
            if self._log is None:
                assert self.nats_url is not None
                try:
                    auth = self._auth.over(Auth.from_env()) if self._auth is not None else None
                    nc = await connect_nats(self.nats_url, name=f"poolwise-{self.source}",
                                            timeout=self.connect_timeout, auth=auth, on_error=self._heard)
                except ConnectionError as exc:
                    raise PublishError(str(exc)) from None
                self._owned = JetStreamLog(nc, owns_connection=True)
                self._log = self._owned
        return self

    async def close(self) -> None:
        """Close the connection (if the client made it), within the client's `timeout`. Nothing
        needs draining: every call returned once its events were acknowledged (a drain waited on
        a server gone a moment ago until its own timeout)."""
        async with self._lock:
            owned, self._owned = self._owned, None
            if owned is not None:
                self._log = None
                with anyio.CancelScope(shield=True), contextlib.suppress(Exception), anyio.move_on_after(self.timeout):
                    await owned.nc.close()

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
        with producing("enqueue", **_about(event)) as carried:
            (receipt,) = await self.publish([envelope(event, source=self.source, trace=carried)])
        return receipt

    async def enqueue_many(self, gangs: Iterable[Mapping[str, Any]]) -> list[Receipt]:
        """Several `enqueue`s (each a mapping of its keyword arguments), checked first, then
        published together (all or none checked; each stored once). Traced: a span per gang (each
        gang's trace starts at its enqueue), ended once all are stored."""
        events = []
        for spec in gangs:
            options = dict(spec)
            options.setdefault("tree", self.tree)
            events.append(enqueue_event(**options))
        with contextlib.ExitStack() as spans:
            envelopes = [envelope(event, source=self.source,
                                  trace=spans.enter_context(producing("enqueue", **_about(event))))
                         for event in events]
            return await self.publish(envelopes)

    async def task_state(self, task: str, gang: str, state: str, *, message: str | None = None,
                         attempt: int | None = None, tree: str | None = None) -> Receipt:
        """Report that task `task` of gang `gang` is now in `state` (`placing`, `placed`,
        `launching`, `running`, `succeeded`, `failed`, `killed`, `lost`, `preempted`).

        The same report sent twice is stored once; pass the gang's `attempt` (from its
        `GangAdmitted`) so that the same state in a later attempt is a new report."""
        event = task_state_event(task=task, gang=gang, state=state, message=message, tree=tree or self.tree)
        with producing("task state", **_about(event), **{"poolwise.task": task, "poolwise.state": state}) as carried:
            (receipt,) = await self.publish([envelope(event, source=self.source, attempt=attempt, trace=carried)])
        return receipt

    async def cancel(self, gang: str, *, reason: str | None = None, tree: str | None = None) -> Receipt:
        """Cancel gang `gang`: its queued members leave the queues, its running tasks are killed."""
        event = cancel_event(gang=gang, reason=reason, tree=tree or self.tree)
        with producing("cancel", **_about(event)) as carried:
            (receipt,) = await self.publish([envelope(event, source=self.source, trace=carried)])
        return receipt

    async def publish(self, envelopes: Sequence[Envelope]) -> list[Receipt]:
        """Append envelopes to the log, acknowledged within the client's `timeout`; ids
        de-duplicate. `SubmitError` (`message_too_large`) for an envelope larger than one message
        holds (nothing is sent); `PublishError` when they are not stored by the deadline."""
        if not envelopes:
            return []
        appended = None
        with anyio.move_on_after(self.timeout):
            log = await self._connected_log()
            limit = self._max_payload(log)
            for item in envelopes:
                check_size(item, limit)  # before anything is sent
            try:
                appended = await self._append(log, envelopes)
            except AppendRefused as exc:
                raise PublishError(f"not stored: {exc.reason} (is poolwise running on {self._where()}?)") from None
            except MaxPayloadError:  # (check_size keeps an envelope under the limit; a server may say less)
                raise SubmitError(f"tasks: a message of these {len(envelopes)} event(s) is above the {limit} bytes "
                                  f"the NATS server takes in one (max_payload) [message_too_large]; send fewer or "
                                  f"smaller ones at a time", field="tasks", rule="message_too_large") from None
            except TimeoutError as exc:  # the log's own bound on an unanswered publish
                raise PublishError(f"not acknowledged by NATS at {self._where()}: {exc}") from None
            except ConnectionClosedError:
                raise PublishError(f"the connection to NATS at {self._where()} is closed") from None
        if appended is None:
            raise PublishError(self._late())
        return [Receipt(e.id, a.seq, a.duplicate, subjects.for_event(e.type, getattr(e.event, "tree", None), e.source))
                for e, a in zip(envelopes, appended, strict=True)]

    async def _heard(self, exc: Exception) -> None:
        """The connection's errors: a permissions violation ends the publishes waiting now (the
        server drops a message this user may not publish, and no acknowledgement ever comes)."""
        text = " ".join(str(exc).split())
        if "permissions violation" in text.lower():
            self._refusals.append(text)
            for waiting in self._waiting:
                waiting.set()

    async def _append(self, log: EventLog, envelopes: Sequence[Envelope]) -> list[Appended]:
        """`log.append`, or `PublishError` as soon as the server refuses this user a subject."""
        refused = asyncio.Event()
        self._waiting.add(refused)
        appending = asyncio.ensure_future(log.append(envelopes))
        watching = asyncio.ensure_future(refused.wait())
        try:
            await asyncio.wait({appending, watching}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._waiting.discard(refused)
            watching.cancel()
            if not appending.done():
                appending.cancel()
        if not refused.is_set() or (appending.done() and not appending.cancelled()):
            return appending.result()  # (stored, or its own error)
        raise PublishError(f"NATS at {self._where()} refused this user: {self._refusals[-1]} (not among its "
                           f"permissions: a tree of another team?)")

    async def _connected_log(self) -> EventLog:
        if self._log is None:
            await self.connect()
        assert self._log is not None
        return self._log

    @staticmethod
    def _max_payload(log: EventLog) -> int:
        """The largest message the log takes: its NATS connection's `max_payload` (the server
        says it on connecting), else nats-server's default (the in-memory log)."""
        nc = getattr(log, "nc", None)
        found = getattr(nc, "max_payload", None) if nc is not None else None
        return found if isinstance(found, int) and found > 0 else MAX_PAYLOAD

    def _where(self) -> str:
        return shown(self.nats_url) if self.nats_url is not None else "the event log"

    def _late(self) -> str:
        """Why a call ran out of time: NATS unreachable (the connection is down), or slow."""
        owned = self._owned
        if self._log is None or (owned is not None and not owned.nc.is_connected):
            return (f"NATS is unreachable at {self._where()}: not stored within {self.timeout:g} s (the client "
                    f"keeps reconnecting in the background; retrying is safe: an event is stored once)")
        return (f"not acknowledged by NATS at {self._where()} within {self.timeout:g} s (it may have been "
                f"stored; retrying is safe: an event is stored once)")


def _about(event: Any) -> dict[str, str]:
    """A submitter span's attributes: the tree and gang (and pool) the event is about."""
    out = {"poolwise.tree": event.tree, "poolwise.gang": event.gang}
    pool = getattr(event, "pool", None)
    if pool is not None:
        out["poolwise.pool"] = pool
    return out


class SyncSubmitter:
    """`Submitter` for code that is not async: the same methods and options (`timeout`: each
    call's deadline), blocking (an event loop of its own runs in a thread). Use it as a context
    manager, or call `close()`."""

    def __init__(self, nats_url: Urls, **options: Any) -> None:
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
