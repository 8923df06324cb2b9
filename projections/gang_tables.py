"""The tables of the gangs read model (projections/gangs.py): their Arrow schemas and DDL, the
states a gang and a task end in, and how a fold's rows are written back (`write_rows`).
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any

import pyarrow as pa

from projections.base import (
    Connection,
    arrow_of_dicts,
    delete_rows,
    insert_rows,
    small_write,
    update_rows,
    update_rows_of,
)
from projections.gang_rows import Keys

Row = dict[str, Any]

TERMINAL = frozenset({"succeeded", "failed", "killed", "lost", "preempted"})
FINISHED = frozenset({"done", "timed_out", "cancelled", "rejected"})

_STR = pa.string()
_TIME = pa.timestamp("us", tz="UTC")
_AMOUNTS = pa.map_(pa.string(), pa.float64())

GANGS = pa.schema(
    [
        ("tree", _STR),
        ("gang", _STR),
        ("job", _STR),
        ("user", _STR),
        ("pool", _STR),
        ("requested_pool", _STR),
        ("size", pa.int32()),
        ("members", pa.int32()),
        ("resources", _AMOUNTS),
        ("priority", pa.int64()),
        ("preemptible", pa.bool_()),
        ("revocable", pa.bool_()),
        ("controller", pa.bool_()),
        ("timeout", pa.float64()),
        ("state", _STR),
        ("queue", _STR),
        ("attempt", pa.int32()),
        ("arrival", pa.int64()),
        ("requeues", pa.int32()),
        ("enqueued_at", _TIME),
        ("admitted_at", _TIME),
        ("finished_at", _TIME),
        ("last_reason", _STR),
        ("updated_seq", pa.int64()),
        ("updated_at", _TIME),
    ]
)
TASKS = pa.schema(
    [
        ("tree", _STR),
        ("task", _STR),
        ("gang", _STR),
        ("job", _STR),
        ("pool", _STR),
        ("member", pa.int32()),
        ("resources", _AMOUNTS),
        ("state", _STR),
        ("preemption_requested", pa.bool_()),
        ("started_at", _TIME),
        ("updated_seq", pa.int64()),
        ("updated_at", _TIME),
    ]
)
HELD = pa.schema(
    [("seq", pa.int64()), ("part", pa.int32()), ("type", _STR), ("message", pa.binary()), ("refused", _STR),
     ("anchor", pa.int64()), ("anchor_rank", pa.int32()), ("anchor_part", pa.int32())]
)
HELD_KEY = pa.schema([("seq", pa.int64()), ("part", pa.int32())])

UNCOMPRESSED = "USING COMPRESSION uncompressed"  # (the key columns: projections/gangs.py, "Retention")

DDL = (
    f"""CREATE TABLE gangs (
        tree VARCHAR {UNCOMPRESSED} NOT NULL, gang VARCHAR {UNCOMPRESSED} NOT NULL, job VARCHAR, "user" VARCHAR,
        pool VARCHAR, requested_pool VARCHAR, size INTEGER, members INTEGER, resources MAP(VARCHAR, DOUBLE),
        priority BIGINT, preemptible BOOLEAN, revocable BOOLEAN, controller BOOLEAN, timeout DOUBLE,
        state VARCHAR NOT NULL, queue VARCHAR, attempt INTEGER, arrival BIGINT, requeues INTEGER,
        enqueued_at TIMESTAMPTZ, admitted_at TIMESTAMPTZ, finished_at TIMESTAMPTZ, last_reason VARCHAR,
        updated_seq BIGINT, updated_at TIMESTAMPTZ, PRIMARY KEY (tree, gang))""",
    f"""CREATE TABLE tasks (
        tree VARCHAR {UNCOMPRESSED} NOT NULL, task VARCHAR {UNCOMPRESSED} NOT NULL, gang VARCHAR NOT NULL,
        job VARCHAR, pool VARCHAR, member INTEGER, resources MAP(VARCHAR, DOUBLE), state VARCHAR NOT NULL,
        preemption_requested BOOLEAN, started_at TIMESTAMPTZ, updated_seq BIGINT, updated_at TIMESTAMPTZ,
        PRIMARY KEY (tree, task))""",
    """CREATE TABLE gangs_held (
        seq BIGINT NOT NULL, part INTEGER NOT NULL, type VARCHAR NOT NULL, message BLOB NOT NULL,
        refused VARCHAR, anchor BIGINT, anchor_rank INTEGER, anchor_part INTEGER, PRIMARY KEY (seq, part))""",
    "CREATE TABLE gangs_answered (answered BIGINT NOT NULL)",
    "INSERT INTO gangs_answered VALUES (0)",
)


def write_rows(conn: Connection, table: str, schema: pa.Schema, key: tuple[str, str],
               rows: list[tuple[tuple[str, str], Row]], stored: dict[tuple[str, str], tuple[Row, object]],
               changed: set[str], new: list[tuple[Any, ...]], keys: Keys | None) -> None:
    """The rows read and changed in place (not their resources: a MAP is costly to update)
    are updated, in the `changed` columns; the others replace whatever has their key (a new
    task may take over another gang's task id) or are inserted (a gang that had no row), with
    the `new` rows (tuples in the order of `schema`: gangs that had no row, and their tasks)."""
    updated: list[Row] = []
    replaced: list[Row] = []
    for k, row in rows:
        before = stored.get(k)
        if before is not None and before[0] is row and before[1] is row["resources"]:
            updated.append(row)
        else:
            replaced.append(row)
    if updated:
        changes = pa.schema([f for f in schema if f.name in key or (f.name in changed and f.name != "resources")])
        if small_write(changes, len(updated)):
            update_rows_of(conn, table, key, changes, list(map(itemgetter(*changes.names), updated)))
        else:
            update_rows(conn, table, key, arrow_of_dicts(changes, updated))
    if replaced or new:
        written = [*map(itemgetter(*key), replaced), *map(itemgetter(*map(schema.names.index, key)), new)]
        if table == "gangs":  # a gang the fold did not read has no row, nor has a new one
            exists = any(k in stored for k in written[:len(replaced)])
        else:  # a new task may take over a task id of a gang that was not read
            present = None if keys is None else keys.tasks
            exists = present is None or any(hash(k) in present for k in written)
        if exists:
            delete_rows(conn, table, pa.schema([schema.field(name) for name in key]), written)
        insert_rows(conn, table, schema, [*map(itemgetter(*schema.names), replaced), *new])


__all__ = ["DDL", "FINISHED", "GANGS", "HELD", "HELD_KEY", "TASKS", "TERMINAL", "write_rows"]
