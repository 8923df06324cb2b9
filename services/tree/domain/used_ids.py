"""`UsedIds`: a set of ids that only grows, with about 1.3 bytes an id in memory.

Gang ids are single use in a tree, and so are task ids: they must be remembered long after their
gangs are forgotten (`gang_retention`), for good. Held in the process that is the one thing that
would still grow with the history, so here only this stays in memory:

- `_recent`: the ids added lately, as strings in a set (at most `SEAL_AT`);
- a Bloom filter over every sealed id (`FILTER_BITS` bits an id it is made for, `FILTER_K`
  positions derived from the id's CRC-32, so a fresh id costs a CRC and three bit tests: most ids
  asked about are new ones, every gang and task id is checked when it comes, and ~98% of them stop
  here). The ids it is made for are a rung of a fixed ladder above those sealed (`_capacity_for`),
  so its size, and which ids pass it, follow from the sealed ids alone: a record restored from a
  snapshot or replayed has the filter of the one grown live;
- each run's sparse index (the first digest of every `BLOCK` digests, in a list of Python ints:
  ~40 bytes per 512 ids).

Every `SEAL_AT` recent ids are sealed into an immutable sorted *run*: their 64-bit digests
(`digest`: a fixed mix of the id's bytes, the same in every process, so every reader of the log
agrees), sorted without repeats, and their CRC-32s, sorted (kept so that the filter can be made again,
larger, as the ids grow). Runs are merged geometrically (a run is merged into the one before it
while that one is at most twice its size), so a merge rewrites a part and there are O(log n) runs.
Only an id that passes the filter (~2% of fresh ids, and the ids really used) is digested and
looked up: in each run, the one block its index points to (`Run.read_block`), by binary search.
No false negatives, ever, and the exact answer is the digest's, as it always was.

Where runs live is the `RunStore`'s business: `MemoryRuns` (pure, the default: domain tests,
scenario runs, what-if copies) holds them as arrays; a service's shell installs a store of files
(`services.common.id_runs`, read with `pread`: the pages sit in the page cache, not in the
process) with `use_store`. Runs are immutable and named by the digest of their content (`key`),
which is how a snapshot refers to them (`services.common.snapshots`): a snapshot holds the recent
ids and the runs' keys, never the runs.

The filter is kept the same way for a start (`IdFilter`): made from the runs it costs a pass over
every sealed CRC (the one part of a start that grew with the ids), so a snapshot's shell first
has each record write its filter as it stands (`freeze_filters`: immutable, named by the digest of
its bytes, kept only while unchanged) and the snapshot names it beside the runs. A start takes
the filter it names when it is there, whole and made for the very ids sealed
(`fits`); when it is not, the filter is made from the runs as before: never a wrong
answer, only a slower first check.

An I/O error while sealing loses nothing: the recent ids stay until their run is written, a run
the store cannot write is held in memory instead (the same run and key), and a merge that cannot
be written is left for a later seal (`_seal`).

A run's bytes (what a file and a snapshot's run object hold): the digests (int64, little-endian,
sorted), the CRCs (uint32), then a trailer: `MAGIC`, the count of digests and of CRCs (uint64).
Its key: the first 32 hex digits of the SHA-256 of those bytes. A filter's bytes: its bits, then
`FILTER_TRAILER`: its size in bits, the sealed ids it was made for and those it holds (uint64),
and `FILTER_MAGIC` last (where a run has its count of CRCs: no run ends so); its key the same way.

Two different ids share a digest with a chance of about n^2 / 2^65 (a million ids: one in 3.7e7;
the mix is not cryptographic: ids made on purpose to collide could be); such an id would read
as used. Every reader computes the same digests, so every reader folds the same answer (replay
included): a collision could refuse a fresh id, never make two services differ.

A worked example: after `add("g1")` and `add("g2")`, `"g1" in ids` is True and `"g3" in ids`
False, `len(ids)` is 2; sealed, they are one run of 2 x (8 + 4) bytes and a trailer, and the
filter has 3 bits set for each.
"""

from __future__ import annotations

import hashlib
import logging
import struct
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from functools import cache
from typing import Any, Protocol, TypeVar
from weakref import WeakValueDictionary
from zlib import crc32

import numpy as np

log = logging.getLogger(__name__)

SEAL_AT = 16_384  # recent ids kept as strings before they are sealed into a run
BLOCK = 512  # digests per block: what a lookup reads of a run (4 KiB)
FILTER_BITS = 10  # Bloom filter bits per sealed id (with k=3: a fresh id passes ~1.7% of the time)
FILTER_K = 3
MIN_FILTER_IDS = 1 << 16  # the ladder's first rung (`_capacity_for`); each next one is 3/2 of the one before
MAX_FILTER_BITS = 1 << 32  # (positions are a 32-bit hash scaled to the size: more bits would not be reached,
# and NumPy's uint64 product of the hash and the size would wrap)
LONG_ID = 1024  # bytes: an id longer than this is digested alone (`digests_of`)
MAGIC = b"PWIDRUN1"
TRAILER = struct.Struct("<8sQQ")
FILTER_MAGIC = b"PWIDFLT1"
FILTER_TRAILER = struct.Struct("<QQQ8s")  # size in bits, capacity, sealed, FILTER_MAGIC
CHUNK = 1 << 16  # digests or CRCs handled at a time when runs are merged or read whole
MERGE_RETRY_SEALS = 64  # the most seals a merge that failed waits before it is tried again (`UsedIds._merge`)


_M = (1 << 64) - 1
_K0, _K1, _K2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


def digest(data: bytes) -> int:
    """The 64-bit digest of an id's UTF-8 bytes, as a signed integer (NumPy searches int64 arrays
    fastest): its length and its 8-byte little-endian words (the last padded with zeros) mixed
    multiply-xorshift style, then SplitMix64's finaliser. `digests_of` computes the same for many
    ids at once, with NumPy."""
    h = (len(data) * _K0) & _M
    for at in range(0, len(data), 8):
        h = ((h ^ int.from_bytes(data[at:at + 8], "little")) * _K1) & _M
        h ^= h >> 31
    h ^= h >> 30
    h = (h * _K1) & _M
    h ^= h >> 27
    h = (h * _K2) & _M
    h ^= h >> 31
    return h - (1 << 64) if h >> 63 else h


def digests_of(ids: list[bytes]) -> np.ndarray:
    """`digest` of each id, vectorised: the ids as rows of 8-byte words, those of a width class
    (1, 2, 4, ... words) together at its width, so that what is laid out is at most about twice
    the ids' own size, never every id at the longest one's width (one id of 700 KB among 16,384
    took 11 GB); an id longer than `LONG_ID` is digested alone (`digest`)."""
    n = len(ids)
    lengths = np.fromiter(map(len, ids), dtype=np.uint64, count=n)
    words = ((lengths + np.uint64(7)) // np.uint64(8)).astype(np.intp)
    long_ = lengths > np.uint64(LONG_ID)
    classes = _width_classes(LONG_ID)[np.where(long_, 0, words)]
    present = np.unique(classes[~long_]).tolist()
    h = lengths * np.uint64(_K0)
    k1, k2 = np.uint64(_K1), np.uint64(_K2)
    s27, s30, s31 = np.uint64(27), np.uint64(30), np.uint64(31)
    with np.errstate(over="ignore"):
        for width in present:
            chosen: slice | np.ndarray = slice(None)
            group = ids  # (all of one class: as they are)
            if len(present) > 1 or long_.any():
                at_width = np.flatnonzero((classes == width) & ~long_)
                chosen, group = at_width, [ids[at] for at in at_width.tolist()]
            rows = np.array(group, dtype=f"S{width * 8}").view(np.uint64).reshape(len(group), width)
            mixed_in, counts = h[chosen], words[chosen]
            for column in range(width):
                mixed = (mixed_in ^ rows[:, column]) * k1
                mixed ^= mixed >> s31
                mixed_in = np.where(counts > column, mixed, mixed_in)  # (zero words past an id's end left out)
            h[chosen] = mixed_in
        h ^= h >> s30
        h *= k1
        h ^= h >> s27
        h *= k2
        h ^= h >> s31
    for at in np.flatnonzero(long_).tolist():
        h[at] = digest(ids[at]) & _M
    return h.view(np.int64)


@cache
def _width_classes(longest: int) -> np.ndarray:
    """The width class (in words: a power of two, at least 1) of an id of each length in words up
    to `longest` bytes'."""
    return np.array([1 << max(0, words - 1).bit_length() for words in range((longest + 7) // 8 + 1)], dtype=np.intp)


# --- runs -------------------------------------------------------------------------------------


class Run(Protocol):
    """An immutable sorted run: `count` digests (sorted, no repeats) and `crc_count` CRCs."""

    key: str
    count: int
    crc_count: int
    index: list[int]  # the first digest of every block (in memory; a list: `bisect` on it is fastest)

    def read_block(self, i: int) -> Sequence[int]:
        """The digests of block `i` (`bisect` searches it: no NumPy call per lookup)."""
        ...

    def digest_chunks(self) -> Iterator[np.ndarray]: ...

    def crc_chunks(self) -> Iterator[np.ndarray]: ...

    def byte_chunks(self) -> Iterator[bytes]:
        """The run's bytes (see the module doc), a piece at a time."""
        ...


class RunStore(Protocol):
    """Where runs are written and found again (by key)."""

    def alive(self) -> list[Run]:
        """The runs of this store that something holds (what a snapshot being saved may name)."""
        ...

    def adopt(self, key: str, data: bytes) -> Run | IdFilter:
        """The run (or filter) in `data` (fetched), kept; ValueError unless it is the one named `key`."""
        ...

    def write(self, digests: Iterable[np.ndarray], crcs: Iterable[np.ndarray]) -> Run:
        """A run of these digests (sorted, no repeats, in order across the pieces) and CRCs."""
        ...

    def write_filter(self, bits: bytes, size: int, capacity: int, sealed: int) -> IdFilter:
        """A filter's bits as they stand, kept (immutable) under their key."""
        ...

    def local(self, key: str) -> Run | IdFilter | None:
        """The run or filter named `key` if this store has it (checked against its key), else None."""
        ...


class RunBuilder:
    """A run's bytes, key and index, made as its pieces come (digests first, then CRCs)."""

    def __init__(self) -> None:
        self.sha = hashlib.sha256()
        self.count = 0
        self.crc_count = 0
        self.index_parts: list[np.ndarray] = []

    def digests(self, chunk: np.ndarray) -> bytes:
        chunk = np.asarray(chunk, dtype="<i8")
        self.index_parts.append(chunk[(-self.count) % BLOCK::BLOCK].copy())
        self.count += len(chunk)
        data = chunk.tobytes()
        self.sha.update(data)
        return data

    def crcs(self, chunk: np.ndarray) -> bytes:
        data = np.asarray(chunk, dtype="<u4").tobytes()
        self.crc_count += len(chunk)
        self.sha.update(data)
        return data

    def trailer(self) -> bytes:
        data = TRAILER.pack(MAGIC, self.count, self.crc_count)
        self.sha.update(data)
        return data

    @property
    def key(self) -> str:
        return self.sha.hexdigest()[:32]

    @property
    def index(self) -> list[int]:
        return [int(first) for part in self.index_parts for first in part.tolist()]


def parse_trailer(data: bytes) -> tuple[int, int]:
    """(count of digests, count of CRCs) from a run's last `TRAILER.size` bytes; ValueError if it
    is not a run's."""
    if len(data) != TRAILER.size:
        raise ValueError("a run's trailer is missing")
    magic, count, crc_count = TRAILER.unpack(data)
    if magic != MAGIC:
        raise ValueError("not a run (its trailer's magic differs)")
    return count, crc_count


def run_arrays(data: bytes, key: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The digests and CRCs in a run's bytes; ValueError if they are not a whole run (or, with
    `key`, not the run named so)."""
    count, crc_count = parse_trailer(data[-TRAILER.size:])
    if len(data) != count * 8 + crc_count * 4 + TRAILER.size:
        raise ValueError("a run's length does not match its trailer")
    if key is not None and hashlib.sha256(data).hexdigest()[:32] != key:
        raise ValueError(f"run {key}: its content does not match its key")
    digests = np.frombuffer(data, dtype="<i8", count=count).astype(np.int64)
    crcs = np.frombuffer(data, dtype="<u4", count=crc_count, offset=count * 8).astype(np.uint32)
    return digests, crcs


class IdFilter(Protocol):
    """A record's Bloom filter as it stood when a snapshot was taken: immutable, named by `key`."""

    key: str
    size: int  # bits
    capacity: int  # the sealed ids it was made for
    sealed: int  # the sealed ids (CRCs) it holds

    def bits(self) -> bytes: ...

    def byte_chunks(self) -> Iterator[bytes]: ...


def filter_trailer(size: int, capacity: int, sealed: int) -> bytes:
    return FILTER_TRAILER.pack(size, capacity, sealed, FILTER_MAGIC)


def is_filter(data: bytes) -> bool:
    """Whether stored bytes (or their last 8) are a filter's rather than a run's."""
    return data[-8:] == FILTER_MAGIC


def parse_filter_trailer(data: bytes) -> tuple[int, int, int]:
    """(size, capacity, sealed) from a filter's last `FILTER_TRAILER.size` bytes; ValueError if it
    is not a filter's."""
    if len(data) != FILTER_TRAILER.size:
        raise ValueError("a filter's trailer is missing")
    size, capacity, sealed, magic = FILTER_TRAILER.unpack(data)
    if magic != FILTER_MAGIC:
        raise ValueError("not a filter (its trailer's magic differs)")
    return size, capacity, sealed


def filter_of(data: bytes, key: str) -> MemoryFilter:
    """The filter in stored bytes; ValueError unless they are whole and named `key`."""
    size, capacity, sealed = parse_filter_trailer(data[-FILTER_TRAILER.size:])
    if len(data) != (size + 7) // 8 + FILTER_TRAILER.size:
        raise ValueError("a filter's length does not match its trailer")
    if hashlib.sha256(data).hexdigest()[:32] != key:
        raise ValueError(f"filter {key}: its content does not match its key")
    return MemoryFilter(key, data[:-FILTER_TRAILER.size], size, capacity, sealed)


def filter_key(bits: bytes, trailer: bytes) -> str:
    sha = hashlib.sha256(bits)
    sha.update(trailer)
    return sha.hexdigest()[:32]


class MemoryFilter:
    """A filter held as its bytes (`MemoryRuns`, and a filter read back whole)."""

    __slots__ = ("__weakref__", "_bits", "capacity", "key", "sealed", "size")

    def __init__(self, key: str, bits: bytes, size: int, capacity: int, sealed: int) -> None:
        self.key, self._bits = key, bits
        self.size, self.capacity, self.sealed = size, capacity, sealed

    def bits(self) -> bytes:
        return self._bits

    def byte_chunks(self) -> Iterator[bytes]:
        yield self._bits
        yield filter_trailer(self.size, self.capacity, self.sealed)

    def __reduce__(self) -> tuple[Any, ...]:
        return (MemoryFilter, (self.key, self._bits, self.size, self.capacity, self.sealed))

    def __deepcopy__(self, memo: dict[int, Any]) -> MemoryFilter:
        return self  # immutable


def fits(found: IdFilter, sealed: int) -> bool:
    """Whether `found` is a filter a record with `sealed` ids sealed may use as its own: made for
    exactly those (a filter missing some would turn a used id away) at the size this code makes for
    them (the ladder's rung, `_capacity_for`: another size would answer some crafted ids otherwise)."""
    return (found.sealed == sealed and found.capacity == _capacity_for(sealed)
            and found.size == _filter_size(found.capacity))


class MemoryRun:
    """A run held as two arrays (`MemoryRuns`)."""

    __slots__ = ("__weakref__", "count", "crc_count", "crcs", "digests", "index", "key")

    def __init__(self, key: str, digests: np.ndarray, crcs: np.ndarray) -> None:
        self.key = key
        self.digests = digests
        self.crcs = crcs
        self.count = len(digests)
        self.crc_count = len(crcs)
        self.index: list[int] = digests[::BLOCK].tolist()

    def read_block(self, i: int) -> Sequence[int]:
        return self.digests[i * BLOCK:(i + 1) * BLOCK].data  # (a memoryview)

    def digest_chunks(self) -> Iterator[np.ndarray]:
        for at in range(0, self.count, CHUNK):
            yield self.digests[at:at + CHUNK]

    def crc_chunks(self) -> Iterator[np.ndarray]:
        for at in range(0, self.crc_count, CHUNK):
            yield self.crcs[at:at + CHUNK]

    def byte_chunks(self) -> Iterator[bytes]:
        yield self.digests.astype("<i8").tobytes()
        yield self.crcs.astype("<u4").tobytes()
        yield TRAILER.pack(MAGIC, self.count, self.crc_count)

    def __reduce__(self) -> tuple[Any, ...]:  # (a plain pickle holds the arrays; a snapshot, the key)
        return (MemoryRun, (self.key, self.digests, self.crcs))

    def __deepcopy__(self, memo: dict[int, Any]) -> MemoryRun:
        return self  # immutable


_R = TypeVar("_R")


class RunRegistry:
    """The runs of a store that something holds, by key (weakly: a run no `UsedIds` holds is let
    go). A run written or fetched again is the one held already."""

    def __init__(self) -> None:
        self._alive: WeakValueDictionary[str, Any] = WeakValueDictionary()

    def alive(self) -> list[Run]:
        return list(self._alive.values())

    def held(self, key: str) -> Any:
        return self._alive.get(key)

    def keep(self, run: _R) -> _R:
        self._alive[getattr(run, "key")] = run  # noqa: B009 (any run)
        return run


class MemoryRuns(RunRegistry):
    """Runs in memory: the pure store (the default). `local(key)` finds the runs alive in this
    process (a snapshot loaded where it was taken, as the tests do)."""

    def write(self, digests: Iterable[np.ndarray], crcs: Iterable[np.ndarray]) -> Run:
        built = RunBuilder()
        digest_parts = [chunk for chunk in digests if built.digests(chunk) is not None]
        crc_parts = [chunk for chunk in crcs if built.crcs(chunk) is not None]
        built.trailer()
        found: Run | None = self.held(built.key)
        if found is not None:
            return found
        return self.keep(MemoryRun(built.key, np.concatenate([*digest_parts, _EMPTY_I8]).astype(np.int64),
                                   np.concatenate([*crc_parts, _EMPTY_U4]).astype(np.uint32)))

    def write_filter(self, bits: bytes, size: int, capacity: int, sealed: int) -> IdFilter:
        key = filter_key(bits, filter_trailer(size, capacity, sealed))
        found: IdFilter | None = self.held(key)
        return found if found is not None else self.keep(MemoryFilter(key, bits, size, capacity, sealed))

    def local(self, key: str) -> Run | IdFilter | None:
        found: Run | IdFilter | None = self.held(key)
        return found

    def adopt(self, key: str, data: bytes) -> Run | IdFilter:
        """The run or filter in `data` (ValueError unless it is the one named `key`)."""
        found: Run | IdFilter | None = self.held(key)
        if found is None:
            found = self.keep(filter_of(data, key) if is_filter(data) else MemoryRun(key, *run_arrays(data, key)))
        return found


_EMPTY_I8 = np.empty(0, dtype=np.int64)
_EMPTY_U4 = np.empty(0, dtype=np.uint32)


def merged(runs: Sequence[Run]) -> Iterator[np.ndarray]:
    """The digests of `runs` merged, sorted without repeats, a chunk at a time (what a merge
    holds: about a chunk of each run, never the runs)."""
    sources = [run.digest_chunks() for run in runs]
    held: list[np.ndarray | None] = [next(source, None) for source in sources]
    while True:
        live = [i for i, chunk in enumerate(held) if chunk is not None]
        if not live:
            return
        # everything at or below the smallest of the chunks' last digests can go out: what is
        # still to come of each run is above its own chunk's last
        bound = min(int(held[i][-1]) for i in live)  # type: ignore[index]
        out = []
        for i in live:
            chunk = held[i]
            assert chunk is not None
            cut = int(chunk.searchsorted(bound, side="right"))
            out.append(chunk[:cut])
            rest = chunk[cut:]
            held[i] = rest if len(rest) else next(sources[i], None)
        # (a stable sort of sorted pieces is a merge: timsort finds the runs; then the repeats out)
        both = np.sort(np.concatenate(out), kind="stable")
        yield both[np.concatenate(([True], both[1:] != both[:-1]))] if len(both) else both


def _crcs_of(runs: Sequence[Run]) -> Iterator[np.ndarray]:
    for run in runs:
        yield from run.crc_chunks()


_STORE: list[RunStore] = [MemoryRuns()]
# A store for the records made (or restored) in one context: a replay's, in the task that runs it
# (`storing_in`), while the process's own records go on sealing into `_STORE`.
_SCOPED: ContextVar[RunStore | None] = ContextVar("used_ids_store", default=None)


def use_store(store: RunStore) -> RunStore:
    """Make `store` where new `UsedIds` seal their runs (a service's shell: files); returns the
    store used before."""
    before = _STORE[0]
    _STORE[0] = store
    return before


def current_store() -> RunStore:
    """The store of this context (`storing_in`), else the process's (`use_store`)."""
    scoped = _SCOPED.get()
    return scoped if scoped is not None else _STORE[0]


@contextmanager
def storing_in(store: RunStore) -> Iterator[RunStore]:
    """While it lasts, in this context (a task, and the threads and tasks it starts), `UsedIds`
    made or restored seal their runs into `store` for good, and `current_store()` is `store`
    (where a snapshot's runs are fetched to); records made elsewhere, and the process's store,
    are left as they are. (The process's store swapped instead broke the records of everything
    else in the process, and two replays whose lifetimes overlapped.)"""
    token = _SCOPED.set(store)
    try:
        yield store
    finally:
        _SCOPED.reset(token)


def stores_in_use() -> list[RunStore]:
    """The process's store, this context's, and every other store a record alive seals into (a
    snapshot of a record names runs of the store it holds)."""
    found: dict[int, RunStore] = {id(_STORE[0]): _STORE[0]}
    scoped = _SCOPED.get()
    if scoped is not None:
        found.setdefault(id(scoped), scoped)
    for record in list(_RECORDS.values()):
        store = record._store
        if store is not None:
            found.setdefault(id(store), store)
    return list(found.values())


# every record alive (`freeze_filters`), by `id` (a record is not hashable: it compares as a set)
_RECORDS: WeakValueDictionary[int, UsedIds] = WeakValueDictionary()


def freeze_filters() -> None:
    """Have every record write its filter to its store if it changed since it last did
    (`UsedIds.freeze`): a snapshot's shell, just before the state is pickled, so that the snapshot
    names them."""
    for record in list(_RECORDS.values()):
        record.freeze()


# --- the filter -------------------------------------------------------------------------------


_PHI32 = 0x9E3779B1
_M32 = 0xFFFFFFFF


def _capacity_for(sealed: int) -> int:
    """The sealed ids a filter is made for when `sealed` are: the first rung at or above `sealed`
    of a fixed ladder (`MIN_FILTER_IDS`, then 3/2 of the one before, in integers). A pure function
    of the count, so that a record grown live, one restored from a snapshot and one replayed make
    the very same filter: which ids pass it decides whether an id whose digest is a used one's
    reads as used, and that must not depend on when the process started."""
    capacity = MIN_FILTER_IDS
    while capacity < sealed:
        capacity = max(capacity + 1, capacity * 3 // 2)
    return capacity


def _filter_size(ids: int) -> int:
    """The bits of a filter made for `ids` sealed ids (`FILTER_BITS` each, at most `MAX_FILTER_BITS`)."""
    return min(max(MIN_FILTER_IDS, ids) * FILTER_BITS, MAX_FILTER_BITS)


def _positions(crcs: np.ndarray, size: int) -> list[np.ndarray]:
    """The filter positions of ids with these CRCs, one array per hash (`UsedIds._maybe_sealed`
    computes the same for one id): double hashing on 32 bits (wrapping), then scaled to the
    filter's size by a multiply and a shift (no division: NumPy divides 64-bit integers slowly)."""
    a = crcs.astype(np.uint32)
    with np.errstate(over="ignore"):
        step = (a * np.uint32(_PHI32)) | np.uint32(1)
        size_, s32 = np.uint64(size), np.uint64(32)
        return [((a + np.uint32(i) * step).astype(np.uint64) * size_) >> s32 for i in range(FILTER_K)]


def _set_positions(bits: bytearray, size: int, crcs: np.ndarray) -> None:
    """Set the filter bits of ids with these CRCs."""
    view = np.frombuffer(bits, dtype=np.uint8)
    for positions in _positions(crcs, size):
        at = (positions >> np.uint64(3)).astype(np.intp)
        bit = (positions & np.uint64(7)).astype(np.uint8)
        # one bit of the byte at a time: a byte named twice gets the same value both times, so
        # `view[at] |= one` loses nothing (and `np.bitwise_or.at`, which does it a bit at a
        # time, is ten times slower)
        for b in range(8):
            chosen = at[bit == b]
            view[chosen] |= np.uint8(1 << b)


def _passes(bits: bytes | bytearray, size: int, crcs: np.ndarray) -> np.ndarray:
    """Whether ids with these CRCs pass the filter (may have been sealed), as booleans."""
    view = np.frombuffer(bits, dtype=np.uint8)
    passed = np.ones(len(crcs), dtype=bool)
    for positions in _positions(crcs, size):
        byte = view[(positions >> np.uint64(3)).astype(np.intp)]
        passed &= (byte >> (positions & np.uint64(7)).astype(np.uint8)) & 1 == 1
    return passed


# --- the set ----------------------------------------------------------------------------------


class UsedIds:
    """Ids added once, never removed; `in` says whether one was added (see the module doc)."""

    __slots__ = ("__weakref__", "_bits", "_capacity", "_frozen", "_merge_failed", "_merge_skip", "_recent", "_runs",
                 "_sealed", "_size", "_store")

    def __init__(self, ids: Iterable[str] = (), store: RunStore | None = None) -> None:
        # None: the process's store when a run is sealed (`use_store`); made in a replay's context
        # (`storing_in`), that one's
        self._store = store if store is not None else _SCOPED.get()
        self._recent: set[str] = set()
        self._runs: list[Run] = []  # oldest (largest) first
        self._sealed = 0  # CRCs in the runs (ids sealed, repeats of a digest included)
        # the filter; empty: to be made from the runs (`_filter`). `bytes` while it is a stored
        # filter's, unchanged (made a bytearray when a seal changes it)
        self._bits: bytes | bytearray = bytearray()
        self._size = 0  # its bits
        self._capacity = 0  # the sealed ids it was made for
        self._frozen: IdFilter | None = None  # the stored filter `_bits` equal (None: changed since)
        self._merge_failed = 0  # merges that failed in a row (`_merge`)
        self._merge_skip = 0  # seals to go before a merge is tried again
        _RECORDS[id(self)] = self
        for id_ in ids:
            self.add(id_)

    def add(self, id_: str) -> None:
        recent = self._recent
        recent.add(id_)
        if len(recent) >= SEAL_AT:
            self._seal()

    def __contains__(self, id_: object) -> bool:
        if id_ in self._recent:
            return True
        if not self._runs or not isinstance(id_, str):
            return False
        data = id_.encode()
        crc = crc32(data)
        # the filter, inlined (a fresh id stops here ~98% of the time): `_maybe_sealed`
        if self._capacity == 0:
            self._filter()
        bits, size = self._bits, self._size
        at = crc * size >> 32
        if not bits[at >> 3] >> (at & 7) & 1:
            return False
        step = (crc * _PHI32 & _M32) | 1
        at = ((crc + step) & _M32) * size >> 32
        if not bits[at >> 3] >> (at & 7) & 1:
            return False
        at = ((crc + 2 * step) & _M32) * size >> 32
        if not bits[at >> 3] >> (at & 7) & 1:
            return False
        return self._sealed_has(digest(data))

    def _maybe_sealed(self, crc: int) -> bool:
        """The filter: False means never sealed (the positions of `_set_positions`)."""
        if self._capacity == 0:
            self._filter()
        bits, size = self._bits, self._size
        step = (crc * _PHI32 & _M32) | 1
        for i in range(FILTER_K):
            at = ((crc + i * step) & _M32) * size >> 32
            if not bits[at >> 3] >> (at & 7) & 1:
                return False
        return True

    def _sealed_has(self, key: int) -> bool:
        for run in self._runs:  # (the largest first: it holds most of the ids)
            block = bisect_right(run.index, key) - 1
            if block < 0:
                continue
            found = run.read_block(block)
            at = bisect_left(found, key)
            if at < len(found) and found[at] == key:
                return True
        return False

    def isdisjoint(self, ids: Iterable[str]) -> bool:
        return not any(id_ in self for id_ in ids)

    def __len__(self) -> int:
        """How many ids were added (sealed ids that share a digest count once)."""
        unsealed = sum(1 for id_ in self._recent if not self._runs or id_ not in self._sealed_view())
        return sum(run.count for run in self._runs) + unsealed

    def _sealed_view(self) -> _Sealed:
        return _Sealed(self)

    def __bool__(self) -> bool:
        return bool(self._recent) or bool(self._runs)

    @property
    def nbytes(self) -> int:
        """About what the ids take in memory (the strings not sealed yet counted at 80 bytes each,
        and the runs' indexes; not the runs)."""
        return len(self._bits) + sum(40 * len(run.index) for run in self._runs) + 80 * len(self._recent)

    @property
    def runs(self) -> tuple[Run, ...]:
        return tuple(self._runs)

    def _seal(self) -> None:
        """Seal the recent ids into a run (a few milliseconds per `SEAL_AT` ids), leaving out those
        sealed already, then merge runs while the one before the newest is at most twice its size.

        Nothing is lost to an I/O error (a disk full, no file descriptor left): the recent ids are
        let go only once their run is written and counted in the filter; a run the store could not
        write is held in memory instead (the same run, under the same key: the record answers as
        if it had been written, and a snapshot stores it as any other), and a merge the store could
        not write leaves the runs unmerged (a later seal merges them)."""
        if not self._recent:
            return
        recent = list(map(str.encode, self._recent))
        crcs = np.fromiter(map(crc32, recent), dtype=np.uint32, count=len(recent))
        digests = digests_of(recent)
        if self._runs:  # ids sealed before (added again): only those that pass the filter are looked up
            if self._capacity == 0:
                self._filter()
            again = _passes(self._bits, self._size, crcs)
            for at in np.flatnonzero(again).tolist():
                again[at] = self._sealed_has(int(digests[at]))
            crcs, digests = crcs[~again], digests[~again]
        if len(digests):
            # (the CRCs sorted: the set's order changes with PYTHONHASHSEED, and a run's bytes and
            # key must not)
            self._append(np.unique(digests), np.sort(crcs))
        self._recent = set()
        self._merge()

    def _store_in_use(self) -> RunStore:
        return self._store if self._store is not None else _STORE[0]

    def _append(self, digests: np.ndarray, crcs: np.ndarray) -> None:
        """A new run of these digests (sorted, no repeats) and CRCs, counted in the filter."""
        store = self._store_in_use()
        try:
            run = store.write([digests], [crcs])
        except OSError as exc:
            log.warning("id run of %d ids not written (%s: %s): held in memory", len(crcs), type(exc).__name__, exc)
            run = MemoryRuns().write([digests], [crcs])
            keep = getattr(store, "keep", None)  # (so that a snapshot taken now finds it: `RunStore.alive`)
            if keep is not None:
                keep(run)
        self._runs.append(run)
        self._sealed += len(crcs)
        self._frozen = None
        if not self._capacity:
            return  # made when next needed
        if self._sealed > self._capacity:
            capacity = _capacity_for(self._sealed)
            if _filter_size(capacity) != self._size:
                self._capacity = 0  # made again, larger, when next needed
                return
            self._capacity = capacity  # (the size is at its cap: the same filter)
        if not isinstance(self._bits, bytearray):  # (a stored filter's bits: changed from here on)
            self._bits = bytearray(self._bits)
        _set_positions(self._bits, self._size, crcs)

    def _merge(self) -> None:
        """Merge the newest runs while the one before the newest is at most twice its size (the
        runs' ids and CRCs are the same merged or not: only where they are read changes).

        A merge the store cannot write (a disk full, a directory gone) is tried again after 1,
        then 2, 4 ... up to `MERGE_RETRY_SEALS` seals, not at every seal: each try rewrites the
        runs up to the failure, and warns."""
        if self._merge_skip:
            self._merge_skip -= 1
            return
        store, runs = self._store_in_use(), self._runs
        try:
            while len(runs) >= 2 and runs[-2].count <= 2 * runs[-1].count:
                pair = runs[-2:]
                runs[-2:] = [store.write(merged(pair), _crcs_of(pair))]
        except OSError as exc:
            self._merge_skip = min(1 << self._merge_failed, MERGE_RETRY_SEALS)
            self._merge_failed += 1
            log.warning("id runs not merged (%s: %s): kept as they are, tried again in %d seals", type(exc).__name__,
                        exc, self._merge_skip)
        else:
            self._merge_failed = 0

    def _filter(self) -> None:
        """Make the filter from the runs' CRCs, for the sealed ids' rung of the ladder
        (`_capacity_for`)."""
        capacity = _capacity_for(self._sealed)
        size = _filter_size(capacity)
        bits = bytearray((size + 7) // 8)
        for run in self._runs:
            for chunk in run.crc_chunks():
                _set_positions(bits, size, chunk)
        self._bits, self._size, self._capacity = bits, size, capacity
        self._frozen = None

    def freeze(self) -> None:
        """Write the filter to the store as it stands, unless it is stored so already (or not made:
        a start then makes it from the runs). One the store cannot write (a disk full) is left
        out of the snapshot: a start makes it from the runs."""
        if self._frozen is not None or not self._capacity or not self._runs:
            return
        try:
            self._frozen = self._store_in_use().write_filter(bytes(self._bits), self._size, self._capacity,
                                                             self._sealed)
        except OSError as exc:
            log.warning("id filter not stored (%s: %s): a start makes it from the runs", type(exc).__name__, exc)

    def _all_digests(self) -> np.ndarray:
        parts = [chunk for run in self._runs for chunk in run.digest_chunks()]
        if self._recent:
            parts.append(digests_of(list(map(str.encode, self._recent))))
        return np.unique(np.concatenate([*parts, _EMPTY_I8]))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (set, frozenset)):
            return len(self) == len(other) and all(id_ in self for id_ in other)
        if isinstance(other, UsedIds):
            return bool(np.array_equal(self._all_digests(), other._all_digests()))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    # A pickle (a snapshot) holds the recent ids, the runs and the stored filter if the filter is
    # unchanged since it was stored (`freeze`; a snapshot's pickler writes runs and filter as their
    # keys), so that a snapshot does not grow with the history. With no filter, or one that does
    # not fit the runs (or is missing: a snapshot may do without it), it is made again from the
    # runs when first needed.
    def __getstate__(self) -> tuple[list[str], list[Run], int, IdFilter | None]:
        return sorted(self._recent), list(self._runs), self._sealed, self._frozen

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        recent, runs, sealed = state[:3]
        stored: IdFilter | None = state[3] if len(state) > 3 else None
        self._store = _SCOPED.get()  # (restored in a replay's context: its store; else the process's)
        self._recent = set(recent)
        self._runs = list(runs)
        self._sealed = sealed
        self._bits, self._size, self._capacity, self._frozen = bytearray(), 0, 0, None
        self._merge_failed = self._merge_skip = 0
        if stored is not None and self._runs and fits(stored, sealed):
            bits = stored.bits()
            if len(bits) == (stored.size + 7) // 8:
                self._bits, self._size, self._capacity, self._frozen = bits, stored.size, stored.capacity, stored
        _RECORDS[id(self)] = self

    def __deepcopy__(self, memo: dict[int, Any]) -> UsedIds:
        """A copy (a what-if's): the runs shared (immutable), the filter copied."""
        copied = UsedIds.__new__(UsedIds)
        copied._store = self._store
        copied._recent = set(self._recent)
        copied._runs = list(self._runs)
        copied._sealed = self._sealed
        # (a stored filter's bits are immutable: shared; bits that change are copied)
        copied._bits = self._bits if not isinstance(self._bits, bytearray) else bytearray(self._bits)
        copied._size, copied._capacity = self._size, self._capacity
        copied._frozen = self._frozen
        copied._merge_failed, copied._merge_skip = self._merge_failed, self._merge_skip
        _RECORDS[id(copied)] = copied
        return copied

    def __repr__(self) -> str:
        # (not `len(self)`: that looks every recent id up in the runs, and a repr is made where
        # no one expects a cost, by asyncio of a task's result, say)
        return f"UsedIds({self._sealed} sealed in {len(self._runs)} runs, {len(self._recent)} recent)"


class _Sealed:
    """`id in _Sealed(ids)`: whether `ids` has `id` in a run (not counting the recent ones)."""

    __slots__ = ("ids",)

    def __init__(self, ids: UsedIds) -> None:
        self.ids = ids

    def __contains__(self, id_: str) -> bool:
        data = id_.encode()
        return self.ids._maybe_sealed(crc32(data)) and self.ids._sealed_has(digest(data))
