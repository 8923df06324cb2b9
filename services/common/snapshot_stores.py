"""Where snapshots are kept: the `SnapshotStore` protocol, its JetStream object store
(`ObjectStoreSnapshots`: one object per snapshot, `<stream>.<service>.<seq>`, and one per id run
or filter a snapshot names, `<stream>.id-runs.<key>`, replicated with the log so that a new machine
finds them) and its in-memory twin (`MemorySnapshots`); which of a service's snapshots a save
leaves behind to delete (`to_delete`: the newest `KEEP` are kept) and which stored runs no
snapshot names any more (`unreferenced`, kept `RUN_GRACE` first)."""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

import anyio
import anyio.lowlevel

from services.common.snapshot_encoding import Corrupt, Snapshot, runs_named
from services.tree.domain.used_ids import IdFilter, Run

log = logging.getLogger(__name__)

KEEP = 3  # snapshots kept per service (the newest)
RUNS = "id-runs"  # run objects: `<stream>.id-runs.<key>`
RUN_GRACE = 600.0  # seconds a run object no snapshot names is kept (one may be being saved)
# seconds after a save's second look before a last one, when a run it names was stored long ago
# enough for another process's collection to take it (`ObjectStoreSnapshots.save`)
LATE_LOOK = 2.0
BUCKET = "poolwise_snapshots"
CREATE_ATTEMPTS = 5  # tries at making the bucket (`ObjectStoreSnapshots._created`)


class SnapshotStore(Protocol):
    async def save(self, service: str, seq: int, data: bytes, runs: Mapping[str, Run | IdFilter] | None = None) -> None:
        """Keep the snapshot `data` and the runs it names (`runs`: by key, those the store lacks
        are stored, once each); then delete the snapshots `to_delete` names and the runs no
        snapshot kept names."""
        ...

    async def store_runs(self, runs: Mapping[str, Run | IdFilter]) -> list[str]:
        """Store those of `runs` the store lacks, ahead of a snapshot that will name them (so that
        its save, a clean stop's above all, has little left to store): the keys stored now."""
        ...

    async def candidates(self, service: str) -> list[int]:
        """The positions of the service's snapshots, newest first."""
        ...

    async def fetch(self, service: str, seq: int) -> bytes | None: ...

    async def fetch_run(self, key: str) -> bytes | None: ...


def unreferenced(stored: Sequence[str], referenced: set[str]) -> list[str]:
    return [key for key in stored if key not in referenced]


def to_delete(positions: Sequence[int], saved: int) -> list[int]:
    """What a save at `saved` leaves behind to delete, of the service's snapshots at `positions`:
    every one after it (a log's position only grows, so those were made from another log, one
    deleted and made again under the stream's name, or were passed over; kept, they would push
    this log's snapshots out), and all but the newest `KEEP` at or before it."""
    after = [seq for seq in positions if seq > saved]
    kept = sorted((seq for seq in positions if seq <= saved), reverse=True)
    return after + kept[KEEP:]


class MemorySnapshots:
    """Snapshots in a dict (the in-memory log's twin; tests)."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, int], bytes] = {}
        self.runs: dict[str, bytes] = {}  # by key

    async def save(self, service: str, seq: int, data: bytes, runs: Mapping[str, Run | IdFilter] | None = None) -> None:
        await self.store_runs(runs or {})
        self.objects[(service, seq)] = data
        for old in to_delete(await self.candidates(service), seq):
            del self.objects[(service, old)]
        referenced: set[str] = set()
        for kept in self.objects.values():
            with contextlib.suppress(Corrupt):
                referenced.update(runs_named(Snapshot.header(kept)))
        for key in unreferenced(list(self.runs), referenced):
            del self.runs[key]

    async def store_runs(self, runs: Mapping[str, Run | IdFilter]) -> list[str]:
        new = [key for key in runs if key not in self.runs]
        for key in new:
            self.runs[key] = b"".join(runs[key].byte_chunks())
        return new

    async def candidates(self, service: str) -> list[int]:
        return sorted((s for name, s in self.objects if name == service), reverse=True)

    async def fetch(self, service: str, seq: int) -> bytes | None:
        return self.objects.get((service, seq))

    async def fetch_run(self, key: str) -> bytes | None:
        return self.runs.get(key)


class ObjectStoreSnapshots:
    """Snapshots in a JetStream object store (`BUCKET`), names `<stream>.<service>.<seq>`."""

    def __init__(self, js: Any, stream: str, bucket: str = BUCKET, replicas: int = 1, *,
                 read_only: bool = False) -> None:
        self.js = js
        self.stream = stream
        self.bucket = bucket
        self.replicas = replicas
        self.read_only = read_only  # a reader (replay, time travel) makes no bucket: the services do
        self._store: Any = None

    async def opened(self) -> Any:
        """The bucket's object store, created (with `replicas`) if it does not exist yet, unless
        `read_only` (then a missing bucket raises nats' `BucketNotFoundError`/`NotFoundError`)."""
        if self._store is None:
            from nats.js.api import ObjectStoreConfig, StorageType
            from nats.js.errors import BucketNotFoundError, NotFoundError

            try:
                self._store = await self.js.object_store(self.bucket)
            except (BucketNotFoundError, NotFoundError):
                if self.read_only:
                    raise
                self._store = await self._created(ObjectStoreConfig(
                    description="poolwise: snapshots of the services' folded state",
                    storage=StorageType.FILE, replicas=self.replicas))
        return self._store

    async def _created(self, config: Any) -> Any:
        """The bucket made. A bucket deleted a moment before (by an operator, or a test starting
        clean) may still be going on the server, which then answers "error creating store for
        stream" (500): asked again a few times before that is the answer."""
        from nats.js.errors import ServerError

        for attempt in range(CREATE_ATTEMPTS):
            try:
                return await self.js.create_object_store(self.bucket, config=config)
            except ServerError:
                if attempt == CREATE_ATTEMPTS - 1:
                    raise
                await anyio.sleep(0.2 * (attempt + 1))
        raise AssertionError("unreachable")

    def _name(self, service: str, seq: int) -> str:
        return f"{self.stream}.{service}.{seq}"

    def _run_name(self, key: str) -> str:
        return f"{self.stream}.{RUNS}.{key}"

    async def _infos(self) -> list[Any]:
        from nats.js.errors import NotFoundError

        obs = await self.opened()
        try:
            return list(await obs.list(ignore_deletes=True))
        except NotFoundError:  # an empty store
            return []

    async def save(self, service: str, seq: int, data: bytes, runs: Mapping[str, Run | IdFilter] | None = None) -> None:
        """The runs first (those not stored yet), then the snapshot naming them in its description
        (what `_collect` reads, without fetching a snapshot), then those of its runs gone
        meanwhile put again, then the deletions.

        A run stored as it sealed (`store_runs_as_they_seal`) may be older than `RUN_GRACE` when
        the snapshot naming it is saved: another process's `_collect` that listed the bucket
        before the snapshot was there deletes it. So once the snapshot is put (from then on it
        keeps its runs from every collection that lists after it) the bucket is listed again and
        what it names and lacks is put again. Within the process, run uploads and collections are
        one at a time (`_uploads`; not the snapshot's put, so that the services' clean stops do not
        wait for one another's): a collection there runs wholly before that second look (which
        then puts again what it deleted) or after it (and sees the snapshot). Another process's
        collection has its own lock: one that listed before the put may delete after the second
        look, so when a run named was stored long ago (half of `RUN_GRACE`) the bucket is looked
        at once more `LATE_LOOK` seconds later. A collection slower than that still leaves the
        snapshot naming a run that is gone until the service's next save puts it again; a start
        meanwhile passes that snapshot over (an older one, or the whole log: never a wrong state)."""
        from nats.js.api import ObjectMeta

        obs = await self.opened()
        runs = runs or {}
        keys = sorted(runs)
        long_stored: list[str] = []
        async with _uploads(self.bucket):
            await self._put_missing(runs, long_stored)
        await obs.put(self._name(service, seq), data, meta=ObjectMeta(description=f"runs: {' '.join(keys)}"))
        async with _uploads(self.bucket):
            again = await self._put_missing(runs)
        if long_stored:
            # A collection in another process that listed before the snapshot was put may delete
            # after the look above (its lock is its own): a run it could take (older than half
            # the grace when listed here) is looked for once more, later.
            await anyio.sleep(LATE_LOOK)
            async with _uploads(self.bucket):
                again += await self._put_missing(runs)
        if again:
            log.warning("%s@%d: id runs deleted while it was saved, stored again: %s", service, seq,
                        " ".join(again))
        async with _uploads(self.bucket):
            for old in to_delete(await self.candidates(service), seq):
                try:
                    await obs.delete(self._name(service, old))
                except Exception as exc:  # an old one left over is tidied up by the next save
                    log.debug("snapshot %s@%d not deleted: %s", service, old, exc)
            await self._collect(set(keys))

    async def store_runs(self, runs: Mapping[str, Run | IdFilter]) -> list[str]:
        """Those of `runs` not in the bucket, put there (a run no snapshot names yet is kept
        `RUN_GRACE` by `_collect`, and put again by the save that names it if it was deleted).
        One upload at a time per bucket in the process (`_uploads`): each service's look
        (`store_runs_as_they_seal`) offers every run alive in the process, and two puts of one
        object at once leave the loser's chunks in the bucket for good (nats-py purges only the
        chunks of the object it found before its put)."""
        if not runs:
            return []
        async with _uploads(self.bucket):
            return await self._put_missing(runs)

    async def _put_missing(self, runs: Mapping[str, Run | IdFilter], old: list[str] | None = None) -> list[str]:
        """Those of `runs` not in the bucket, put there (under `_uploads`); those stored longer
        ago than half of `RUN_GRACE` added to `old` if given."""
        if not runs:
            return []
        obs = await self.opened()
        infos = {str(info.name): info for info in await self._infos()}
        if old is not None:
            now = datetime.now(UTC)
            old.extend(key for key in runs if self._run_name(key) in infos
                       and _age(infos[self._run_name(key)], now) >= RUN_GRACE / 2)
        stored = infos.keys()
        new = [key for key in runs if self._run_name(key) not in stored]
        for key in new:
            run = runs[key]
            reader = getattr(run, "reader", None)
            await obs.put(self._run_name(key), reader() if reader is not None else b"".join(run.byte_chunks()))
        return new

    async def _collect(self, keep: set[str]) -> None:
        """Delete the run objects no snapshot of this stream names (nor `keep`), once older than
        `RUN_GRACE` (another service may be between storing its runs and its snapshot: its save
        puts again what this deleted once its snapshot is there). Under `_uploads`."""
        obs = await self.opened()
        infos = await self._infos()
        runs_prefix = f"{self.stream}.{RUNS}."
        snapshot = f"{self.stream}."
        referenced = set(keep)
        stored: dict[str, Any] = {}
        for info in infos:
            name = str(info.name)
            if name.startswith(runs_prefix):
                stored[name[len(runs_prefix):]] = info
            elif name.startswith(snapshot) and name.rsplit(".", 1)[-1].isdigit():
                description = str(getattr(info, "description", "") or "")
                if description.startswith("runs:"):
                    referenced.update(description[len("runs:"):].split())
        now = datetime.now(UTC)
        for key in unreferenced(list(stored), referenced):
            if _age(stored[key], now) < RUN_GRACE:
                continue
            try:
                await obs.delete(self._run_name(key))
            except Exception as exc:  # tidied up by the next save
                log.debug("id run %s not deleted: %s", key, exc)

    async def candidates(self, service: str) -> list[int]:
        from nats.js.errors import NotFoundError

        obs = await self.opened()
        prefix = f"{self.stream}.{service}."
        try:
            infos: Sequence[Any] = await obs.list(ignore_deletes=True)
        except NotFoundError:  # an empty store
            return []
        found = []
        for info in infos:
            name = str(info.name)
            if name.startswith(prefix) and name[len(prefix):].isdigit():
                found.append(int(name[len(prefix):]))
        return sorted(found, reverse=True)

    async def fetch(self, service: str, seq: int) -> bytes | None:
        from nats.js.errors import NotFoundError

        obs = await self.opened()
        # Into a buffer: without one nats-py joins the chunks with `bytes +=`, a copy of all so far
        # per 128 KiB chunk, quadratic in the snapshot's size (docs/performance.md, "Id record and
        # snapshots (session 18)").
        buffer = io.BytesIO()
        try:
            await obs.get(self._name(service, seq), writeinto=buffer)
        except NotFoundError:
            return None
        return buffer.getvalue()

    async def fetch_run(self, key: str) -> bytes | None:
        from nats.js.errors import NotFoundError

        obs = await self.opened()
        buffer = io.BytesIO()
        try:
            await obs.get(self._run_name(key), writeinto=buffer)
        except NotFoundError:
            return None
        return buffer.getvalue()


_UPLOADS: anyio.lowlevel.RunVar[dict[str, anyio.Lock]] = anyio.lowlevel.RunVar("snapshot_uploads")


def _uploads(bucket: str) -> anyio.Lock:
    """The process's one lock on `bucket`'s run uploads and collections (per event loop: a lock
    belongs to one), shared by every service's store of it."""
    try:
        locks = _UPLOADS.get()
    except LookupError:
        locks = {}
        _UPLOADS.set(locks)
    return locks.setdefault(bucket, anyio.Lock())


def _age(info: Any, now: datetime) -> float:
    """Seconds since an object was stored (unknown: old)."""
    try:
        return (now - datetime.fromisoformat(str(info.mtime).replace("Z", "+00:00"))).total_seconds()
    except (TypeError, ValueError):
        return float("inf")
