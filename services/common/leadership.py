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
  thread of its own, on a connection of its own (`LeaseRenewer`), so that a busy event loop (a
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

This module is the election loop (`run_as_leader`); the pieces it runs are modules of their own:
the bucket and the keys (`lease_bucket.py`), one holder's `Lease` (`lease.py`), the fenced
connection of a term (`term_connection.py`) and the renewals' thread (`lease_renewer.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, cast

import anyio
from anyio.abc import TaskStatus
from nats.aio.client import Client as NATS
from nats.js.kv import KeyValue

from services.common.jetstream import JetStreamLog
from services.common.lease import Lease, LeaseLost, YieldTo, new_holder_id
from services.common.lease_bucket import bucket_of
from services.common.lease_renewer import Connect, LeaseRenewer
from services.common.term_connection import TermConnection

__all__ = ["OnChange", "Serve", "Standby", "StandingBy", "run_as_leader"]

_log = logging.getLogger(__name__)


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
    own on that connection (`LeaseRenewer`), so a busy event loop does not cost it; without, by a
    task on this event loop (enough for tests and light services).

    Ready (`task_status.started`) with what the service reported, once it first leads and is
    ready; with `ready_on_standby`, also with a `StandingBy` when the first look finds another
    leader. If the service returns by itself, so does this; if it raises, the error propagates
    (after the lease is released, so a standby takes over). `yield_to`: see `Lease.acquire`."""
    bucket, ttl = await bucket_of(kv)
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
    renewer: LeaseRenewer | None = None
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
                renewer = LeaseRenewer(lease, connect, bucket, lost_elsewhere, lambda: not log.nc.is_closed)
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
