"""One active instance per service, the others standing by (ARCHITECTURE invariant 6); or, per
tree, instances sharing the trees (last paragraph).

Leadership is a **lease** in a JetStream key-value bucket (`poolwise_leases`, TTL 2 s: the
server forgets a record 2 s after it was last written; an existing bucket's TTL is followed, so
a deployment may create it with another). The key names the deployment's stream and the service
(`POOLWISE.admission`); the value names the holder (host, pid, a random tag).

- **Acquire**: `create` the key (it is absent, expired or deleted), or `update` it with
  compare-and-set on its revision when the record there is our own (a renewal whose answer was
  lost). Anything else: another instance leads; stand by and look again every 0.5 s.
- **Renew**: every TTL/5 (0.4 s), `update(key, last=revision)`. A success proves that nobody took
  the key since our last write (any other write, deletion or expiry changes the subject's last
  sequence). The lease is *valid* until TTL - TTL/5 after the renewal was *sent* (1.6 s): before
  the server can forget it, with a margin for the service to stop. The launcher renews from a
  thread of its own, on a connection of its own (`_Renewer`), so that a busy event loop (a
  fold, a rebuild or a cycle can take seconds at scale) does not cost the lease; a frozen
  process loses it, its thread frozen too.
- **Lose**: a renewal refused because the key was deleted or another holder's record is there,
  or no renewal confirmed before validity ends. The service's task group is cancelled at once,
  its subscriptions end with it, and the instance goes back to standing by. A record that merely
  expired (a renewal came too late) with nobody taking it since is taken again, and the service
  goes on: whoever might have held it in between has stopped, and the log has what it did.
- **Fencing**: what a term publishes or requests (decisions, acknowledgements, pull requests,
  consumer changes) goes through a connection that checks the lease first: while validity is in
  doubt (renewals unanswered, a process that was frozen) it waits; once the lease is lost, a
  publish is dropped and a request raises `LeaseLost`. So a paused or partitioned leader
  publishes nothing after its lease could have passed to another instance, even before its task
  group has stopped.
- **Release**: a leader that stops cleanly deletes its record (compare-and-set on the revision),
  so a standby takes over within its next look instead of waiting out the TTL.

`run_as_leader(name, serve, log=..., kv=...)` is what the launcher runs per service: stand by
until the lease is ours, run `serve(term_log, task_status=...)` while it is (on a fenced view of
the log), stop it when the lease is lost and stand by again; a standby does not fold, decide,
consume or answer requests. `on_change` hears `standby`, `leading` (the lease is held and the
service ready) and `lost`. With `standby` (a `Standby`: the launcher's, for admission and
preemption), a standby instance keeps folding the log while it waits (from the newest snapshot,
then as the log grows: `services.common.folding.Warm`), and the term it wins starts from that
fold, caught up already; without, a term rebuilds its state from the log (from the newest
snapshot) when it starts.

Without a key-value store (the in-memory log of the scenario runner and unit tests) there is
nothing to elect: the launcher runs the service directly.

**Per tree** (`--trees per-tree`, `POOLWISE_LEASES=per-tree`; the default stays the one lease
per service described above): admission and preemption instances do not stand by but share the
trees, each holding the leases `lease_key(stream, service, tree)` of a balanced share
(`services.common.tree_leases`: presence records, the balance, renewals on a thread, `Lease` as
above). Every instance folds the whole log and makes every decision; it publishes those of the
trees it holds and keeps the others back until they land or their tree comes to it
(`services.common.tree_gate`: the fence is per tree). The tree service keeps the lease above.
The two modes do not mix: per-tree instances hold no tree while the service-wide key is held,
and a service-wide instance does not take it while per-tree instances are present
(`run_as_leader(yield_to=...)`).
docs/operations.md, "Trees spread over instances", has the design decisions and their limits.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, cast

import anyio
import nats
import nats.errors
from anyio.abc import TaskStatus
from nats.aio.client import Client as NATS
from nats.js.api import KeyValueConfig, StorageType
from nats.js.errors import (
    BadRequestError,
    BucketNotFoundError,
    KeyWrongLastSequenceError,
    NotFoundError,
    ServerError,
)
from nats.js.kv import KeyValue

from services.common.jetstream import DELETE_SETTLE, JetStreamLog
from services.common.loop_thread import LoopThread

__all__ = [
    "BUCKET",
    "TTL",
    "Lease",
    "LeaseLost",
    "StandingBy",
    "TermConnection",
    "bucket_ttl",
    "connector",
    "lease_key",
    "new_holder_id",
    "open_leases",
    "run_as_leader",
]

BUCKET = "poolwise_leases"
# Seconds a record lives after its last write (the bucket's max age): how long a crashed leader's
# lease outlives it, so most of a failover after a kill -9 (a warm standby decides within moments
# of taking over). 2 s: renewals every 0.4 s from a thread of their own, valid 1.6 s; a process
# that holds the GIL longer than that in one call loses its lease (and stands by: fencing keeps it
# from publishing). Was 5 s; a deployment may create the bucket with another TTL.
TTL = 2.0
POLL = 0.5  # seconds between a standby's looks at the key (at most; TTL/5 when that is shorter)
FENCE_POLL = 0.01  # seconds between looks at a lease in doubt, for a publish held at the fence
CREATE_ATTEMPTS = 5  # to create the bucket (see `JetStreamLog.delete_stream` on a server still deleting one)

_log = logging.getLogger(__name__)
_NATS_ERRORS = (nats.errors.Error, TimeoutError, OSError)


# Who else decides the service, if anyone (`run_as_leader(yield_to=...)`): instances sharing its
# trees (`services.common.tree_leases.per_tree_instances`); None: nobody.
YieldTo = Callable[[], Awaitable[str | None]]


class LeaseLost(Exception):
    """The lease is no longer ours: the term that used it must stop deciding."""

    def __init__(self, name: str) -> None:
        super().__init__(f"lease {name} lost: another instance may be deciding")
        self.name = name


def new_holder_id() -> str:
    """`host:pid:tag`: unique per lease holder, even for several in one process."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


def lease_key(stream: str, service: str, tree: str | None = None) -> str:
    """The lease of `service` on the deployment whose log is `stream` (per tree: the scale-out path)."""
    return f"{stream}.{service}" if tree is None else f"{stream}.{service}.{tree}"


async def open_leases(nc: NATS, *, bucket: str = BUCKET, ttl: float = TTL, replicas: int = 1) -> KeyValue:
    """The lease bucket, created (file storage, history 1, records living `ttl` s) if missing.
    An existing bucket is used as it is: `bucket_ttl` reads the TTL the leases must follow."""
    js = nc.jetstream()
    try:
        return await js.key_value(bucket)
    except BucketNotFoundError:
        pass
    config = KeyValueConfig(bucket=bucket, ttl=ttl, history=1, replicas=replicas, storage=StorageType.FILE,
                            description="poolwise leadership leases: one active instance per service")
    for attempt in range(CREATE_ATTEMPTS):
        try:
            return await js.create_key_value(config)
        except BadRequestError:  # created a moment ago by another instance, maybe configured otherwise
            return await js.key_value(bucket)
        except ServerError:  # the server still tidying the files of a bucket deleted a moment ago
            if attempt == CREATE_ATTEMPTS - 1:
                raise
            await anyio.sleep(DELETE_SETTLE * (attempt + 1))
    raise AssertionError("unreachable")


async def bucket_ttl(kv: KeyValue) -> float:
    """How long the bucket keeps a record after its last write; a bucket without one cannot hold leases."""
    return (await _bucket(kv))[1]


async def _bucket(kv: KeyValue) -> tuple[str, float]:
    """The bucket's name and TTL."""
    status = await kv.status()
    ttl = status.stream_info.config.max_age
    if not ttl or ttl <= 0:
        raise ValueError(f"lease bucket {status.bucket} keeps records forever (no TTL): leases could never expire")
    return status.bucket, float(ttl)


def _holder_of(value: bytes | None) -> str | None:
    try:
        holder = json.loads(value or b"").get("holder")
    except (ValueError, AttributeError, UnicodeDecodeError):
        return None
    return holder if isinstance(holder, str) else None


class Lease:
    """One holder's claim on `name` in `kv` (see the module doc). Not shared between tasks that
    acquire: one `acquire`/`keep` loop per lease."""

    def __init__(self, kv: KeyValue, name: str, holder_id: str, *, ttl: float = TTL) -> None:
        self.kv = kv
        self.name = name
        self.holder = holder_id
        self.ttl = ttl
        self.renew_every = ttl / 5
        self.margin = ttl / 5  # validity ends this long before the server may forget the record
        self.request_timeout = ttl / 5
        self.poll = min(POLL, ttl / 5)
        self.revision: int | None = None  # of our record, while we hold the lease
        self.valid_until = 0.0  # time.monotonic() until which nobody else can hold it
        self.leader: str | None = None  # the holder seen last (ours while we hold it)
        self._next_renewal = 0.0
        self._record = json.dumps({"holder": holder_id, "host": socket.gethostname(), "pid": os.getpid(),
                                   "since": round(time.time(), 3)}).encode()

    @property
    def held(self) -> bool:
        return self.revision is not None

    @property
    def valid(self) -> bool:
        """Held, and certainly nobody else's yet (no renewal needed to be sure)."""
        return self.revision is not None and time.monotonic() < self.valid_until

    def _granted(self, revision: int, sent: float) -> None:
        self.revision = revision
        self.leader = self.holder
        self.valid_until = sent + self.ttl - self.margin
        self._next_renewal = sent + self.renew_every

    def _lose(self) -> None:
        self.revision = None
        self.leader = None

    async def try_acquire(self) -> bool:
        """One attempt: True if the lease is ours now."""
        sent = time.monotonic()
        try:
            with anyio.fail_after(self.request_timeout):
                try:
                    entry = await self.kv.get(self.name)
                except NotFoundError:  # absent, expired or deleted
                    revision = await self.kv.create(self.name, self._record)
                else:
                    holder = _holder_of(entry.value)
                    if holder != self.holder:
                        self.leader = holder or "?"
                        return False
                    revision = await self.kv.update(self.name, self._record, last=entry.revision)
        except KeyWrongLastSequenceError:  # another instance was faster
            return False
        except _NATS_ERRORS as exc:
            _log.debug("lease %s: cannot reach the lease bucket (%s); still standing by", self.name, exc)
            return False
        self._granted(revision, sent)
        return True

    async def acquire(self, on_standby: Callable[[str | None], None] | None = None,
                      yield_to: YieldTo | None = None) -> None:
        """Return once the lease is ours; `on_standby(leader)` is called once if it is not at first.
        `yield_to()`: who else decides (per-tree instances of the service), if anyone: the lease
        is not taken meanwhile."""
        while True:
            others = await yield_to() if yield_to is not None else None
            if others is None and await self.try_acquire():
                return
            if others is not None:
                self.leader = others
            if on_standby is not None:
                on_standby(self.leader)
                on_standby = None
            await anyio.sleep(self.poll)

    async def renew(self, kv: KeyValue | None = None) -> bool | None:
        """One compare-and-set renewal (through `kv`, default: the lease's own): True renewed, False
        lost for sure, None not known (no answer, or to be tried again at once)."""
        if self.revision is None:
            return False
        kv = kv or self.kv
        sent = time.monotonic()
        try:
            with anyio.fail_after(self.request_timeout):
                revision = await kv.update(self.name, self._record, last=self.revision)
        except KeyWrongLastSequenceError:
            return await self._after_refusal(kv, sent)
        except _NATS_ERRORS as exc:
            _log.warning("lease %s: renewal got no answer (%s)", self.name, exc)
            return None
        self._granted(revision, sent)
        return True

    async def _after_refusal(self, kv: KeyValue, sent: float) -> bool | None:
        """A refused renewal. The record is ours at a later revision (an earlier renewal landed but
        its answer did not): adopt it and renew from there. It expired and nobody took it since (no
        record, no deletion marker: whoever held it in between has stopped): take it again (True;
        the service goes on, the log has whatever happened meanwhile). Deleted or another's: lost."""
        try:
            with anyio.fail_after(self.request_timeout):
                try:
                    entry = await kv.get(self.name)
                except NotFoundError as exc:
                    if getattr(exc, "op", None) is not None:  # a deletion marker: taken away on purpose
                        return False
                    revision = await kv.create(self.name, self._record)
                    _log.info("lease %s expired while %s held it, taken again", self.name, self.holder)
                    self._granted(revision, sent)
                    return True
        except KeyWrongLastSequenceError:  # another instance took it first
            return False
        except _NATS_ERRORS:
            return None
        if _holder_of(entry.value) != self.holder or entry.revision is None:
            return False
        self.revision = entry.revision  # ours: go on from there
        try:
            with anyio.fail_after(self.request_timeout):
                revision = await kv.update(self.name, self._record, last=entry.revision)
        except KeyWrongLastSequenceError:
            return False
        except _NATS_ERRORS:
            return None
        self._granted(revision, sent)
        return True

    async def keep(self, on_lost: Callable[[], None], kv: KeyValue | None = None,
                   alive: Callable[[], bool] | None = None) -> None:
        """Renew (through `kv`, default: the lease's own) until the lease is lost, or `alive()` says
        the holder cannot work any more; then mark it lost and call `on_lost()` (which should
        cancel whatever runs under the lease). Runs until cancelled or lost."""
        while True:
            await anyio.sleep(max(0.0, self.next_renewal - time.monotonic()))
            if not await self.renew_or_lose(kv, alive is None or alive()):
                on_lost()
                return

    @property
    def next_renewal(self) -> float:
        """When (`time.monotonic()`) the next renewal is due."""
        return self._next_renewal

    async def renew_or_lose(self, kv: KeyValue | None = None, able: bool = True) -> bool:
        """One renewal (`able` false: the holder cannot work any more, so none): False once the
        lease is lost (marked so), True while it is held, renewed or still valid (an unanswered
        renewal is tried again soon). What `keep` does each time a renewal is due; several leases
        renewed by one loop (`services.common.tree_leases`) call it themselves."""
        renewed = await self.renew(kv) if able else False
        if renewed:
            return True
        if renewed is None and time.monotonic() < self.valid_until:
            self._next_renewal = time.monotonic() + self.renew_every / 4
            return True
        _log.info("lease %s lost by %s", self.name, self.holder)
        self._lose()
        return False

    async def wait_valid(self) -> None:
        """Return while the lease is certainly ours; wait while that is in doubt; raise `LeaseLost`
        once it is lost (the fence in front of everything a term publishes). Polls: the lease may
        be renewed from another thread, and doubt is rare (renewals unanswered for seconds)."""
        while True:
            if self.revision is None:
                raise LeaseLost(self.name)
            if time.monotonic() < self.valid_until:
                return
            await anyio.sleep(FENCE_POLL)

    async def release(self) -> None:
        """Give the lease up (delete our record if it is still ours), so a standby need not wait out
        the TTL. Best effort: a record left behind expires."""
        revision = self.revision
        self._lose()
        if revision is None:
            return
        try:
            with anyio.fail_after(self.request_timeout):
                entry = await self.kv.get(self.name)
                if _holder_of(entry.value) == self.holder and entry.revision is not None:
                    revision = max(revision, entry.revision)  # a renewal that landed as it was stopped
                    await self.kv.delete(self.name, last=revision)
        except Exception as exc:  # gone already, or another's; else it expires
            _log.debug("lease %s: release: %s", self.name, exc)


class TermConnection:
    """The NATS connection as one leadership term sees it: publishes and requests pass the lease's
    fence (`Lease.wait_valid`), and every subscription made through it ends with the term
    (`end()`), so a standby answers no requests and runs no consumers. Anything else is the
    connection's own."""

    def __init__(self, nc: NATS, lease: Lease) -> None:
        self._nc = nc
        self._lease = lease
        self._subscriptions: list[Any] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._nc, name)

    async def publish(self, *args: Any, **kwargs: Any) -> None:
        """Publish while the lease is certainly ours (wait while in doubt). Once it is lost, drop
        it: the term is being stopped, and whoever waits for an answer is cancelled with it (a
        subscription callback too: `end()`), so raising would only make noise in those callbacks."""
        if not self._lease.valid:
            try:
                await self._lease.wait_valid()
            except LeaseLost:
                return
        await self._nc.publish(*args, **kwargs)

    async def request(self, *args: Any, **kwargs: Any) -> Any:
        if not self._lease.valid:
            await self._lease.wait_valid()
        return await self._nc.request(*args, **kwargs)

    async def subscribe(self, *args: Any, **kwargs: Any) -> Any:
        subscription = await self._nc.subscribe(*args, **kwargs)
        self._subscriptions.append(subscription)
        return subscription

    async def end(self) -> None:
        """Unsubscribe everything the term subscribed (their running callbacks are cancelled)."""
        subscriptions, self._subscriptions = self._subscriptions, []
        for subscription in subscriptions:
            try:
                await subscription.unsubscribe()
            except Exception as exc:  # already gone (the service unsubscribed it, or the connection closed)
                _log.debug("term subscription: %s", exc)


Connect = Callable[[], Awaitable[NATS]]


def connector(servers: str | list[str], name: str = "poolwise-lease") -> Connect:
    """A way to open a connection of its own to `servers` (for a lease's renewals)."""

    async def connect() -> NATS:
        from services.common.connection import connect_options, nats_servers, quietly  # (one URL, or several)

        return await nats.connect(nats_servers(servers), name=name, max_reconnect_attempts=-1, error_cb=quietly,
                                  **connect_options())  # the service's credentials and TLS (its environment)

    return connect


def servers_of(nc: NATS) -> list[str]:
    """The URLs `nc` knows (with their credentials, when they were given in the URL)."""
    return [server.geturl() for server in nc.servers]


class _Renewer:
    """Renews a held lease from a thread of its own, on an event loop and a NATS connection of its
    own (`LoopThread`), so that a busy event loop (a long fold, rebuild or cycle: seconds at scale)
    does not cost the lease. A frozen or partitioned process still loses it: the thread stops with
    it; and so does one whose own connection is closed for good (`alive()` false: it could not
    work). `on_lost` is called from that thread."""

    def __init__(self, lease: Lease, connect: Connect, bucket: str, on_lost: Callable[[], None],
                 alive: Callable[[], bool]) -> None:
        self._lease = lease
        self._alive = alive
        self._connect = connect
        self._bucket = bucket
        self._on_lost = on_lost
        self._thread = LoopThread(f"lease {lease.name}", self._run)

    def start(self) -> None:
        self._thread.start()

    async def _run(self) -> None:
        nc: NATS | None = None
        try:
            nc = await self._connect()
            kv = await nc.jetstream().key_value(self._bucket)
            await self._lease.keep(self._on_lost, kv, self._alive)
        except asyncio.CancelledError:
            pass  # stopped
        except Exception as exc:  # cannot renew: as good as lost
            _log.warning("lease %s: renewals stopped (%s: %s)", self._lease.name, type(exc).__name__, exc)
            self._lease._lose()
            self._on_lost()
        finally:
            if nc is not None:
                try:
                    await nc.close()
                except (Exception, asyncio.CancelledError) as exc:  # cancelled again while closing: done anyway
                    _log.debug("lease %s: closing the renewals' connection: %r", self._lease.name, exc)

    async def stop(self) -> None:
        """Stop renewing (the lease stays as it is) and wait for the thread to end."""
        await self._thread.stop()


@dataclass(frozen=True, slots=True)
class StandingBy:
    """What `run_as_leader` reports ready with when it starts as a standby."""

    name: str
    leader: str | None


Serve = Callable[..., Awaitable[None]]  # serve(log, *, task_status)
# (lease name, "leading" (holds the lease and the service is ready) | "standby" | "lost", holder)
OnChange = Callable[[str, str, str | None], None]


async def run_as_leader(
    name: str,
    serve: Serve,
    *,
    log: JetStreamLog,
    kv: KeyValue,
    connect: Connect | None = None,
    holder_id: str | None = None,
    ready_on_standby: bool = False,
    on_change: OnChange | None = None,
    standby: Standby | None = None,
    yield_to: YieldTo | None = None,
    task_status: TaskStatus[Any] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Stand by until the lease `name` is ours, run `serve(term_log, task_status=...)` while it is
    (`term_log`: the log on a `TermConnection`), stop it when the lease is lost and stand by
    again; until cancelled. The lease is released on the way out.

    With `connect` (a way to open a NATS connection), the lease is renewed from a thread of its
    own on that connection (`_Renewer`), so a busy event loop does not cost it; without, by a
    task on this event loop (enough for tests and light services).

    Ready (`task_status.started`) with what the service reported, once it first leads and is
    ready; with `ready_on_standby`, also with a `StandingBy` when the first look finds another
    leader. If the service returns by itself, so does this; if it raises, the error propagates
    (after the lease is released, so a standby takes over). `yield_to`: see `Lease.acquire`."""
    bucket, ttl = await _bucket(kv)
    lease = Lease(kv, name, holder_id or new_holder_id(), ttl=ttl)
    reported = False

    def changed(state: str, holder: str | None) -> None:
        if on_change is not None:
            on_change(name, state, holder)

    def standing_by(leader: str | None) -> None:
        changed("standby", leader)
        if ready_on_standby:
            ready(StandingBy(name, leader))

    def ready(value: Any) -> None:
        nonlocal reported
        if not reported:
            reported = True
            task_status.started(value)

    try:
        while True:
            warm = standby.new() if standby is not None else None
            async with anyio.create_task_group() as waiting:
                if standby is not None:  # a warm standby: fold the log while another leads
                    waiting.start_soon(_keep_warm, standby, warm, log)
                await lease.acquire(standing_by, yield_to)
                waiting.cancel_scope.cancel()
            usable = warm if warm is not None and not getattr(warm, "broken", False) else None
            if await _term(lease, serve, log, bucket, connect, changed, ready, usable):
                return
            await anyio.sleep(lease.poll)  # lost: look again in a moment (with a fold made afresh)
    finally:
        with anyio.CancelScope(shield=True):
            await lease.release()


class Standby(Protocol):
    """What a warm standby folds while another instance leads (`services.common.folding.Warm`):
    `new()` makes the fold of one standby period, `follow(warm, log)` keeps it caught up with the
    log until cancelled; the term that follows is served with it (`serve(..., warm=warm)`)."""

    def new(self) -> Any: ...

    async def follow(self, warm: Any, log: JetStreamLog) -> None: ...


async def _keep_warm(standby: Standby, warm: Any, log: JetStreamLog) -> None:
    try:
        await standby.follow(warm, log)
    except Exception as exc:  # a fold that failed is not trusted: the term starts from the log
        _log.warning("standby fold stopped (%s: %s); on takeover the service folds the log itself",
                       type(exc).__name__, exc)
        warm.broken = True


async def _term(lease: Lease, serve: Serve, log: JetStreamLog, bucket: str, connect: Connect | None,
                changed: Callable[[str, str | None], None], ready: Callable[[Any], None],
                warm: Any = None) -> bool:
    """Run the service while `lease` holds; True if it returned by itself, False if the lease was lost."""
    connection = TermConnection(log.nc, lease)
    term_log = JetStreamLog(cast(NATS, connection), stream=log.stream, prefix=log.prefix)
    renewer: _Renewer | None = None
    finished = ended = False
    try:
        async with anyio.create_task_group() as term:
            loop = asyncio.get_running_loop()

            def lost() -> None:
                if not ended:  # (a loss told from the renewals' thread may arrive late)
                    changed("lost", lease.holder)
                    term.cancel_scope.cancel()

            async def run(*, task_status: TaskStatus[Any]) -> None:
                nonlocal finished
                await serve(term_log, task_status=task_status, **({} if warm is None else {"warm": warm}))
                finished = True
                term.cancel_scope.cancel()

            def lost_elsewhere() -> None:  # from the renewals' thread
                with contextlib.suppress(RuntimeError):  # this loop has ended: nothing left to stop
                    loop.call_soon_threadsafe(lost)

            if connect is None:
                term.start_soon(lease.keep, lost)
            else:
                renewer = _Renewer(lease, connect, bucket, lost_elsewhere, lambda: not log.nc.is_closed)
                renewer.start()
            value = await term.start(run)
            changed("leading", lease.holder)  # and serving
            ready(value)
    except* LeaseLost:
        pass  # a fenced call noticed first; the renewals have cancelled the term
    finally:
        ended = True
        with anyio.CancelScope(shield=True):
            if renewer is not None:
                await renewer.stop()
            await connection.end()
    return finished
