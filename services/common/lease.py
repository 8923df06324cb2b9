"""`Lease`: one holder's claim on a key of the lease bucket: acquire, renew, lose, the fence
(`wait_valid`) and release (services/common/leadership.py has the design)."""

from __future__ import annotations

import json
import logging
import os
import secrets
import socket
import time
from collections.abc import Awaitable, Callable

import anyio
import nats.errors
from nats.js.errors import KeyWrongLastSequenceError, NotFoundError
from nats.js.kv import KeyValue

from services.common.lease_bucket import TTL

POLL = 0.5  # seconds between a standby's looks at the key (at most; TTL/5 when that is shorter)
FENCE_POLL = 0.01  # seconds between looks at a lease in doubt, for a publish held at the fence

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

def _holder_of(value: bytes | None) -> str | None:
    try:
        holder = json.loads(value or b"").get("holder")
    except (ValueError, AttributeError, UnicodeDecodeError):
        return None
    return holder if isinstance(holder, str) else None

class Lease:
    """One holder's claim on `name` in `kv` (services/common/leadership.py). Not shared between tasks that
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

    def lose(self) -> None:
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
        self.lose()
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
        self.lose()
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

__all__ = ["FENCE_POLL", "POLL", "Lease", "LeaseLost", "YieldTo", "new_holder_id"]
