"""What a projection is, and the few DuckDB helpers every projection uses.

A projection turns events into rows. The `ProjectionStore` calls `apply(conn, items)` inside the
transaction that also advances the projection's checkpoint, so a projection must:

- write only through `conn` and never commit, roll back or begin a transaction itself;
- write rows as Arrow batches (`insert_arrow`) or set-based SQL, never one statement per row;
- expect to be called several times for one batch (the store hands a large batch over in
  chunks, in log order, all in the one transaction): read back what it wrote earlier through `conn`
  (or keep it in memory, and forget it in `rolled_back`: the store is the only writer);
- accept every item, including `Malformed` ones and event types it does not know (skip them):
  an exception blocks the stream, since the same batch is delivered again.
"""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import NamedTuple

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


def insert_arrow(conn: Connection, table: str, data: pa.Table) -> None:
    """Insert every row of `data` into `table`, matching columns by name (one statement)."""
    if data.num_rows == 0:
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
