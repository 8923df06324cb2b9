"""The id record's runs in files: the `RunStore` a service's shell installs (`install`).

`UsedIds` (services/tree/domain/used_ids.py) keeps in memory only its recent ids, a Bloom filter
and each run's sparse index; the runs themselves (sorted digests and CRCs, immutable, named by the
digest of their bytes) are files `<key>.run` in `<data_dir>/id-runs/`, read a block at a time with
`os.pread`: the pages they take sit in the page cache, shared and dropped by the kernel when
memory is short, never in the process's RSS (a mapping would be counted there once touched).

A file is written under a temporary name and renamed when whole, so a file named by a key holds
that run; it is still checked against its key when a start takes it (`local`: a disk can rot, and
the check costs one read of it). A run merged away is deleted when the last `UsedIds` holding it
lets it go (while the process runs: never at exit, the next start takes the runs its snapshot
names from here). Files of runs no process holds any more (a process killed before it could
delete them) are swept at a start (`sweep`) once older than `SWEEP_AFTER`. Services sharing a
data dir share the directory: a file another process deleted stays readable by those that have
it open, and a start that misses one fetches it from the snapshot store (`services.common.
snapshots`).

A record's filter, stored for a snapshot (`UsedIds.freeze`), is a file `<key>.filter` beside the
runs, kept the same way (written whole then renamed, checked against its key when a start takes
it, deleted when nothing holds it, swept when left over); only its size is in memory until a start
reads its bits.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import resource
import sys
import tempfile
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, Any, TypeVar

import numpy as np

from services.tree.domain import used_ids
from services.tree.domain.used_ids import (
    FILTER_TRAILER,
    TRAILER,
    IdFilter,
    Run,
    RunBuilder,
    RunRegistry,
    RunStore,
    filter_key,
    filter_trailer,
    is_filter,
    parse_trailer,
)

log = logging.getLogger(__name__)

DIRECTORY = "id-runs"
SWEEP_AFTER = 24 * 3600.0  # seconds: a run file no process opened for this long is left over
READ = 1 << 20  # bytes read at a time when a run is read whole (a multiple of a block)
DESCRIPTORS = 1 << 20  # the soft limit of open files asked for when the hard one is unlimited
_T = TypeVar("_T")


class FileRun:
    """A run in a file, kept open; only its index is in memory."""

    __slots__ = ("__weakref__", "count", "crc_count", "fd", "index", "key", "path")

    def __init__(self, key: str, path: Path, fd: int, count: int, crc_count: int, index: list[int]) -> None:
        self.key, self.path, self.fd = key, path, fd
        self.count, self.crc_count = count, crc_count
        self.index = index

    def read_block(self, i: int) -> Sequence[int]:
        # (a little-endian file read on a little-endian machine: `install` refuses others)
        block = used_ids.BLOCK
        return memoryview(os.pread(self.fd, min(block, self.count - i * block) * 8, i * block * 8)).cast("q")

    def _chunks(self, start: int, items: int, width: int, dtype: str) -> Iterator[np.ndarray]:
        step = used_ids.CHUNK
        for at in range(0, items, step):
            n = min(step, items - at)
            yield np.frombuffer(os.pread(self.fd, n * width, start + at * width), dtype=dtype, count=n)

    def digest_chunks(self) -> Iterator[np.ndarray]:
        return self._chunks(0, self.count, 8, "<i8")

    def crc_chunks(self) -> Iterator[np.ndarray]:
        return self._chunks(self.count * 8, self.crc_count, 4, "<u4")

    def byte_chunks(self) -> Iterator[bytes]:
        end = self.count * 8 + self.crc_count * 4 + TRAILER.size
        for at in range(0, end, READ):
            yield os.pread(self.fd, min(READ, end - at), at)

    def reader(self) -> IO[bytes]:
        """The run's bytes as a file (what an upload reads), from the open file: another process
        may have deleted its name."""
        return io.BufferedReader(_PreadRaw(self.fd, self.count * 8 + self.crc_count * 4 + TRAILER.size))

    def __reduce__(self) -> tuple[Any, ...]:
        # A plain pickle (not a snapshot's, which writes the key): the run's arrays, so that it
        # loads anywhere.
        digests = np.concatenate([*self.digest_chunks(), np.empty(0, np.int64)]).astype(np.int64)
        crcs = np.concatenate([*self.crc_chunks(), np.empty(0, np.uint32)]).astype(np.uint32)
        return (used_ids.MemoryRun, (self.key, digests, crcs))

    def __deepcopy__(self, memo: dict[int, Any]) -> FileRun:
        return self  # immutable


class FileFilter:
    """A record's stored filter in a file, kept open; its bits read when a start takes them."""

    __slots__ = ("__weakref__", "capacity", "fd", "key", "path", "sealed", "size")

    def __init__(self, key: str, path: Path, fd: int, size: int, capacity: int, sealed: int) -> None:
        self.key, self.path, self.fd = key, path, fd
        self.size, self.capacity, self.sealed = size, capacity, sealed

    def _length(self) -> int:
        return (self.size + 7) // 8 + FILTER_TRAILER.size

    def bits(self) -> bytes:
        return os.pread(self.fd, (self.size + 7) // 8, 0)

    def byte_chunks(self) -> Iterator[bytes]:
        end = self._length()
        for at in range(0, end, READ):
            yield os.pread(self.fd, min(READ, end - at), at)

    def reader(self) -> IO[bytes]:
        return io.BufferedReader(_PreadRaw(self.fd, self._length()))

    def __reduce__(self) -> tuple[Any, ...]:  # (a plain pickle: the bits, so that it loads anywhere)
        return (used_ids.MemoryFilter, (self.key, self.bits(), self.size, self.capacity, self.sealed))

    def __deepcopy__(self, memo: dict[int, Any]) -> FileFilter:
        return self  # immutable


class _PreadRaw(io.RawIOBase):
    def __init__(self, fd: int, size: int) -> None:
        self.fd, self.size, self.at = fd, size, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = min(len(buffer), self.size - self.at)
        if n <= 0:
            return 0
        got = os.preadv(self.fd, [memoryview(buffer)[:n]], self.at)
        self.at += got
        return got


def _closed(fd: int, path: Path, delete: bool) -> None:
    with suppress(OSError):
        os.close(fd)
    if delete:
        with suppress(OSError):
            path.unlink()


class FileRuns(RunRegistry):
    """Runs as files in `directory` (see the module doc)."""

    def __init__(self, directory: Path, *, owned: bool = True) -> None:
        """`owned`: a run let go deletes its file (False: another process's directory, read only
        for the runs it names, a replay's child reading its parent's: the files are the owner's
        to delete)."""
        super().__init__()
        self.directory = Path(directory)
        self.owned = owned
        self.directory.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        return self.directory / f"{key}.run"

    def _filter_path(self, key: str) -> Path:
        return self.directory / f"{key}.filter"

    def _open(self, key: str, path: Path, fd: int, count: int, crc_count: int, index: list[int]) -> FileRun:
        """The run in the file open as `fd` (which the run keeps: another process sharing the
        directory may delete `path` at any time)."""
        run = FileRun(key, path, fd, count, crc_count, index)
        done = weakref.finalize(run, _closed, fd, path, self.owned)
        done.atexit = False  # at exit the files stay: the next start takes them
        return self.keep(run)

    def _open_filter(self, key: str, path: Path, fd: int, size: int, capacity: int, sealed: int) -> FileFilter:
        found = FileFilter(key, path, fd, size, capacity, sealed)
        done = weakref.finalize(found, _closed, fd, path, self.owned)
        done.atexit = False
        return self.keep(found)

    def write_filter(self, bits: bytes, size: int, capacity: int, sealed: int) -> IdFilter:
        trailer = filter_trailer(size, capacity, sealed)
        key = filter_key(bits, trailer)
        found: IdFilter | None = self.held(key)
        if found is not None:
            return found
        path = self._filter_path(key)
        return self._open_filter(key, path, self._write_whole(path, (bits, trailer)), size, capacity, sealed)

    def _write_whole(self, path: Path, pieces: Iterable[bytes]) -> int:
        """`pieces` into the file `path`, under a temporary name until whole: its descriptor, kept
        open (another process sharing the directory may delete the name)."""
        handle, name = tempfile.mkstemp(dir=self.directory, prefix=".writing-", suffix=path.suffix)
        try:
            with os.fdopen(handle, "wb", closefd=False) as out:
                for piece in pieces:
                    out.write(piece)
            os.replace(name, path)
        except BaseException:
            _closed(handle, Path(name), True)
            raise
        return handle

    def write(self, digests: Iterable[np.ndarray], crcs: Iterable[np.ndarray]) -> Run:
        built = RunBuilder()
        handle, name = tempfile.mkstemp(dir=self.directory, prefix=".writing-", suffix=".run")
        try:
            with os.fdopen(handle, "wb", closefd=False) as out:
                for chunk in digests:
                    out.write(built.digests(chunk))
                for chunk in crcs:
                    out.write(built.crcs(chunk))
                out.write(built.trailer())
            key = built.key
            found: Run | None = self.held(key)
            if found is not None:
                _closed(handle, Path(name), True)
                return found
            path = self._path(key)
            os.replace(name, path)
        except BaseException:
            _closed(handle, Path(name), True)
            raise
        return self._open(key, path, handle, built.count, built.crc_count, built.index)

    def local(self, key: str) -> Run | IdFilter | None:
        """The run (or filter) `key` if it is alive here or its file is (read whole: checked
        against its key, a run's index made), else None (a file that does not match is deleted).
        The file is opened once, checked and kept through that descriptor (another process may
        delete its name meanwhile)."""
        found: Run | IdFilter | None = self.held(key)
        if found is not None:
            return found
        run = self._taken(self._path(key), key, "run",
                          lambda fd, path: self._open(key, path, fd, *_checked(fd, key)))
        if run is not None:
            return run
        return self._taken(self._filter_path(key), key, "filter",
                           lambda fd, path: self._open_filter(key, path, fd, *_checked_filter(fd, key)))

    def _taken(self, path: Path, key: str, kind: str, opened: Callable[[int, Path], _T]) -> _T | None:
        """`opened(fd, path)` of the file at `path`, opened once (it checks the file through `fd`
        and keeps it), or None if there is no such file, it cannot be opened (left as it is: no
        descriptor left, say) or it does not check out (then deleted)."""
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("id %s %s in %s not opened: %s", kind, key, self.directory, exc)
            return None
        try:
            found = opened(fd, path)
        except (OSError, ValueError) as exc:
            log.warning("id %s %s in %s not used: %s", kind, key, self.directory, exc)
            _closed(fd, path, self.owned)  # (a reader's store never deletes the owner's files)
            return None
        except BaseException:
            _closed(fd, path, False)
            raise
        with suppress(OSError):
            os.utime(path)  # (taken: not left over)
        return found

    def adopt(self, key: str, data: bytes) -> Run | IdFilter:
        """The run (or filter) `key` from its bytes (fetched), kept as its file; ValueError if it is
        not that one."""
        found: Run | IdFilter | None = self.held(key)
        if found is not None:
            return found
        if is_filter(data):
            made = used_ids.filter_of(data, key)
            path = self._filter_path(key)
            return self._open_filter(key, path, self._write_whole(path, (data,)), made.size, made.capacity, made.sealed)
        handle, name = tempfile.mkstemp(dir=self.directory, prefix=".fetching-", suffix=".run")
        try:
            with os.fdopen(handle, "wb", closefd=False) as out:
                out.write(data)
            checked = _checked(handle, key)
            os.replace(name, self._path(key))
        except BaseException:
            _closed(handle, Path(name), True)
            raise
        return self._open(key, self._path(key), handle, *checked)

    def sweep(self, older_than: float = SWEEP_AFTER) -> int:
        """Delete run files no run here holds and not used for `older_than` seconds (and temporary
        ones as old): how many."""
        gone = 0
        cutoff = time.time() - older_than
        for path in [*self.directory.glob("*.run"), *self.directory.glob("*.filter")]:
            key = path.stem
            if self.held(key) is not None:
                continue
            with suppress(OSError):
                if path.stat().st_mtime < cutoff:
                    path.unlink()
                    gone += 1
        return gone


def _checked(fd: int, key: str) -> tuple[int, int, list[int]]:
    """(count, crc_count, index) of the run file open as `fd`, read whole and checked against `key`."""
    sha = hashlib.sha256()
    index_parts: list[np.ndarray] = []
    size = os.fstat(fd).st_size
    if size < TRAILER.size:
        raise ValueError("too short for a run")
    count, crc_count = parse_trailer(os.pread(fd, TRAILER.size, size - TRAILER.size))
    if size != count * 8 + crc_count * 4 + TRAILER.size:
        raise ValueError("its length does not match its trailer")
    for at, data in _pieces(fd, size):
        sha.update(data)
        if at < count * 8:  # (READ is a multiple of a block: each piece starts on one)
            digests = np.frombuffer(data, dtype="<i8", count=min(len(data), count * 8 - at) // 8)
            index_parts.append(digests[::used_ids.BLOCK].astype(np.int64))
    if sha.hexdigest()[:32] != key:
        raise ValueError("its content does not match its key")
    return count, crc_count, [first for part in index_parts for first in part.tolist()]


def _checked_filter(fd: int, key: str) -> tuple[int, int, int]:
    """(size, capacity, sealed) of the filter file open as `fd`, read whole and checked against `key`."""
    found = used_ids.filter_of(b"".join(data for _, data in _pieces(fd, os.fstat(fd).st_size)), key)
    return found.size, found.capacity, found.sealed


def _pieces(fd: int, size: int) -> Iterator[tuple[int, bytes]]:
    """(where, bytes) of the file open as `fd`, `size` bytes long, `READ` bytes at a time."""
    at = 0
    while at < size:
        data = os.pread(fd, min(READ, size - at), at)
        if not data:
            raise ValueError("cut short while read")
        yield at, data
        at += len(data)


def touch(runs: Iterable[Run | IdFilter]) -> None:
    """Mark the files of `runs` (and filters) as in use (a snapshot names them: not left over for
    `sweep`)."""
    for run in runs:
        if isinstance(run, (FileRun, FileFilter)):
            with suppress(OSError):
                os.utime(run.path)


def sweep_current() -> int:
    """`FileRuns.sweep` of the store in use, if it is one of files (after a start loaded its runs)."""
    store = used_ids.current_store()
    return store.sweep() if isinstance(store, FileRuns) else 0


def install(data_dir: Path | None) -> RunStore:
    """Make the service's id record keep its runs in `<data_dir>/id-runs` (None: in memory, as
    before); the store now in use."""
    if data_dir is None or sys.byteorder != "little":  # (runs are little-endian, read as they are)
        return used_ids.current_store()
    more_descriptors()
    current = used_ids.current_store()
    directory = Path(data_dir) / DIRECTORY
    if isinstance(current, FileRuns) and current.directory == directory:
        return current
    store = FileRuns(directory)
    used_ids.use_store(store)
    return store


class _PutBack:
    """One `store_put_back` under way: the store to put back when it ends."""

    __slots__ = ("before",)

    def __init__(self, before: RunStore) -> None:
        self.before = before


_PUT_BACKS: list[_PutBack] = []  # those under way, oldest first


@contextmanager
def store_put_back() -> Iterator[None]:
    """While it lasts, `install` may point the process's id record at a data dir's files; after
    it, the process's store is the one it had before (a process that runs a system and then
    another, or a scenario with no data dir, must not seal its runs among a stopped system's
    files). Systems whose runs overlap in one process (tests, the demo) end in any order: one
    that ends before a later one leaves the store as it is (the later one's) and hands its own
    `before` on to the later one, so the last to end puts back the store of before them all
    (session 19's review: A, B, A ended, B ended left the process on A's stopped data dir)."""
    entry = _PutBack(used_ids.current_store())
    _PUT_BACKS.append(entry)
    try:
        yield
    finally:
        at = next(i for i, e in enumerate(_PUT_BACKS) if e is entry)
        del _PUT_BACKS[at]
        if at < len(_PUT_BACKS):
            _PUT_BACKS[at].before = entry.before  # (a later one still running: its store stays)
        else:
            used_ids.use_store(entry.before)


def more_descriptors() -> int:
    """Raise the process's soft limit of open files to its hard one (at most `DESCRIPTORS`), and
    return the soft limit then. Each run held keeps its file open (read through the descriptor:
    another process sharing the data dir may delete the name), a few per record and two records
    per tree, so a process holding a few hundred trees passed the usual soft limit of 1,024 (and
    a run that cannot be written for want of one is held in memory: `UsedIds._seal`)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = DESCRIPTORS if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError) as exc:
            log.warning("the soft limit of open files stays %d: %s", soft, exc)
    return soft
