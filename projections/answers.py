"""Answers of SQL over the read models as they travel: Arrow IPC (zstd) cut to fit one message,
the tables an export writes, and the order it pages them in. No NATS here: the tree service's
request handler and the CLI (`poolwise sql`, `poolwise export`) both use it.

    page = fit(store.query_arrow(sql, max_rows=limit + 1), max_bytes)   # at most max_bytes of IPC
    table = from_ipc(page.data)
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from projections.base import quote
from projections.store import ProjectionStore

# Tables the read models keep for themselves: neither listed nor exported.
INTERNAL = frozenset({"gangs_held", "gangs_answered", "pruning", "preemption_wants"})
# Tables with no primary key, and the columns that tell their rows apart all the same.
NATURAL_KEYS: dict[str, tuple[str, ...]] = {
    "event_log": ("seq", "part"),
    "trees": ("tree",),
    "pools": ("tree", "path"),
    "pool_resources": ("tree", "path", "kind"),
    "hosts": ("host",),
    "host_resources": ("host", "kind"),
}


@dataclass(frozen=True, slots=True)
class Page:
    """The first `rows` rows of an answer as Arrow IPC; `cut`: rows were left out to fit."""

    data: bytes
    rows: int
    cut: bool


def to_ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression="zstd")
    with pa.ipc.new_stream(sink, table.schema, options=options) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def from_ipc(data: bytes) -> pa.Table:
    with pa.ipc.open_stream(pa.py_buffer(data)) as reader:
        return reader.read_all()


def fit(table: pa.Table, max_bytes: int | None) -> Page:
    """`table` as IPC, or its longest head (halving, then growing back by halves) that fits in
    `max_bytes` (None: no bound). Even no row at all must fit (the schema)."""
    data = to_ipc(table)
    if max_bytes is None or len(data) <= max_bytes:
        return Page(data, table.num_rows, False)
    good, good_rows = to_ipc(table.slice(0, 0)), 0
    if len(good) > max_bytes:
        raise ValueError(f"not even the answer's columns fit in {max_bytes:,} bytes")
    low, high = 0, table.num_rows  # good_rows fits; high does not
    while high - low > 1:
        middle = (low + high) // 2
        found = to_ipc(table.slice(0, middle))
        if len(found) <= max_bytes:
            low, good, good_rows = middle, found, middle
        else:
            high = middle
    return Page(good, good_rows, True)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"))


def tables(store: ProjectionStore) -> list[str]:
    """The read models' tables in the store's main database, by name (internal ones left out)."""
    _, rows = store.query("SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() "
                          "AND NOT temporary AND NOT internal ORDER BY table_name")
    return [name for (name,) in rows if name not in INTERNAL]


def keys(store: ProjectionStore, table: str) -> list[str]:
    """The columns that tell the rows of `table` apart: its primary key, or `NATURAL_KEYS`'s
    (none known: [])."""
    _, rows = store.query("SELECT constraint_column_names FROM duckdb_constraints() WHERE constraint_type = "
                          "'PRIMARY KEY' AND table_name = ? AND database_name = current_database()", [table])
    return list(rows[0][0]) if rows else list(NATURAL_KEYS.get(table, ()))


def page_sql(table: str, key: Sequence[str], after: Sequence[object] | None,
             offset: int = 0) -> tuple[str, list[object]]:
    """The SQL of a page of `table` in key order, after the key `after` (None: from the start);
    a table without a key in the order of all its columns, from row `offset`. The page's size is
    the query's row cap (`max_rows`)."""
    name = quote(table)
    if not key:
        return f"SELECT * FROM {name} ORDER BY ALL OFFSET {int(offset)}", []
    columns = ", ".join(quote(column) for column in key)
    if after is None:
        return f"SELECT * FROM {name} ORDER BY {columns}", []
    marks = ", ".join("?" for _ in key)
    return f"SELECT * FROM {name} WHERE ({columns}) > ({marks}) ORDER BY {columns}", list(after)
