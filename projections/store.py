"""One DuckDB file per service holding its projections and their checkpoints.

    store = ProjectionStore("admission.duckdb", [EventLogProjection(), PoolTreeProjection()])

    async def handler(batch: Sequence[Stored]) -> None:        # blocking work: off the event loop
        await anyio.to_thread.run_sync(store.apply, batch)

    await log.consume(durable, subjects, store.lowest_checkpoint, handler)

`apply(batch)` decodes each message once, runs every projection over the events after its own
checkpoint and advances the checkpoints, all in one transaction: rows and checkpoints commit
together or not at all, and an event at or below a checkpoint has no second effect.

Concurrency: DuckDB lets one process open the file for writing, and then no other process may
open it at all (not even read-only). Inside the writing process, `query` runs on its own cursor and
sees the last committed state (MVCC), so it may run on another thread while `apply` runs. Another
process reads with `ProjectionStore.open_read_only(path)`, which works only while no service holds
the file (it raises `StoreBusy` otherwise): while the service runs, ask it (request/reply).

Retention (`retention=` seconds of log time; None, the default: every row is kept for ever). The
log's time is its events' envelope times, as the services' clocks read them: the largest seen so
far. Each time that clock reaches a new multiple of `prune_every` seconds (aligned to the epoch,
`B`), at the first event that takes it there, a projection that prunes (`Projection.prune`) is
given `horizon = B - retention` before that event is applied: it deletes what it keeps as history
older than the horizon, a bounded number of rows per table (the rest goes at the next point).
Where those points fall depends on the log alone, never on how it was cut into batches or chunks,
so the tables at a position are a function of the log up to it and of the option: a rebuild from
the log gives the same tables. Each projection's next point (`next_at`) and its last horizon are
kept in the table `pruning`, written in the transaction of the batch, with its rows and its
checkpoint: a crash leaves all three as they were before the batch, or all three after it.
"""

from __future__ import annotations

import gc
import logging
import math
import os
import threading
from bisect import bisect_right
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

import duckdb
import pyarrow as pa

from events import DecodeError, Envelope, decode_all, is_pack, read_envelope, read_pack
from events.codec import pack_parts
from projections.base import Connection, Item, Malformed, Projection, quote


class StoredMessage(Protocol):
    """What the store needs of a log message (`services.common.log.Stored` has it)."""

    @property
    def seq(self) -> int: ...
    @property
    def subject(self) -> str: ...
    @property
    def data(self) -> bytes: ...
    @property
    def msg_id(self) -> str | None: ...


# A projection's row of `pruning`, but its name: next_at, horizon, retention, pruned_seq.
_Pruning = tuple[datetime, datetime | None, float | None, int | None]


class StoreBusy(Exception):
    """The file is held by a writing process (a running service): ask that service instead."""


class NotReadOnly(ValueError):
    """`query` was given SQL that is not a single read-only statement."""


class QueryTimeout(ValueError):
    """A query ran past its `timeout` and was stopped."""


READ_ONLY_STATEMENTS = frozenset({duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN})

_CHECKPOINTS_DDL = """
CREATE TABLE IF NOT EXISTS checkpoints (
    projection     VARCHAR PRIMARY KEY,
    schema_version INTEGER NOT NULL,
    last_seq       BIGINT  NOT NULL
)"""

_PRUNING_DDL = """
CREATE TABLE IF NOT EXISTS pruning (
    projection VARCHAR PRIMARY KEY,
    next_at    TIMESTAMPTZ NOT NULL,  -- the log time at which its next prune is due
    horizon    TIMESTAMPTZ,           -- its last prune's: history before it was deleted (up to the bound)
    retention  DOUBLE,                -- the retention (seconds) of that prune
    pruned_seq BIGINT                 -- the position before which it was made
)"""

# What a projection could not apply: the message's position, the projection, the error (its type
# and message); the projection's checkpoint moved past it with the others' (`apply_isolating`).
_ERRORS_DDL = """CREATE TABLE IF NOT EXISTS projection_errors (
    seq        BIGINT NOT NULL,
    projection VARCHAR NOT NULL,
    error      VARCHAR NOT NULL
)"""
ERROR_TEXT = 2_000  # characters of an error kept in `projection_errors`

# What the store itself failed at (a disk, memory, a database DuckDB gave up on) rather than a
# message: nothing is skipped for these, the caller stops and the batch is read again later.
ENVIRONMENT_ERRORS: tuple[type[BaseException], ...] = (
    OSError, MemoryError, duckdb.IOException, duckdb.OutOfMemoryException, duckdb.FatalException,
    duckdb.InternalException, duckdb.InterruptException, duckdb.ConnectionException)

# Seconds of log time from one prune to the next (each deletes about that much history, at most
# `Projection.prune_rows` rows per table).
PRUNE_EVERY = 60.0
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_log = logging.getLogger("poolwise.projections")


class ProjectionStore:
    """Projections in one DuckDB database (a file, or `:memory:`), with their checkpoints.

    A large batch is decoded and handed to the projections in chunks of `chunk_size` messages, in
    log order, all inside the batch's one transaction: `Projection.apply` may be called several
    times per batch.

    `pause_gc=True` (the default) pauses Python's cyclic garbage collector while a batch is applied
    (it is re-enabled after, if it was enabled): full collections over the decoded events cost more
    than half of the time of a large batch otherwise.

    `external_access=False` (the default) forbids SQL from reading or writing files and loading
    extensions: `query` may then answer SQL from the network without exposing the host's files.

    `retention` (seconds of log time, None: off) bounds the history the projections keep: see
    "Retention" in this module's docstring; `prune_every` is the log time between two prunes.
    """

    def __init__(
        self,
        path: str | Path = ":memory:",
        projections: Sequence[Projection] = (),
        *,
        external_access: bool = False,
        chunk_size: int = 4096,
        pause_gc: bool = True,
        retention: float | None = None,
        prune_every: float = PRUNE_EVERY,
        _read_only: bool = False,
    ) -> None:
        names = [p.name for p in projections]
        if len(set(names)) != len(names):
            raise ValueError(f"projection names must be unique, got {names}")
        if retention is not None and not (retention >= 0 and math.isfinite(retention)):
            raise ValueError(f"retention must be a finite number of seconds >= 0, got {retention}")
        if not (prune_every > 0 and math.isfinite(prune_every)):
            raise ValueError(f"prune_every must be a finite number of seconds > 0, got {prune_every}")
        self.retention = retention
        self._retention = None if retention is None else timedelta(seconds=retention)
        self._every = timedelta(seconds=prune_every)
        for projection in projections:
            projection.retention = retention
        # the projections that prune (with retention on), and each one's next prune (None: at the
        # window after its first event's)
        self._pruned = {p.name for p in projections if retention is not None and type(p).prune is not Projection.prune}
        self._next_prune: dict[str, datetime | None] = {}
        self.path = str(path)
        self.read_only = _read_only
        self.chunk_size = max(1, chunk_size)
        self.pause_gc = pause_gc
        self._projections = tuple(projections)
        self._checkpoints: dict[str, int] = {}
        self._failed: str | None = None  # the projection that raised in the last `_apply`, if one did
        self.rebuilt: tuple[str, ...] = ()
        self._cursor_lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._writer_key = None if _read_only or self.path == ":memory:" else str(Path(path).resolve())
        _claim(self._writer_key)
        try:
            self._conn = _connect(self.path, read_only=_read_only, external_access=external_access)
        except BaseException:
            _release(self._writer_key)
            raise
        self._reader_root = self._conn.cursor()  # only ever used, under the lock, to make cursors
        self._closed = False
        if not _read_only:
            try:
                self._open()
            except BaseException:
                self.close()
                raise

    @classmethod
    def open_read_only(cls, path: str | Path, attach: Mapping[str, Path] | None = None) -> ProjectionStore:
        """Open a store file for `query` only, from a process other than its service's; `attach`:
        other store files (read-only too), each under its name (`admission.gangs`), while the
        main file's tables keep their unqualified names. Once they are attached, SQL can neither
        read nor write files nor attach more (`enable_external_access` off, the configuration
        locked).

        Raises `StoreBusy` while a service has one of the files open for writing."""
        if str(path) == ":memory:" or not Path(path).exists():
            raise FileNotFoundError(f"no projection store at {path}")
        store = cls(path, (), external_access=True, _read_only=True)
        try:
            for name, other in sorted((attach or {}).items()):
                try:
                    store._conn.execute(f"ATTACH {_literal(str(other))} AS {quote(name)} (READ_ONLY)")
                except (duckdb.IOException, duckdb.ConnectionException) as exc:
                    raise StoreBusy(f"{other} is held by a running service: query that service instead. "
                                    f"({exc})") from exc
            store._conn.execute("SET enable_external_access = false")
            store._conn.execute("SET lock_configuration = true")
        except BaseException:
            store.close()
            raise
        return store

    # -- lifecycle ------------------------------------------------------------------------------

    def _open(self) -> None:
        """Create the checkpoint table; (re)create every projection that is new or whose stored
        schema_version differs from its code's, with checkpoint 0."""
        conn = self._conn
        with _transaction(conn):
            conn.execute(_CHECKPOINTS_DDL)
            conn.execute(_ERRORS_DDL)
            stored = {
                name: (version, last)
                for name, version, last in conn.execute(
                    "SELECT projection, schema_version, last_seq FROM checkpoints"
                ).fetchall()
            }
            rebuilt: list[str] = []
            for projection in self._projections:
                version, last = stored.get(projection.name, (None, 0))
                if version != projection.schema_version:
                    projection.drop(conn)
                    projection.create(conn)
                    conn.execute(
                        "INSERT OR REPLACE INTO checkpoints VALUES (?, ?, 0)",
                        [projection.name, projection.schema_version],
                    )
                    rebuilt.append(projection.name)
                    last = 0
                self._checkpoints[projection.name] = int(last)
            self._open_pruning(rebuilt)
        self.rebuilt = tuple(rebuilt)

    def _open_pruning(self, rebuilt: list[str]) -> None:
        """The `pruning` table (with retention on): a rebuilt projection starts its clock again."""
        conn = self._conn
        if self._pruned:
            conn.execute(_PRUNING_DDL)
        elif not conn.execute("SELECT 1 FROM duckdb_tables() WHERE table_name = 'pruning' AND NOT temporary "
                              "AND database_name = current_database()").fetchall():
            return
        if rebuilt:
            conn.execute("DELETE FROM pruning WHERE list_contains(?, projection)", [rebuilt])
        found = dict(conn.execute("SELECT projection, next_at FROM pruning").fetchall())
        self._next_prune = {name: found.get(name) for name in self._pruned}

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._reader_root.close()
        self._conn.close()
        _release(self._writer_key)

    def __enter__(self) -> ProjectionStore:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- checkpoints ----------------------------------------------------------------------------

    @property
    def projections(self) -> tuple[Projection, ...]:
        return self._projections

    def checkpoint(self, name: str) -> int:
        """The last log sequence applied to projection `name` (0: nothing yet)."""
        return self.checkpoints()[name]

    def checkpoints(self) -> dict[str, int]:
        """Every projection's checkpoint (a read-only store: as committed in the file)."""
        if self.read_only:
            cursor = self._reader()
            try:
                found = cursor.execute("SELECT projection, last_seq FROM checkpoints").fetchall()
            finally:
                cursor.close()
            return {str(name): int(last) for name, last in found}
        return dict(self._checkpoints)

    @property
    def lowest_checkpoint(self) -> int:
        """Replay the log from `lowest_checkpoint + 1` (it is 0 after a projection was rebuilt)."""
        return min(self.checkpoints().values(), default=0)

    # -- applying -------------------------------------------------------------------------------

    def apply(self, batch: Sequence[StoredMessage]) -> int:
        """Apply a batch of log messages to every projection, in one transaction with their
        checkpoints. Returns the lowest checkpoint afterwards. If a projection raises, nothing of
        the batch is kept (rows nor checkpoints) and the exception propagates."""
        return self.apply_decoded(batch, {})

    def apply_decoded(self, batch: Sequence[StoredMessage], decoded: Mapping[int, Sequence[Envelope]]) -> int:
        """`apply`, for a caller that has already decoded some of the messages (a service's fold):
        `decoded` maps a message's sequence to its envelopes (one, or a pack's), used as they are;
        the other messages are decoded here, as `apply` does. The envelopes given for a sequence
        must be the decode of that message's bytes (`events.decode_all`)."""
        return self._apply(batch, decoded, {})

    def apply_isolating(self, batch: Sequence[StoredMessage], decoded: Mapping[int, Sequence[Envelope]]) -> int:
        """`apply_decoded` for a service, which must go on whatever the log holds: when the batch
        raises, its halves are applied in turn, down to the one message that raises; that message
        is applied to every projection that can, and for each that cannot, a row in
        `projection_errors` (its position, the projection, the error) is written in the same
        transaction, its checkpoint moving past it with the others'. A fault none of them raises
        (a constraint checked at the commit) is pinned by applying the message to each projection
        alone, in a transaction of its own with its checkpoint. One log entry never stops
        the read models, nor puts the tree service in a crash loop. The store's own failures
        (`ENVIRONMENT_ERRORS`: a disk, memory) skip nothing: they propagate, as from
        `apply_decoded`, and the batch is applied when it comes again."""
        try:
            return self._apply(batch, decoded, {})
        except ENVIRONMENT_ERRORS:
            raise
        except Exception:
            low = self.lowest_checkpoint
            seqs = sorted({m.seq for m in batch if m.seq > low})
            if len(seqs) > 1:
                middle = seqs[len(seqs) // 2]
                self.apply_isolating([m for m in batch if m.seq < middle], decoded)
                return self.apply_isolating([m for m in batch if m.seq >= middle], decoded)
        skip: dict[str, str] = {}
        unattributed = 0
        at = ", ".join(map(str, sorted({m.seq for m in batch})))
        while True:  # one message: without each projection that raises on it, in turn
            try:
                return self._apply(batch, decoded, skip)
            except ENVIRONMENT_ERRORS:
                raise
            except Exception as exc:
                failed = self._failed
                if failed is None or failed in skip:
                    # Raised where no projection was applying (the commit, the error rows, the
                    # checkpoints): once more as it is (a passing fault), then each projection
                    # alone, so that only those whose own transaction fails leave it out; if even
                    # the error rows alone raise, the store itself is at fault.
                    unattributed += 1
                    if unattributed == 1:
                        continue
                    if unattributed > 2:
                        raise
                    skip.update(self._alone(batch, decoded, skip, at))
                    continue
                skip[failed] = f"{type(exc).__name__}: {exc}"[:ERROR_TEXT]
                _log.error("projection %s cannot apply the message at %s, left out: %s", failed, at, skip[failed])

    def _alone(self, batch: Sequence[StoredMessage], decoded: Mapping[int, Sequence[Envelope]],
               skip: Mapping[str, str], at: str) -> dict[str, str]:
        """Apply the message to each projection not in `skip` alone, each in a transaction of its
        own with its checkpoint (the others' stay); returns those whose transaction raises, with
        the error to record (`apply_isolating`: a fault none was blamed for)."""
        failing: dict[str, str] = {}
        for projection in self._projections:
            name = projection.name
            if name in skip:
                continue
            try:
                self._apply(batch, decoded, skip, only=name)
            except ENVIRONMENT_ERRORS:
                raise
            except Exception as exc:
                failing[name] = f"{type(exc).__name__}: {exc}"[:ERROR_TEXT]
                _log.error("projection %s cannot apply the message at %s (alone: its transaction fails), left "
                           "out: %s", name, at, failing[name])
        return failing

    def _apply(self, batch: Sequence[StoredMessage], decoded: Mapping[int, Sequence[Envelope]],
               skip: Mapping[str, str], only: str | None = None) -> int:
        """`apply_decoded`, leaving out the projections in `skip` (name -> error): their
        checkpoints move with the others' and each gets a `projection_errors` row per message.
        `only`: that projection alone (the others neither applied nor moved)."""
        self._failed = None
        if self.read_only:
            raise PermissionError("this store was opened read-only")
        with self._write_lock:
            low = self.lowest_checkpoint
            pending: dict[int, StoredMessage] = {}
            for message in batch:
                if message.seq > low:
                    pending.setdefault(message.seq, message)  # a seq twice in one batch: once
            if not pending:
                return low
            ordered = sorted(pending)
            top = ordered[-1]
            projections = [p for p in self._projections if only is None or p.name == only]
            advanced: dict[str, int] = {}
            with _gc_paused(self.pause_gc), _transaction(self._conn, self._projections):
                # Decoded events are many small objects: holding a whole large batch of them makes
                # the garbage collector rescan them again and again (the more, the larger). Chunks of
                # the batch are decoded and applied in turn, all in the one transaction, with the
                # cyclic collector paused (reference counting still frees them chunk by chunk).
                pruning: dict[str, _Pruning] = {}  # what the batch changed of `pruning`
                for start in range(0, len(ordered), self.chunk_size):
                    items = [item for seq in ordered[start : start + self.chunk_size]
                             for item in _items(pending[seq], decoded.get(seq))]
                    seqs = [item.seq for item in items]
                    for projection in projections:
                        done = self._checkpoints[projection.name]
                        if seqs[-1] > done and projection.name not in skip:
                            todo = items[bisect_right(seqs, done) :]
                            self._failed = projection.name
                            if projection.name in self._pruned:
                                self._apply_pruning(projection, todo, pruning)
                            else:
                                projection.apply(self._conn, todo)
                            self._failed = None
                advanced = {p.name: top for p in projections if top > self._checkpoints[p.name]}
                errors = [[seq, name, error] for seq in ordered for name, error in sorted(skip.items())
                          if name in advanced and seq > self._checkpoints[name]]
                if errors:
                    self._conn.executemany("INSERT INTO projection_errors VALUES (?, ?, ?)", errors)
                if advanced:  # one statement: each costs about a millisecond, whatever it does
                    self._conn.execute(
                        "UPDATE checkpoints SET last_seq = ? WHERE list_contains(?, projection)", [top, list(advanced)]
                    )
                if pruning:
                    self._conn.executemany("INSERT OR REPLACE INTO pruning VALUES (?, ?, ?, ?, ?)",
                                           [[name, *state] for name, state in pruning.items()])
            self._checkpoints.update(advanced)
            self._next_prune.update({name: state[0] for name, state in pruning.items()})
            return self.lowest_checkpoint

    def _apply_pruning(self, projection: Projection, items: list[Item], pruning: dict[str, _Pruning]) -> None:
        """`projection.apply(items)`, with a prune before each event at which the log's time first
        reaches the projection's next point (module docstring, "Retention"); `pruning` gets the
        projection's new state for the `pruning` table."""
        name = projection.name
        changed = pruning.get(name)
        next_at = changed[0] if changed is not None else self._next_prune.get(name)
        if next_at is not None:
            latest = max((item.event.time for item in items if not isinstance(item.event, Malformed)), default=None)
            if latest is None or latest < next_at:  # most batches: no point in them
                projection.apply(self._conn, items)
                return
        assert self._retention is not None
        every, start = self._every, 0
        for index, item in enumerate(items):
            envelope = item.event
            if isinstance(envelope, Malformed):
                continue
            time = envelope.time
            if next_at is not None and time < next_at:
                continue
            point = _EPOCH + (time - _EPOCH) // every * every
            if next_at is not None:  # (the first event the projection sees only starts its clock)
                if index > start:
                    projection.apply(self._conn, items[start:index])
                    start = index
                horizon = point - self._retention
                projection.prune(self._conn, horizon)
                changed = (point + every, horizon, self.retention, item.seq)
            else:
                changed = (point + every, None, None, None)
            next_at = changed[0]
            pruning[name] = changed
        if start < len(items):
            projection.apply(self._conn, items[start:])

    # -- reading --------------------------------------------------------------------------------

    def query_arrow(
        self,
        sql: str,
        params: Sequence[object] | Mapping[str, object] | None = None,
        *,
        max_rows: int | None = None,
        timeout: float | None = None,
    ) -> pa.Table:
        """Run one read-only statement (SELECT, FROM, WITH, DESCRIBE, SHOW, SUMMARIZE, EXPLAIN)
        on a fresh cursor inside a transaction that is rolled back; at most `max_rows` rows.
        `timeout` (seconds): a query still running then is stopped (`QueryTimeout`)."""
        _check_read_only(sql)
        cursor = self._reader()
        timer = None if timeout is None else _Interrupter(cursor, timeout)
        try:
            cursor.begin()
            try:
                relation = cursor.sql(sql, params=params)
                if relation is None:
                    raise NotReadOnly("the statement returned no result")
                if max_rows is not None:
                    relation = relation.limit(max_rows)
                return _to_arrow(relation)
            finally:
                cursor.rollback()
        except duckdb.InterruptException:
            raise QueryTimeout(f"the query ran {timeout:g} s and was stopped: ask for less (an aggregate, fewer "
                               "rows or columns) or export the tables") from None
        finally:
            if timer is not None:
                timer.stop()
            cursor.close()

    def query_batches(self, sql: str, rows: int = 65_536) -> Iterator[pa.RecordBatch]:
        """`query_arrow` without its row cap, as record batches of at most `rows` rows, read as
        they are consumed (an export of a large table holds one batch at a time)."""
        _check_read_only(sql)
        cursor = self._reader()
        try:
            cursor.begin()
            try:
                relation = cursor.sql(sql)
                if relation is None:
                    raise NotReadOnly("the statement returned no result")
                fetch = getattr(relation, "to_arrow_reader", None) or relation.fetch_arrow_reader
                yield from fetch(rows)
            finally:
                cursor.rollback()
        finally:
            cursor.close()

    def query(
        self,
        sql: str,
        params: Sequence[object] | Mapping[str, object] | None = None,
        *,
        max_rows: int | None = None,
        timeout: float | None = None,
    ) -> tuple[list[str], list[tuple[Any, ...]]]:
        """`query_arrow` as (column names, rows of Python values)."""
        table = self.query_arrow(sql, params, max_rows=max_rows, timeout=timeout)
        columns = [column.to_pylist(maps_as_pydicts="strict") for column in table.columns]
        rows = list(zip(*columns, strict=True)) if columns else []
        return list(table.column_names), rows

    def _reader(self) -> Connection:
        with self._cursor_lock:
            return self._reader_root.cursor()


class _Interrupter:
    """Interrupts a cursor's query once `timeout` seconds have passed, and again every 50 ms until
    stopped (an interrupt that comes before the query starts running is lost)."""

    def __init__(self, cursor: Connection, timeout: float) -> None:
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(cursor, timeout), daemon=True,
                                        name="poolwise-sql-timeout")
        self._thread.start()

    def _run(self, cursor: Connection, timeout: float) -> None:
        if self._stopped.wait(timeout):
            return
        while True:
            cursor.interrupt()
            if self._stopped.wait(0.05):
                return

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join()


_writers: set[str] = set()  # files open for writing in this process
_writers_lock = threading.Lock()


def _claim(key: str | None) -> None:
    """One writing store per file per process: a second would share the database (DuckDB gives
    one instance per file per process) with its own idea of the checkpoints."""
    if key is None:
        return
    with _writers_lock:
        if key in _writers:
            raise StoreBusy(f"{key} is already open for writing in this process")
        _writers.add(key)


def _release(key: str | None) -> None:
    if key is not None:
        with _writers_lock:
            _writers.discard(key)


CHECKPOINT_THRESHOLD = "64MB"

# DuckDB's own default memory limit is 80% of the machine's (or container's) memory, for each
# process that opens a read model: a tree service running for months fills its buffer pool up to
# that with cached blocks, beside the other services on the machine. A limit of its own keeps
# the service's size known; a query needing more spills to a temporary file next to the database
# or is refused ("Out of Memory Error"), and the service goes on (docs/operations.md, "Memory").
SQL_MEMORY_ENV = "POOLWISE_SQL_MEMORY"  # (set by `poolwise up|serve --sql-memory`, which checks it)
DEFAULT_SQL_MEMORY = "512MB"


def sql_memory() -> str:
    """The memory limit the read models' DuckDB connections get: `$POOLWISE_SQL_MEMORY`, else
    `DEFAULT_SQL_MEMORY` (DuckDB refuses a value it cannot read)."""
    return os.environ.get(SQL_MEMORY_ENV) or DEFAULT_SQL_MEMORY


def _connect(path: str, *, read_only: bool, external_access: bool) -> Connection:
    # DuckDB checkpoints its write-ahead log into the file once the log passes this size (default
    # 16MB): fewer checkpoints cost the tree service's projection less per gang under a burst
    # (docs/performance.md, session 4). The price: up to 64MB of log replayed on opening.
    config: dict[str, str | bool | int | float | list[str]] = {"checkpoint_threshold": CHECKPOINT_THRESHOLD,
                                                                "memory_limit": sql_memory()}
    if not external_access:
        config["enable_external_access"] = False
    try:
        conn = duckdb.connect(path, read_only=read_only, config=config)
    except (duckdb.IOException, duckdb.ConnectionException) as exc:
        if "lock" in str(exc).lower() or "different configuration" in str(exc):
            raise StoreBusy(
                f"{path} is held by a running service (DuckDB allows one writing process and no "
                f"readers beside it): query that service instead. ({exc})"
            ) from exc
        raise
    conn.execute("SET TimeZone = 'UTC'")
    return conn


def _literal(text: str) -> str:
    """An SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def _items(message: StoredMessage, envelopes: Sequence[Envelope] | None = None) -> list[Item]:
    """The items of one message: its event, or each event of a pack (`part` 0, 1, ...), each with
    the bytes it was decoded from when they are known (`raw`)."""
    if envelopes is None:
        try:
            envelopes = decode_all(message.data, read_envelope, read_pack)  # gang events as views (events.views)
        except DecodeError as exc:
            return [Item(message.seq, message.subject, Malformed(exc, message.data, message.msg_id))]
        except Exception as exc:  # the codec promises DecodeError; anything else must not block the stream
            error = DecodeError(None, "undecodable", f"{type(exc).__name__}: {exc}")
            return [Item(message.seq, message.subject, Malformed(error, message.data, message.msg_id))]
    raws = _raw_parts(message.data, len(envelopes))
    return [Item(message.seq, message.subject, e, part, raws[part] if raws else None)
            for part, e in enumerate(envelopes)]


def _raw_parts(data: bytes, count: int) -> list[bytes] | None:
    """The bytes of each event of a message: itself, or the parts of a pack in the layout
    `events.encode_pack` writes (another layout: None, the caller encodes what it needs)."""
    if not is_pack(data):
        return [data] if count == 1 else None
    if data[:2] != b"[{":
        return None
    parts = pack_parts(data)
    if len(parts) != count or not all(p[:1] == b"{" and p[-1:] == b"}" for p in parts):
        return None
    return parts


def _check_read_only(sql: str) -> None:
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise NotReadOnly(str(exc)) from exc
    if len(statements) != 1:
        raise NotReadOnly(f"give exactly one statement, got {len(statements)}")
    kind = statements[0].type
    if kind not in READ_ONLY_STATEMENTS:
        raise NotReadOnly(f"only read-only statements (SELECT, EXPLAIN) are allowed, got {kind.name}")


def _to_arrow(relation: duckdb.DuckDBPyRelation) -> pa.Table:
    to_table = getattr(relation, "to_arrow_table", None)  # duckdb >= 1.4; `arrow()` before
    table = to_table() if to_table is not None else relation.arrow()
    return table if isinstance(table, pa.Table) else table.read_all()


@contextmanager
def _gc_paused(pause: bool) -> Iterator[None]:
    if not pause or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@contextmanager
def _transaction(conn: Connection, projections: Sequence[Projection] = ()) -> Iterator[None]:
    """One transaction; on a rollback, each of `projections` is told (`Projection.rolled_back`)."""
    conn.begin()
    try:
        yield
    except BaseException:
        conn.rollback()
        _rolled_back(projections)
        raise
    try:
        conn.commit()
    except BaseException:
        with suppress(duckdb.Error):
            conn.rollback()
        _rolled_back(projections)
        raise


def _rolled_back(projections: Sequence[Projection]) -> None:
    for projection in projections:
        projection.rolled_back()
