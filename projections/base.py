"""What a projection is, and the few DuckDB helpers every projection uses.

A projection turns events into rows. The `ProjectionStore` calls `apply(conn, items)` inside the
transaction that also advances the projection's checkpoint, so a projection must:

- write only through `conn` and never commit, roll back or begin a transaction itself;
- write rows with one statement per table and kind of change, never one statement per row:
  `insert_rows` / `update_rows_of` / `delete_rows` (an appender for a few rows, Arrow for many),
  `insert_arrow`, or set-based SQL; each statement costs about half a millisecond whatever its
  size, and registering an Arrow table for it about as much again;
- expect to be called several times for one batch (the store hands a large batch over in
  chunks, in log order, all in the one transaction): read back what it wrote earlier through `conn`
  (or keep it in memory, and forget it in `rolled_back`: the store is the only writer);
- accept every item, including `Malformed` ones and event types it does not know (skip them):
  an exception blocks the stream, since the same batch is delivered again.

A projection whose rows may be dropped after a retention period (the store's `retention`, off by
default) overrides `prune(conn, horizon)`: the store calls it between two `apply` calls, at fixed
points of the log (`projections/store.py`, "Retention"), in the same transaction.
"""

from __future__ import annotations

import itertools
import weakref
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, NamedTuple

import duckdb
import pyarrow as pa

from events import DecodeError, Envelope

Connection = duckdb.DuckDBPyConnection


@dataclass(frozen=True, slots=True)
class Malformed:
    """A message of the log that is not a valid event: why (`error`) and what it was (`raw`)."""

    error: DecodeError
    raw: bytes
    msg_id: str | None = None

    @property
    def text(self) -> str:
        """The raw bytes as text (invalid UTF-8 replaced, NUL removed) for storing in a VARCHAR."""
        return self.raw.decode("utf-8", errors="replace").replace("\x00", "\ufffd")


class Item(NamedTuple):
    """One event handed to projections: its log position, subject and decoded event. A message
    that is a pack (`events.encode_pack`) gives an item per event, with the same `seq` and its
    place in the pack as `part`; `(seq, part)` identifies an event in the log."""

    seq: int
    subject: str
    event: Envelope | Malformed
    part: int = 0
    raw: bytes | None = None  # the bytes `event` was decoded from (its part of a pack), if known


class Projection(ABC):
    """A read model built from the log. Subclasses set `name`, `schema_version` and `tables`.

    Bump `schema_version` whenever the tables or the meaning of their rows change: the store then
    drops and recreates the projection and replays the log into it from the start.
    """

    name: str
    schema_version: int
    tables: tuple[str, ...] = ()
    # The store's retention in seconds of log time (None: off), set by the store that owns it.
    retention: float | None = None
    # At most this many rows of a table deleted by one `prune` (the rest goes at the next one).
    prune_rows: int = 50_000

    @abstractmethod
    def create(self, conn: Connection) -> None:
        """Create the projection's (empty) tables."""

    def drop(self, conn: Connection) -> None:
        """Drop the projection's tables (default: every name in `tables`, last first)."""
        for table in reversed(self.tables):
            conn.execute(f"DROP TABLE IF EXISTS {quote(table)}")

    @abstractmethod
    def apply(self, conn: Connection, items: Sequence[Item]) -> None:
        """Apply items (in log order, all after this projection's checkpoint) to the tables."""

    def rolled_back(self) -> None:
        """The transaction of the batch being applied was rolled back: a projection that keeps
        what it wrote in memory (to not read it back) forgets it here. Default: nothing kept."""
        return

    def prune(self, conn: Connection, horizon: datetime) -> int:
        """Delete the rows that are history older than `horizon` (log time), at most `prune_rows`
        per table, the oldest first, in an order that depends on the rows only (the same tables
        give the same deletions); return how many rows went. Called by the store at fixed points
        of the log when its retention is on, never otherwise. Default: nothing is pruned."""
        return 0


def quote(identifier: str) -> str:
    """An SQL identifier, double-quoted."""
    return '"' + identifier.replace('"', '""') + '"'


_view_ids = itertools.count(1)


@contextmanager
def registered(conn: Connection, data: pa.Table) -> Iterator[str]:
    """An Arrow table visible to SQL under a fresh view name while inside the `with` block."""
    name = f"_pw_arrow_{next(_view_ids)}"
    conn.register(name, data)
    try:
        yield name
    finally:
        conn.unregister(name)


# Up to this many rows, a statement's rows go through an appender (no Arrow table to build nor to
# register: a small write costs about half); above it, through Arrow (an appender converts each
# value in turn: slower for many rows, and nested values, maps and lists, cost it most).
SMALL_WRITE = 64  # rows with a nested value
SMALL_FLAT_WRITE = 256  # rows of plain values


def small_write(schema: pa.Schema, count: int) -> bool:
    """Whether `count` rows of `schema` go through an appender."""
    if count > SMALL_FLAT_WRITE:
        return False
    return count <= SMALL_WRITE or not any(pa.types.is_nested(field.type) for field in schema)


def insert_rows(conn: Connection, table: str, schema: pa.Schema, rows: Sequence[tuple[Any, ...]]) -> None:
    """Insert `rows` (tuples of values in the order of `schema`'s fields, which name columns of
    `table`) into `table`: one statement."""
    if not rows:
        return
    if small_write(schema, len(rows)):
        _append(conn, (table, tuple(schema.names), "insert", ()), rows)
        return
    insert_arrow(conn, table, arrow_of(schema, rows))


def update_rows_of(conn: Connection, table: str, key: Sequence[str], schema: pa.Schema,
                   rows: Sequence[tuple[Any, ...]]) -> None:
    """`update_rows` for rows given as tuples in the order of `schema` (its fields: the `key`
    columns and the columns to set): one statement."""
    if not rows:
        return
    if small_write(schema, len(rows)):
        _append(conn, (table, tuple(schema.names), "update", tuple(key)), rows)
        return
    update_rows(conn, table, key, arrow_of(schema, rows))


def delete_rows(conn: Connection, table: str, schema: pa.Schema, keys: Sequence[tuple[Any, ...]]) -> None:
    """`delete_keys` for keys given as tuples in the order of `schema` (the key columns): one statement."""
    if not keys:
        return
    if small_write(schema, len(keys)):
        _append(conn, (table, (), "delete", tuple(schema.names)), keys)
        return
    delete_keys(conn, table, arrow_of(schema, keys))


_Action = Literal["insert", "update", "delete"]
_AppenderKey = tuple[str, tuple[str, ...], _Action, tuple[str, ...]]  # table, columns, action, key columns
_appenders: weakref.WeakKeyDictionary[Connection, dict[_AppenderKey, duckdb.Appender]] = weakref.WeakKeyDictionary()


def _append(conn: Connection, spec: _AppenderKey, rows: Sequence[tuple[Any, ...]]) -> None:
    """Apply `rows` with one statement, through the connection's appender for `spec` (made once:
    making one costs about as much as flushing it). Nothing stays buffered: a failed append or
    flush drops the appender and its rows (a later rollback must not leave rows to flush)."""
    kept = _appenders.get(conn)
    if kept is None:
        kept = _appenders[conn] = {}
    appender = kept.get(spec)
    if appender is None:
        table, columns, action, key = spec
        appender = kept[spec] = conn.appender(table, columns=list(columns) or None, action=action,
                                              key=list(key) or None)
    try:
        appender.append_rows(rows)
        appender.flush()
    except BaseException:
        del kept[spec]
        appender.clear()
        raise


def arrow_of(schema: pa.Schema, rows: Sequence[tuple[Any, ...]]) -> pa.Table:
    """Rows given as tuples (or lists) in the order of `schema`'s fields, as an Arrow table."""
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(schema)
    arrays = [column_array(values, field.type) for values, field in zip(columns, schema, strict=True)]
    return pa.Table.from_arrays(arrays, schema=schema)


def arrow_of_dicts(schema: pa.Schema, rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    """Rows given as mappings with (at least) the names of `schema`'s fields, as an Arrow table
    of `schema` (the same as `pa.Table.from_pylist(rows, schema=schema)`, about a sixth cheaper)."""
    columns = [[row[name] for row in rows] for name in schema.names]
    arrays = [column_array(values, field.type) for values, field in zip(columns, schema, strict=True)]
    return pa.Table.from_arrays(arrays, schema=schema)


def fetch_rows(conn: Connection, sql: str, params: Sequence[object] = ()) -> list[dict[str, Any]]:
    """Rows of a query as dicts (maps as dicts, timestamps as aware datetimes), through Arrow."""
    relation = conn.sql(sql, params=list(params))
    to_table = getattr(relation, "to_arrow_table", None)  # duckdb >= 1.4; `arrow()` before
    table = to_table() if to_table is not None else relation.arrow()
    if not isinstance(table, pa.Table):
        table = table.read_all()
    rows: list[dict[str, Any]] = table.to_pylist(maps_as_pydicts="strict")
    return rows


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_micros_of: dict[datetime, int] = {}  # a batch's events share a few instants: each converted once


def _micros(value: datetime | None) -> int | None:
    if value is None:
        return None
    micros = _micros_of.get(value)
    if micros is None:
        if len(_micros_of) >= 4096:
            _micros_of.clear()
        micros = _micros_of[value] = (value - _EPOCH) // _MICROSECOND
    return micros


def column_array(values: Sequence[Any], type_: pa.DataType) -> pa.Array:
    """`pa.array(values, type_)`; an aware `datetime` column of microseconds goes through their
    integers, each distinct instant converted once (the events of a batch share a few instants;
    Arrow converts every value, about 0.1 µs each)."""
    if pa.types.is_timestamp(type_) and type_.unit == "us" and type_.tz is not None:
        try:
            return pa.array(list(map(_micros, values)), pa.int64()).view(type_)
        except TypeError:  # a naive datetime (or not a datetime): as Arrow reads it
            return pa.array(values, type_)
    return pa.array(values, type_)


def insert_arrow(conn: Connection, table: str, data: pa.Table) -> None:
    """Insert every row of `data` into `table`, matching columns by name (one statement)."""
    if data.num_rows == 0:
        return
    if data.column_names == conn.table(quote(table)).columns:
        # the table's columns, in order: inserted from a relation, with no view to register
        # (registering and unregistering one costs more than the insert of a few hundred rows)
        conn.from_arrow(data).insert_into(quote(table))
        return
    with registered(conn, data) as view:
        conn.execute(f"INSERT INTO {quote(table)} BY NAME SELECT * FROM {view}")


def update_rows(conn: Connection, table: str, key: Sequence[str], data: pa.Table) -> None:
    """Set every column of `data` but the `key` columns on the row of `table` with the same key
    (one statement; each key at most once in `data`). Far cheaper than a delete and an insert."""
    if data.num_rows == 0:
        return
    target = quote(table)
    with registered(conn, data) as view:
        sets = ", ".join(f"{quote(c)} = v.{quote(c)}" for c in data.column_names if c not in key)
        match = " AND ".join(f"{target}.{quote(c)} = v.{quote(c)}" for c in key)
        conn.execute(f"UPDATE {target} SET {sets} FROM {view} AS v WHERE {match}")


def delete_keys(conn: Connection, table: str, keys: pa.Table) -> None:
    """Delete the rows of `table` whose key columns (the columns of `keys`) match a row of `keys`."""
    if keys.num_rows == 0:
        return
    with registered(conn, keys) as view:
        match = " AND ".join(f"t.{quote(c)} = k.{quote(c)}" for c in keys.column_names)
        conn.execute(f"DELETE FROM {quote(table)} AS t USING {view} AS k WHERE {match}")


def delete_older(conn: Connection, table: str, time_column: str, horizon: datetime, order: str, limit: int,
                 also: str = "TRUE") -> int:
    """Delete the rows of `table` whose `time_column` is before `horizon` (and for which the SQL
    condition `also` holds): at most `limit` of them, the first in `order` (a list of columns that
    orders the rows totally). Returns how many went."""
    target = quote(table)
    where = f"{quote(time_column)} < ? AND ({also})"
    ((found,),) = conn.execute(f"SELECT count(*) FROM {target} WHERE {where}", [horizon]).fetchall()
    if not found:
        return 0
    if found <= limit:  # all of them: no order to find (a third of the cost)
        conn.execute(f"DELETE FROM {target} WHERE {where}", [horizon]).fetchall()
        return int(found)
    conn.execute(f"DELETE FROM {target} WHERE rowid IN (SELECT rowid FROM {target} WHERE {where} "
                 f"ORDER BY {order} LIMIT ?)", [horizon, limit]).fetchall()
    return limit
