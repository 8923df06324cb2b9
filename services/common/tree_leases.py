"""Leases per tree: every instance of a service holds the leases of a share of the trees.

With `--trees per-tree` (`POOLWISE_LEASES=per-tree`) admission and preemption are not led by one
instance for the deployment (`services.common.leadership`): every instance folds the whole log
and makes every decision (they are functions of the log, so all instances make the same ones),
and publishes those of the trees whose lease it holds (`services.common.tree_gate`). This module
holds the leases, all in the bucket of the service-wide ones (`poolwise_leases`):

- **A tree's lease**: key `lease_key(stream, service, tree)` (`POOLWISE.admission.<tree>`), a
  `Lease` like the service-wide one (create, renew by compare-and-set every TTL/5, valid until
  TTL - TTL/5 after the renewal was sent, released by a compare-and-set delete).
- **Presence**: key `<stream>.<service>.instance.<tag>` (a tree name has no dot, so it cannot be
  taken for a tree's), written by each instance at every renewal round with its holder id, how
  many trees it holds and whether it is ready (its fold has caught up with the log). The
  records expire with the TTL, so a dead instance leaves the count within 2 s.
- **The trees**: every tree the log has a subject for (`poolwise.<kind>.<tree>`; read from the
  stream's subjects every `SUBJECTS_EVERY` s), and what the service learns as it folds and
  decides (`learn`): a tree created later is picked up at its first message.
- **Balance** (`plan`, pure): with n trees and L ready instances, each holds between floor(n/L)
  and ceil(n/L). An instance takes free trees up to ceil(n/L) unless another one is below
  floor(n/L) (then only that one takes); it gives back what it holds beyond ceil(n/L), and the
  most loaded instance gives one back while another is below floor(n/L) (a new instance gets its
  share). A free tree no rule gives anyone (counts seen late) is taken by the least loaded
  instance. Trees are tried in an order of the instance's own (rendezvous hashing), so that
  instances starting together seldom race for the same key; a race is settled by the bucket's
  compare-and-set.
- **Renewals** run on a thread of their own, on a connection of their own (as `LeaseRenewer` does
  for the service-wide lease): a busy fold does not cost the leases. A tree whose renewal is
  refused, or not confirmed before its validity ends, is lost at once (its decisions are kept
  back from then on).
- **Not mixed with a service-wide leader**: while the key `<stream>.<service>` is held (an
  instance running without `--trees per-tree`), per-tree instances hold no tree; and while
  per-tree instances are present, a service-wide instance does not take that key
  (`per_tree_instances`): whichever was there first decides.

The owner (the event loop that runs the service) reads `held()` / `lease(tree)` and waits for
`changed()`; everything else happens on the thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass

import anyio
import nats.errors
from nats.aio.client import Client as NATS
from nats.js.errors import NotFoundError
from nats.js.kv import KeyValue

from events.subjects import NO_TREE, TREE_NAME
from services.common.lease import POLL, Lease
from services.common.lease_bucket import bucket_ttl, lease_key
from services.common.lease_renewer import Connect
from services.common.loop_thread import STOP_RETRY, LoopThread

__all__ = ["MODES", "PER_TREE", "SERVICE_WIDE", "Plan", "TreeLeases", "leases_mode", "per_tree_instances", "plan",
           "tree_of"]

SERVICE_WIDE = "service"
PER_TREE = "per-tree"
MODES = (SERVICE_WIDE, PER_TREE)
RELEASE_WITHIN = 2.0  # seconds a stopping instance spends giving its leases back (else they expire)
SUBJECTS_EVERY = 2.0  # seconds between reads of the stream's subjects (the trees the log has)
PRESENCE = "instance"  # <stream>.<service>.instance.<tag>
# Subjects whose third token names a tree: poolwise.{config,gang,task,clock,rejected}.<tree>,
# poolwise.decision.<tree>.<service>.
TREE_KINDS = frozenset({"config", "gang", "task", "clock", "rejected", "decision"})

_log = logging.getLogger(__name__)
_NATS_ERRORS = (nats.errors.Error, TimeoutError, OSError)


def leases_mode(text: str | None) -> str:
    """`--trees` / `POOLWISE_LEASES`: `service` (the default: one leader per service) or `per-tree`."""
    mode = (text or SERVICE_WIDE).strip().lower()
    if mode not in MODES:
        raise ValueError(f"--trees: {text!r} is not one of {', '.join(MODES)}")
    return mode


def tree_of(subject: str) -> str | None:
    """The tree whose lease covers a log subject (`poolwise.gang.t1` -> t1; `poolwise.hosts` ->
    None). A token that is no tree name (a subject no client of ours writes) counts as `_`, the
    lease of what names no tree: every decision has a lease that can be held."""
    parts = subject.split(".", 3)
    if len(parts) < 3 or parts[1] not in TREE_KINDS:
        return None
    return parts[2] if TREE_NAME.match(parts[2]) else NO_TREE


def presence_key(stream: str, service: str, tag: str) -> str:
    return f"{lease_key(stream, service)}.{PRESENCE}.{tag}"


def _rank(me: str, tree: str) -> bytes:
    """Rendezvous hashing: each instance prefers the trees in an order of its own."""
    return hashlib.blake2b(f"{tree}\0{me}".encode(), digest_size=8).digest()


@dataclass(frozen=True, slots=True)
class Plan:
    take: tuple[str, ...] = ()  # free trees to try, in order
    give: tuple[str, ...] = ()  # held trees to release


def plan(me: str, mine: Collection[str], trees: Collection[str], taken: Collection[str],
         others: Mapping[str, int]) -> Plan:
    """What instance `me` does this round (module doc, "Balance"). `mine`: the trees it holds;
    `trees`: every known tree; `taken`: the trees whose lease someone holds; `others`: the other
    ready instances and how many trees each holds."""
    live = 1 + len(others)
    n = len(trees)
    fair, least = math.ceil(n / live), n // live
    held = len(mine)
    free = sorted((t for t in trees if t not in taken and t not in mine), key=lambda t: _rank(me, t))
    needy = any(count < least for count in others.values())
    if held > fair:
        return Plan(give=tuple(sorted(mine, key=lambda t: _rank(me, t))[fair:]))
    if free and (held < least or (held < fair and not needy)):
        return Plan(take=tuple(free[: fair - held]))
    loads = {**others, me: held}
    if needy and held > least and min(loads, key=lambda who: (-loads[who], who)) == me:
        return Plan(give=(max(mine, key=lambda t: _rank(me, t)),))  # one a round: the needy one takes it
    if free and min(loads, key=lambda who: (loads[who], who)) == me:
        return Plan(take=tuple(free[:1]))  # counts seen late: never leave a tree without a holder
    return Plan()


class TreeLeases:
    """The tree leases of one instance of `service` (module doc). `start()` from the owner's event
    loop; `ready()` once the service's fold has caught up (before, it holds nothing and counts for
    nobody's share); `stop()` releases everything."""

    def __init__(self, connect: Connect, bucket: str, stream: str, service: str, holder: str, *,
                 prefix: str = "poolwise") -> None:
        self.connect = connect
        self.bucket = bucket
        self.stream = stream
        self.service = service
        self.holder = holder
        self.tag = holder.rsplit(":", 1)[-1]
        self.prefix = prefix
        self._leases: dict[str, Lease] = {}  # written by the thread only; read by the owner
        self._known: frozenset[str] = frozenset()
        self._lock = threading.Lock()
        self._ready = False
        self._owner: asyncio.AbstractEventLoop | None = None
        self._event: anyio.Event | None = None
        self._thread = LoopThread(f"tree leases {service}", self._run)
        self.on_change: Callable[[frozenset[str]], None] | None = None  # in the owner's loop
        self.failed: Exception | None = None  # why the thread stopped holding leases, if it did
        self._told: frozenset[str] = frozenset()  # what `on_change` heard last

    # -- the owner's side ------------------------------------------------------------------------

    def start(self) -> None:
        self._owner = asyncio.get_running_loop()
        self._event = anyio.Event()
        self._thread.start()

    def ready(self) -> None:
        self._ready = True

    def held(self) -> frozenset[str]:
        """The trees whose lease this instance holds (valid or in doubt)."""
        return frozenset(tree for tree, lease in list(self._leases.items()) if lease.held)

    def lease(self, tree: str) -> Lease | None:
        found = self._leases.get(tree)
        return found if found is not None and found.held else None

    def learn(self, trees: Iterable[str]) -> None:
        """Trees the service met (in a message, or a decision): each gets a holder."""
        new = set(trees) - self._known
        if new:
            with self._lock:
                first, self._known = not self._known, self._known | new
            if first:
                self._changed()  # (requests: see `tree_gate.while_holding`)

    def known(self) -> frozenset[str]:
        """Every tree met so far (each needs a holder)."""
        return self._known

    async def changed(self) -> None:
        """Return at the next change of the trees held."""
        assert self._event is not None, "start() first"
        await self._event.wait()

    def _notify(self) -> None:  # in the owner's loop
        event, self._event = self._event, anyio.Event()
        if event is not None:
            event.set()
        held = self.held()
        if self.on_change is not None and held != self._told:  # (a first tree learnt wakes, and says nothing)
            self._told = held
            self.on_change(held)

    async def stop(self) -> None:
        """Release every lease and the presence, and wait for the thread to end (a cancellation
        sent again, as `LoopThread` does, only once the release has had its time)."""
        await self._thread.stop(grace=RELEASE_WITHIN + STOP_RETRY)

    # -- the thread ------------------------------------------------------------------------------

    def _changed(self) -> None:
        if self._owner is not None:
            with contextlib.suppress(RuntimeError):  # the owner's loop has ended
                self._owner.call_soon_threadsafe(self._notify)

    async def _run(self) -> None:
        nc: NATS | None = None
        kv: KeyValue | None = None
        try:
            nc = await self.connect()
            kv = await nc.jetstream().key_value(self.bucket)
            await self._keep(nc, kv, await bucket_ttl(kv))
        except asyncio.CancelledError:
            pass
        except Exception as exc:  # cannot hold leases: hold none (the others take the trees over)
            _log.warning("tree leases of %s stopped (%s: %s)", self.service, type(exc).__name__, exc)
            self.failed = exc
            self._changed()  # (the owner stops the service: `run_per_tree`)
        finally:
            leases, self._leases = self._leases, {}  # the owner sees none held from here on
            if leases:
                self._changed()  # (nothing is valid any more: the gate keeps back from now on)
            if kv is not None:
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(self._release(kv, leases.values()), RELEASE_WITHIN)
            if nc is not None:
                with contextlib.suppress(BaseException):
                    await nc.close()

    async def _release(self, kv: KeyValue, leases: Iterable[Lease]) -> None:
        await asyncio.gather(*(lease.release() for lease in leases))
        with contextlib.suppress(*_NATS_ERRORS, NotFoundError):
            await kv.delete(presence_key(self.stream, self.service, self.tag))

    async def _keep(self, nc: NATS, kv: KeyValue, ttl: float) -> None:
        renew_every = ttl / 5
        poll = min(POLL, renew_every)
        next_look = next_subjects = time.monotonic()
        gone: set[str] = set()
        seen_instances: set[str] = set()
        swept = False
        while True:
            now = time.monotonic()
            due = [(tree, lease) for tree, lease in list(self._leases.items()) if lease.next_renewal <= now]
            if due:
                kept = await asyncio.gather(*(lease.renew_or_lose(kv) for _, lease in due))
                lost = [tree for (tree, _), ok in zip(due, kept, strict=True) if not ok]
                for tree in lost:
                    del self._leases[tree]
                if lost:
                    _log.warning("%s: lost the lease of tree(s) %s", self.service, ", ".join(sorted(lost)))
                    self._changed()
            if now >= next_subjects:
                next_subjects = now + SUBJECTS_EVERY
                with contextlib.suppress(*_NATS_ERRORS):
                    self.learn(await self._trees_of_log(nc))
            if now >= next_look:
                next_look = now + poll
                with contextlib.suppress(*_NATS_ERRORS):
                    instances = await self._look(nc, kv, ttl)
                    gone |= seen_instances - set(instances)
                    seen_instances = set(instances)
                    if not swept and self._ready:  # killed before anyone saw them go
                        swept = True
                        gone |= await self._orphans(nc, seen_instances)
                await self._announce(kv)
                if gone:
                    await self._forget_consumers(nc, gone)
                    gone.clear()
            wake = min([next_look, *(lease.next_renewal for lease in self._leases.values())])
            await asyncio.sleep(max(0.0, min(wake - time.monotonic(), renew_every)))

    async def _look(self, nc: NATS, kv: KeyValue, ttl: float) -> list[str]:
        """Read the bucket's keys of this service, act on the plan; the instances present."""
        base = lease_key(self.stream, self.service)
        info = await nc.jetstream().stream_info(f"KV_{self.bucket}", subjects_filter=f"$KV.{self.bucket}.{base}.>")
        subjects = info.state.subjects or {}
        keys = [subject[len(f"$KV.{self.bucket}."):] for subject in subjects]
        taken = {key[len(base) + 1:] for key in keys if key.count(".") == base.count(".") + 1}
        tags = [key.rsplit(".", 1)[-1] for key in keys if key.startswith(f"{base}.{PRESENCE}.")]
        others: dict[str, int] = {}
        for tag in tags:
            if tag == self.tag:
                continue
            with contextlib.suppress(NotFoundError):
                record = _record_of((await kv.get(presence_key(self.stream, self.service, tag))).value)
                if record.get("ready"):
                    held = record.get("held", 0)
                    others[tag] = held if isinstance(held, int) else 0
        if not self._ready:
            return tags
        if len(self._leases) < math.ceil(len(self._known) / (1 + len(others))):
            # wanting more: a key released a moment ago is listed until its delete marker expires
            # (the TTL); it is free already, and the instance that needs it takes it now
            taken = {tree for tree in taken if tree in self._leases or await self._present(kv, tree)}
        if await self._service_wide_leader(kv):
            todo = Plan(give=tuple(self._leases))
        else:
            todo = plan(self.tag, set(self._leases), self._known, taken, others)
        changed = False
        for tree in todo.give:
            lease = self._leases.pop(tree, None)
            if lease is not None:
                changed = True
                await lease.release()
        for tree in todo.take:
            lease = Lease(kv, lease_key(self.stream, self.service, tree), self.holder, ttl=ttl)
            if await lease.try_acquire():
                self._leases[tree] = lease
                changed = True
        if changed:
            _log.info("%s: holds tree(s) %s", self.service, ", ".join(sorted(self._leases)) or "none")
            self._changed()
        return tags

    async def _service_wide_leader(self, kv: KeyValue) -> bool:
        """Whether an instance without per-tree leases leads the service (it decides every tree)."""
        return await self._present(kv, None)

    async def _present(self, kv: KeyValue, tree: str | None) -> bool:
        """Whether the lease of `tree` (None: the service-wide one) is held by anyone."""
        try:
            await kv.get(lease_key(self.stream, self.service, tree))
        except NotFoundError:  # (a delete marker too)
            return False
        return True

    async def _announce(self, kv: KeyValue) -> None:
        record = json.dumps({"holder": self.holder, "held": len(self._leases), "ready": self._ready}).encode()
        with contextlib.suppress(*_NATS_ERRORS):
            await kv.put(presence_key(self.stream, self.service, self.tag), record)

    async def _trees_of_log(self, nc: NATS) -> set[str]:
        info = await nc.jetstream().stream_info(self.stream, subjects_filter=f"{self.prefix}.>")
        return {tree for subject in (info.state.subjects or {}) if (tree := tree_of(subject)) is not None}

    async def _orphans(self, nc: NATS, present: Collection[str]) -> set[str]:
        """The tags of this service's per-instance consumers whose instance is not present."""
        start = consumer_name(self.service, "")
        found = await nc.jetstream().consumers_info(self.stream)
        tags = {info.name[len(start):] for info in found if info.name and info.name.startswith(start)}
        return {tag for tag in tags if _is_tag(tag) and tag not in present and tag != self.tag}

    async def _forget_consumers(self, nc: NATS, tags: Iterable[str]) -> None:
        """Delete the log consumers of instances gone (killed: nobody else would; `tree_gate`)."""
        jsm = nc.jetstream()
        for tag in tags:
            with contextlib.suppress(*_NATS_ERRORS, NotFoundError):
                await jsm.delete_consumer(self.stream, consumer_name(self.service, tag))


async def per_tree_instances(nc: NATS, bucket: str, stream: str, service: str) -> str | None:
    """Who decides `service` per tree, if any instance does (their presence records): a
    service-wide instance does not lead meanwhile (`run_as_leader(yield_to=...)`), as per-tree
    instances hold no tree while a service-wide one leads. Per tree wins: whichever mode was
    there first keeps deciding, and nothing is decided twice when modes are mixed by mistake."""
    base = f"$KV.{bucket}.{presence_key(stream, service, '')}"
    try:
        info = await nc.jetstream().stream_info(f"KV_{bucket}", subjects_filter=f"{base}*")
    except _NATS_ERRORS:
        return None  # (the lease itself is the fence: a bucket out of reach gives no lease either)
    tags = sorted(subject[len(base):] for subject in info.state.subjects or {})
    return f"per-tree instances {', '.join(tags)}" if tags else None


def consumer_name(service: str, tag: str) -> str:
    """The durable consumer an instance of `service` reads the log through in per-tree mode."""
    return f"{service}-{tag}"


def _is_tag(text: str) -> bool:
    return len(text) == 8 and all(c in "0123456789abcdef" for c in text)


def _record_of(value: bytes | None) -> dict[str, object]:
    try:
        record = json.loads(value or b"")
    except (ValueError, UnicodeDecodeError):
        return {}
    return record if isinstance(record, dict) else {}


async def holders(nc: NATS, stream: str, service: str, bucket: str = "poolwise_leases") -> dict[str, str]:
    """Who holds each tree of `service` now (tree -> holder id), and the instances present
    (`instance <tag>` -> what its record says): what an operator asks (`python -m ...`)."""
    js = nc.jetstream()
    kv = await js.key_value(bucket)
    base = lease_key(stream, service)
    prefix = f"$KV.{bucket}."
    info = await js.stream_info(f"KV_{bucket}", subjects_filter=f"{prefix}{base}.>")
    found: dict[str, str] = {}
    for subject in sorted(info.state.subjects or {}):
        key = subject[len(prefix):]
        with contextlib.suppress(NotFoundError):  # (released a moment ago: a delete marker)
            record = _record_of((await kv.get(key)).value)
            name = key[len(base) + 1:].replace(f"{PRESENCE}.", f"{PRESENCE} ", 1)
            held = f", holds {record.get('held')}, {'ready' if record.get('ready') else 'folding'}" \
                if name.startswith(PRESENCE) else ""
            found[name] = f"{record.get('holder', '?')}{held}"
    return found


async def _main() -> None:
    import os

    from events.subjects import STREAM
    from services.common.connection import connect_nats

    nc = await connect_nats(os.environ.get("NATS_URL") or "nats://127.0.0.1:4222")
    try:
        for service in ("admission", "preemption"):
            found = await holders(nc, STREAM, service)
            print(f"{service}: {'per tree' if found else 'no per-tree instance'}")
            for name, holder in found.items():
                print(f"  {name}: {holder}")
    finally:
        await nc.close()


if __name__ == "__main__":  # `NATS_URL=... python -m services.common.tree_leases`: who holds which tree
    anyio.run(_main)
