"""Snapshots of a service's folded state: a cache of the fold, never a source.

A snapshot is what a folder held after folding the log through position `seq`, with the
decisions it had made then that were not known to be in the log yet (`pending`), and the
`fingerprint` of the code that made it. A service starts from the newest snapshot whose
fingerprint is its own and folds only the tail after `seq`; one that is missing, corrupt, or made
by other code is passed over, and with none left the service folds the log from the start. So a
snapshot can make a start faster, never make a state different: the state from a snapshot and
its tail equals the state from the whole log (`tests/snapshots/`).

On JetStream snapshots live in the object store `poolwise_snapshots` (one object per snapshot,
`<stream>.<service>.<seq>`), replicated with the log, so a new machine finds them; the newest
`KEEP` of each service are kept. The in-memory log's twin is `MemorySnapshots`.

What goes in (`Snapshot.encode`): a header line of JSON (format, service, seq, fingerprint, the
payload's length and CRC), then the payload: the pickled state, zlib-compressed. A state exported
as a tuple (admission's: its fold and explain's notes) is pickled part by part (`pickled`,
`Parts`), so that a reader that needs one part loads only that one (`decode(part=)`: the what-if
folds admission's state without the notes). A header or CRC that does not match, or a payload
that does not load, is "corrupt". It loads with the garbage collector off: a state is tens of
objects per gang kept, and the collector's passes while they were made took two thirds of the
time.

The fingerprint is a digest of all of poolwise's own source (`events/` and `services/`, every
`.py` file), the Python version and the versions of the libraries whose objects a pickled state
holds or whose behaviour a fold depends on: any change to the code makes older snapshots unusable
(they are folded past, not trusted). All the source, not a list of what a fold runs: a list kept
by hand misses the module a fold starts to import one day, and a snapshot that loads but folds
differently is the one failure a cache must not have; the price is one fold from the start after
an upgrade that touched only, say, the CLI.
"""

from __future__ import annotations

import contextlib
import contextvars
import copyreg
import gc
import hashlib
import importlib.metadata
import io
import json
import logging
import pickle
import sys
import zlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import IO, Any, Protocol

import anyio
import anyio.lowlevel

from events import Envelope
from services.common.id_runs import FileFilter, FileRun
from services.tree.domain import used_ids
from services.tree.domain.used_ids import IdFilter, Run

log = logging.getLogger(__name__)

# 2: a tuple state's parts pickled apart (`Parts`); 3: the id record's runs stored apart, named by
# key in the header (`runs`). An older snapshot is passed over.
FORMAT = 3
KEEP = 3  # snapshots kept per service (the newest)
RUNS = "id-runs"  # run objects: `<stream>.id-runs.<key>`
RUN_GRACE = 600.0  # seconds a run object no snapshot names is kept (one may be being saved)
BUCKET = "poolwise_snapshots"
CREATE_ATTEMPTS = 5  # tries at making the bucket (`ObjectStoreSnapshots._created`)
_ROOT = Path(__file__).resolve().parents[2]
_PACKAGES = ("events", "services")  # all of poolwise's source a service runs
_LIBRARIES = ("numpy", "pydantic", "pydantic-core", "msgspec")  # in a pickled state, or in how a fold decodes


@cache
def code_fingerprint() -> str:
    """A digest of poolwise's source, the Python version and the libraries' versions (computed
    once, on first use: it reads every source file)."""
    digest = hashlib.sha256(f"format {FORMAT}; python {sys.version_info[:2]}".encode())
    for library in _LIBRARIES:
        digest.update(f"{library} {_version(library)}".encode())
    for package in _PACKAGES:
        for file in sorted((_ROOT / package).rglob("*.py")):
            digest.update(str(file.relative_to(_ROOT)).encode())
            digest.update(file.read_bytes())
    return digest.hexdigest()[:32]


def _version(library: str) -> str:
    try:
        return importlib.metadata.version(library)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


class Corrupt(Exception):
    """A snapshot that cannot be read back."""


@dataclass(slots=True)
class Snapshot:
    service: str
    seq: int  # the last log position folded into `state`
    fingerprint: str
    state: Any  # what the folder exported (`Snapshotting.export`)
    pending: list[Envelope] = field(default_factory=list)  # decided, not known to be in the log
    anchor: int | None = None  # CRC-32 of the log's message at `seq`: the log it was made from

    def encode(self) -> bytes:
        return self.encode_pickled(self.service, self.seq, self.fingerprint, pickled(self.state), self.pending,
                                   self.anchor)

    @staticmethod
    def encode_pickled(service: str, seq: int, fingerprint: str, state: bytes,
                       pending: Sequence[Envelope] = (), anchor: int | None = None) -> bytes:
        """A snapshot of a state pickled already by `pickled` (pickling must happen while the
        state stands still; compressing need not)."""
        runs, optional, body = named_in(state)
        payload = zlib.compress(pickle.dumps((body, list(pending)), protocol=pickle.HIGHEST_PROTOCOL), 1)
        # "runs": every stored object it names (what a save stores and a collection keeps);
        # "optional": those of them a start may do without (the id records' filters)
        header = {"format": FORMAT, "service": service, "seq": seq, "fingerprint": fingerprint,
                  "length": len(payload), "crc": zlib.crc32(payload), "anchor": anchor,
                  "runs": runs + optional, "optional": optional}
        data = json.dumps(header, sort_keys=True).encode() + b"\n" + payload
        if Snapshot.header(data) != header:  # (not saved: a snapshot that does not read back is none)
            raise Corrupt("its header does not read back")
        return data

    @staticmethod
    def header(data: bytes) -> dict[str, Any]:
        """The header line's fields. It has no size limit: it names every run of the state (~36
        bytes each), and a limit (there was one of 64 KiB) made a state with many runs (1,900:
        a few hundred trees' records) a snapshot no start could read."""
        end = data.find(b"\n")
        if end < 0:
            raise Corrupt("no header")
        try:
            found = json.loads(data[:end])
        except ValueError as exc:
            raise Corrupt(f"header: {exc}") from None
        if not isinstance(found, dict) or found.get("format") != FORMAT:
            raise Corrupt(f"format {found.get('format') if isinstance(found, dict) else found!r}, not {FORMAT}")
        return found

    @classmethod
    def decode(cls, data: bytes, part: int | None = None,
               runs: Mapping[str, Run | IdFilter] | None = None, *, freeze: bool = False) -> Snapshot:
        """The snapshot in `data`; with `part`, its state is only that part of a state exported as
        a tuple (the others are not loaded; a state stored whole is its own part 0). The runs its
        header names come from `runs`, else from the runs this process has (`RunStore.local`:
        `load_newest` fetches the others first); a run not found makes it corrupt (a filter not
        found is made again from the runs).

        `freeze`: what is alive once it loaded is frozen (`gc.freeze`), for a service that keeps
        the state as long as it runs and unfreezes it when it stops (`folding._restore`); without
        it (a replay, the what-if, a test) nothing is frozen, so nothing stays out of the
        collector's reach after the state is let go."""
        head = cls.header(data)
        found = dict(runs or {})
        optional = set(optional_named(head))
        for key in runs_named(head):
            if key not in found:
                run = used_ids.current_store().local(key)
                if run is None and key not in optional:
                    raise Corrupt(f"id run {key} not found")
                if run is not None:
                    found[key] = run
        payload = data[data.index(b"\n") + 1:]
        if len(payload) != head.get("length") or zlib.crc32(payload) != head.get("crc"):
            raise Corrupt("payload length or CRC does not match its header")
        collecting = gc.isenabled()
        gc.disable()  # a state is ~20 objects per gang kept: collections while it loaded took 2/3 of the load
        try:
            stored, pending = pickle.loads(zlib.decompress(payload))
            state = _unpickled(_loads(stored, found), part, found)
        except Exception as exc:  # a payload that does not load is as good as none
            raise Corrupt(f"payload: {type(exc).__name__}: {exc}") from None
        finally:
            if freeze:
                # The state lives as long as its folder: frozen, the collector's next passes do not
                # walk it (each pass would cost in proportion to the gangs kept), as the folds
                # freeze what they keep (`folding.gc_paused`). Before the collector is on again:
                # its first pass would walk all of it.
                gc.freeze()
            if collecting:
                gc.enable()
        anchor = head.get("anchor")
        return cls(str(head["service"]), int(head["seq"]), str(head["fingerprint"]), state, list(pending),
                   anchor if isinstance(anchor, int) else None)


class Parts:
    """A state exported as a tuple, each part pickled apart (`pickled`)."""

    __slots__ = ("pickled",)

    def __init__(self, pickled: list[bytes]) -> None:
        self.pickled = pickled

    def __reduce__(self) -> tuple[type[Parts], tuple[list[bytes]]]:
        return (Parts, (self.pickled,))


_RUNS_LINE = b"runs:"


def pickled_naming_files(value: object) -> bytes:
    """`value` pickled whole (a plain pickle's way) but for its runs and filters in files
    (`FileRun`, `FileFilter`): their keys, named on a first line, as a snapshot names them. For
    another process that can read the same files (`unpickled_from_files`): a plain pickle would
    carry every run's arrays, and that process would hold them in its heap."""
    runs: set[str] = set()
    filters: set[str] = set()
    out = io.BytesIO()
    _Pickler(out, runs, filters, (FileRun,), (FileFilter,)).dump(value)
    named = [*sorted(runs), *(_OPTIONAL + key for key in sorted(filters))]
    return _RUNS_LINE + " ".join(named).encode() + b"\n" + out.getvalue()


def unpickled_from_files(data: bytes, store: used_ids.RunStore) -> Any:
    """What `pickled_naming_files` made, its runs and filters taken from `store` (`local`: the
    files of the directory they were in). Corrupt if a run is not there; a filter that is not is
    left out (its record makes it again from the runs)."""
    runs, optional, body = named_in(data)
    found: dict[str, Run | IdFilter] = {}
    for key in runs + optional:
        run = store.local(key)
        if run is None and key not in optional:
            raise Corrupt(f"id run {key} not found")
        if run is not None:
            found[key] = run
    return _loads(body, found)


class _Pickler(pickle.Pickler):
    """A pickler that writes each id run (`used_ids.Run`) and stored filter (`used_ids.IdFilter`)
    as its key: a snapshot refers to them, stored apart once each (`SnapshotStore.save`), so that
    it does not grow with them. (Through the dispatch table, looked up by type in C: a
    `persistent_id` method would be a Python call for every object of the state, and pickling
    took up to twice as long.)"""

    def __init__(self, file: IO[bytes], runs: set[str], filters: set[str],
                 run_types: tuple[type, ...] | None = None, filter_types: tuple[type, ...] | None = None) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.runs, self.filters = runs, filters
        table = dict(copyreg.dispatch_table)
        for kind in _RUN_TYPES if run_types is None else run_types:
            table[kind] = self._reduce_run
        for other in _FILTER_TYPES if filter_types is None else filter_types:
            table[other] = self._reduce_filter
        self.dispatch_table = table

    def _reduce_run(self, run: Run) -> tuple[Any, tuple[str]]:
        self.runs.add(run.key)
        return (_run_named, (run.key,))

    def _reduce_filter(self, found: IdFilter) -> tuple[Any, tuple[str]]:
        self.filters.add(found.key)
        return (_filter_named, (found.key,))


_RESOLVING: contextvars.ContextVar[Mapping[str, Run | IdFilter] | None] = contextvars.ContextVar("runs",
                                                                                                default=None)


def _run_named(key: str) -> Run | IdFilter:
    """The run a snapshot names (while `_loads` loads it)."""
    runs = _RESOLVING.get()
    if runs is None or key not in runs:
        raise pickle.UnpicklingError(f"id run {key} is not among the snapshot's")
    return runs[key]


def _filter_named(key: str) -> IdFilter | None:
    """The filter a snapshot names, or None if it was not found (the record makes it again)."""
    found = (_RESOLVING.get() or {}).get(key)
    return found if isinstance(found, _FILTER_TYPES) else None


_RUN_TYPES = (used_ids.MemoryRun, FileRun)
_FILTER_TYPES = (used_ids.MemoryFilter, FileFilter)


def _dumps(state: object, runs: set[str], filters: set[str]) -> bytes:
    out = io.BytesIO()
    _Pickler(out, runs, filters).dump(state)
    return out.getvalue()


def _loads(data: bytes, runs: Mapping[str, Run | IdFilter]) -> Any:
    token = _RESOLVING.set(runs)
    try:
        return pickle.loads(data)
    finally:
        _RESOLVING.reset(token)


def pickled(state: object) -> bytes:
    """`state` pickled as a snapshot holds it: a tuple part by part (`Parts`), anything else whole;
    its id runs and filters as their keys, named on a first line (`named_in`: a filter's key after
    `_OPTIONAL`)."""
    runs: set[str] = set()
    filters: set[str] = set()
    if isinstance(state, tuple):
        state = Parts([_dumps(one, runs, filters) for one in state])
    body = _dumps(state, runs, filters)
    named = [*sorted(runs), *(_OPTIONAL + key for key in sorted(filters))]
    return _RUNS_LINE + " ".join(named).encode() + b"\n" + body


_OPTIONAL = "?"


def named_in(data: bytes) -> tuple[list[str], list[str], bytes]:
    """The keys of the runs a `pickled` state names, of the filters (optional), and the pickle."""
    if not data.startswith(_RUNS_LINE):
        return [], [], data  # (pickled by other means: names no runs)
    end = data.index(b"\n")
    keys = data[len(_RUNS_LINE):end].decode().split()
    return ([key for key in keys if not key.startswith(_OPTIONAL)],
            [key[len(_OPTIONAL):] for key in keys if key.startswith(_OPTIONAL)], data[end + 1:])


def split_pickled(data: bytes) -> tuple[list[str], bytes]:
    """The keys of every stored object (runs and filters) a `pickled` state names, and the pickle."""
    runs, optional, body = named_in(data)
    return runs + optional, body


def runs_named(head: Mapping[str, Any]) -> list[str]:
    """The keys of the runs (and filters) a snapshot's header names."""
    return _keys(head, "runs")


def optional_named(head: Mapping[str, Any]) -> list[str]:
    """The keys of those a start may do without (filters: made again from the runs)."""
    return _keys(head, "optional") if "optional" in head else []


def _keys(head: Mapping[str, Any], name: str) -> list[str]:
    keys = head.get(name)
    if not isinstance(keys, list) or not all(isinstance(key, str) for key in keys):
        raise Corrupt(f"its header's {name} are not a list of keys")
    return keys


def _unpickled(stored: object, part: int | None, runs: Mapping[str, Run | IdFilter]) -> Any:
    """The state `pickled` made (`stored`: loaded once), whole or only its `part`."""
    if not isinstance(stored, Parts):
        if part is not None and isinstance(stored, tuple):  # a tuple pickled whole (not by `pickled`)
            return stored[part]
        if part not in (None, 0):
            raise Corrupt(f"no part {part}: the state is stored whole")
        return stored
    if part is None:
        return tuple(_loads(one, runs) for one in stored.pickled)
    return _loads(stored.pickled[part], runs)


class Snapshotting(Protocol):
    """A folder that can hand out its state and take one back (in place: the service's other
    parts, the clock and the query handlers, keep their references to it)."""

    def export(self) -> Any: ...

    def load(self, state: Any) -> None: ...


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


Anchored = Callable[[int, int | None], Awaitable[bool]]


async def load_newest(store: SnapshotStore, service: str, fingerprint: str | None = None, at_most: int | None = None,
                      anchored: Anchored | None = None, part: int | None = None, *,
                      freeze: bool = False) -> tuple[Snapshot | None, list[str]]:
    """The newest usable snapshot of `service` (at or before `at_most`), and why the newer ones
    were passed over. `anchored(seq, anchor)` says whether the log holds, at `seq`, the message
    the snapshot was made after (a stream deleted and made again under the same name does not).
    `part`: only that part of its state is loaded; `freeze`: what it loaded frozen, for a
    service that unfreezes it when it stops (`Snapshot.decode`)."""
    fingerprint = fingerprint or code_fingerprint()
    skipped: list[str] = []
    try:
        positions = await store.candidates(service)
    except Exception as exc:  # no store, or the server would not list it: fold from the start
        return None, [f"snapshots not listed: {type(exc).__name__}: {exc}"]
    for seq in positions:
        if at_most is not None and seq > at_most:
            continue
        try:
            data = await store.fetch(service, seq)
            if data is None:
                skipped.append(f"{service}@{seq}: gone")
                continue
            head = Snapshot.header(data)
            if head.get("fingerprint") != fingerprint:
                skipped.append(f"{service}@{seq}: made by other code ({head.get('fingerprint')})")
                continue
            snapshot = Snapshot.decode(data, part, await runs_for(store, runs_named(head), optional_named(head)),
                                       freeze=freeze)
        except Corrupt as exc:
            skipped.append(f"{service}@{seq}: corrupt ({exc})")
            continue
        except Exception as exc:
            skipped.append(f"{service}@{seq}: not read ({type(exc).__name__}: {exc})")
            continue
        if snapshot.service != service or snapshot.seq != seq:
            skipped.append(f"{service}@{seq}: names {snapshot.service}@{snapshot.seq}")
            continue
        if anchored is not None and not await anchored(seq, snapshot.anchor):
            skipped.append(f"{service}@{seq}: made from another log (its message at {seq} differs)")
            continue
        return snapshot, skipped
    return None, skipped


async def runs_for(store: SnapshotStore, keys: Sequence[str], optional: Sequence[str] = ()
                   ) -> dict[str, Run | IdFilter]:
    """The runs (and filters) named `keys`: from this process's run store (its files:
    `services.common.id_runs`, each checked against its key), else fetched from the snapshot store
    once and kept there. Corrupt if a run is in neither, or fetched does not match its key; an
    `optional` one (a filter) is left out instead, with a warning, whatever kept it from being
    fetched (a network error too: the start makes it from the runs rather than fail)."""
    runs = used_ids.current_store()
    found: dict[str, Run | IdFilter] = {}
    for key in keys:
        try:
            run = runs.local(key)
            if run is None:
                data = await store.fetch_run(key)
                if data is None:
                    raise Corrupt(f"id run {key} is gone")
                try:
                    run = runs.adopt(key, data)
                except ValueError as exc:
                    raise Corrupt(f"id run {key}: {exc}") from None
        except Exception as exc:  # (a filter not fetched, for whatever reason: made again from the runs)
            if key not in optional:
                raise
            log.warning("id filter not used (made again from the runs): %s: %s", type(exc).__name__, exc)
            continue
        found[key] = run
    return found


def runs_to_save(pickling: object, keys: Sequence[str]) -> dict[str, Run | IdFilter]:
    """The runs (and filters) a pickled state names, by key: those held since it was pickled
    (`Pickling.runs`), else those this process's store has; Corrupt if one is gone (merged away
    and deleted: the snapshot is not saved, the next one is)."""
    held = {run.key: run for run in getattr(pickling, "runs", ())}
    stores = used_ids.stores_in_use()  # (a record may seal into a store of its own: a replay's)
    found: dict[str, Run | IdFilter] = {}
    for key in keys:
        run = held.get(key) or next((one for store in stores if (one := store.local(key)) is not None), None)
        if run is None:
            raise Corrupt(f"id run {key} is gone")
        found[key] = run
    return found


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
        then puts again what it deleted) or after it (and sees the snapshot)."""
        from nats.js.api import ObjectMeta

        obs = await self.opened()
        runs = runs or {}
        keys = sorted(runs)
        async with _uploads(self.bucket):
            await self._put_missing(runs)
        await obs.put(self._name(service, seq), data, meta=ObjectMeta(description=f"runs: {' '.join(keys)}"))
        async with _uploads(self.bucket):
            again = await self._put_missing(runs)
            if again:
                log.warning("%s@%d: id runs deleted while it was saved, stored again: %s", service, seq,
                            " ".join(again))
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

    async def _put_missing(self, runs: Mapping[str, Run | IdFilter]) -> list[str]:
        """Those of `runs` not in the bucket, put there (under `_uploads`)."""
        if not runs:
            return []
        obs = await self.opened()
        stored = {str(info.name) for info in await self._infos()}
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


@dataclass(slots=True)
class SnapshotPolicy:
    """When a service snapshots its state: after `every` log positions folded since the last one,
    or `seconds` of log time with at least `least` positions, and when it stops cleanly.

    `last_seq`/`last_time`: where the last snapshot was started (what `due` counts from);
    `saved`: the newest position known to be kept, a snapshot stored (or where the service
    started). They differ while a snapshot is being saved, and for good when that save fails or is
    cancelled with the service: a clean stop right after a snapshot was started must still save
    (`unsaved`), or the stop leaves nothing."""

    store: SnapshotStore
    every: int = 100_000
    seconds: float = 600.0
    least: int = 1_000
    last_seq: int = 0
    last_time: float = 0.0
    saved: int = 0
    # The decisions made and kept back from the log (an instance deciding per tree keeps those of
    # trees it does not hold: `services.common.tree_gate`): saved as the snapshot's `pending`.
    kept: Callable[[], Sequence[Envelope]] | None = None

    def due(self, folded: int, now: float) -> bool:
        since = folded - self.last_seq
        return (since >= self.every or (since >= self.least and now - self.last_time >= self.seconds)) \
            and self.fold_settled()

    def fold_settled(self) -> bool:
        """Whether the fold's state is the fold's through the position it stands at (every
        predicate that lets a snapshot be saved, `due`, `due_folding_again` and `unsaved`, asks
        it, so that a policy overriding it alone, `WhenSettled`, holds on every save path)."""
        return True

    def started(self, folded: int, now: float, restored: int | None = None) -> None:
        """The service starts with its state at `folded`, made from a snapshot at `restored` (0: from
        the start of the log; None: the snapshot is at `folded`) and the log after it. What was
        folded after that snapshot is not kept until a snapshot is saved: a clean stop saves it,
        and the next batch does when the rebuild folded `every` positions or more. (Counting a
        rebuild as saved left a quiet system, after an upgrade passed its snapshots over, folding
        the whole history again at every start: a 1M-gang log restarted in minutes.)"""
        saved = folded if restored is None else restored
        self.last_seq, self.last_time, self.saved = saved, now, saved

    def due_folding_again(self, folded: int) -> bool:
        """Whether a rebuild (the log folded again after a start) snapshots at `folded`: every
        `every` positions only (its log time runs far faster than the clock's)."""
        return folded - self.last_seq >= self.every and self.fold_settled()

    def unsaved(self, folded: int) -> bool:
        """Whether a clean stop at `folded` has state to keep (not whether one was started there)."""
        return folded > self.saved and self.fold_settled()


def policy_for(log: Any, service: str) -> SnapshotPolicy | None:
    """The snapshot policy of a service on `log`: on JetStream, the object store of the log's
    server, every `POOLWISE_SNAPSHOT_EVERY` positions (default 100,000; 0 turns snapshots off);
    None on other logs."""
    import os

    every = int(os.environ.get("POOLWISE_SNAPSHOT_EVERY", "100000") or 0)
    nc, stream = getattr(log, "nc", None), getattr(log, "stream", None)  # a JetStream log (or a wrapper of one)
    if nc is None or not isinstance(stream, str) or every <= 0:
        return None
    from nats.js import JetStreamContext

    js = JetStreamContext(nc)  # through the log's connection: a term's publishes are fenced
    # a log that keeps decisions back (`services.common.tree_gate`) has them saved as the pending
    kept = getattr(log, "kept", None)
    return SnapshotPolicy(ObjectStoreSnapshots(js, stream), every=every, least=min(1_000, every), kept=kept)
