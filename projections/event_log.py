"""The whole log as one SQL table: one row per event, in log order (`seq`, then `part`: a pack
of decisions is one message holding several events, `part` 0, 1, ...; every other message is one
event, `part` 0).

    SELECT type, count(*) FROM event_log GROUP BY ALL;
    SELECT seq, time, data->>'gang' AS gang FROM event_log WHERE type = 'GangAdmitted';
    SELECT seq, subject, error, raw FROM event_log WHERE type = '_malformed';

With the store's retention on, the rows whose `time` is before the horizon are deleted (the log
itself keeps every event); malformed messages, which have no time, are kept.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import pyarrow as pa

from events import Event
from events.fastencode import encode_event_body
from events.views import view_body
from projections.base import Connection, Item, Malformed, Projection, arrow_of, delete_older, insert_rows

MALFORMED = "_malformed"

SCHEMA = pa.schema(
    [
        ("seq", pa.int64()),
        ("part", pa.int32()),
        ("id", pa.string()),
        ("type", pa.string()),
        ("version", pa.int32()),
        ("time", pa.timestamp("us", tz="UTC")),
        ("source", pa.string()),
        ("subject", pa.string()),
        ("tree", pa.string()),
        ("basis", pa.int64()),
        ("causation", pa.string()),
        ("data", pa.string()),
        ("error", pa.string()),
        ("raw", pa.string()),
    ]
)

_DDL = """
CREATE TABLE event_log (
    seq       BIGINT NOT NULL,     -- stream sequence
    part      INTEGER NOT NULL,    -- the event's place in its message (a pack of decisions), else 0
    id        VARCHAR,             -- event id (Nats-Msg-Id); for a malformed message, what could be read
    type      VARCHAR NOT NULL,    -- event type, or '_malformed'
    version   INTEGER,             -- event version as decoded (after upcasting)
    time      TIMESTAMPTZ,
    source    VARCHAR,
    subject   VARCHAR NOT NULL,
    tree      VARCHAR,             -- the event's tree, if it has one
    basis     BIGINT,              -- decisions: the stream sequence they were based on
    causation VARCHAR,
    data      JSON {compressed},   -- the event body (NULL for a malformed message)
    error     VARCHAR,             -- malformed: why it could not be decoded
    raw       VARCHAR              -- malformed: the message as it came (invalid UTF-8 replaced)
)"""
# No PRIMARY KEY (seq, part): the store applies each event once (the checkpoint moves in the rows'
# transaction), and rows come in `seq` order, so DuckDB's per-row-group min/max of `seq` finds a
# range without an index. A key would cost the tree CPU at every row it writes, and an index of
# every event held in memory (docs/performance.md, session 7: "the event_log key").
# `data` is compressed with zstd when DuckDB writes it to the file, not with its default for strings
# (a dictionary, then FSST): JSON bodies, each different, take far fewer bytes that way for the same
# CPU (docs/performance.md, session 7).
ZSTD = "USING COMPRESSION zstd"
ZSTD_STORAGE = (1, 2, 0)  # the storage version of a database file from which DuckDB writes strings with zstd


def zstd_available(conn: Connection) -> bool:
    """Whether the database may compress strings with zstd: not a file written in an older storage
    version (DuckDB refuses the column then; a file keeps the version it was made with)."""
    rows = conn.execute("SELECT tags FROM duckdb_databases() WHERE database_name = current_database()").fetchall()
    version = (rows[0][0] or {}).get("storage_version") if rows else None  # e.g. 'v2.0.0+'; none in memory
    if not version:
        return True
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3]) >= ZSTD_STORAGE


class EventLogProjection(Projection):
    """Every event of the log as one row of `event_log`; undecodable messages as `_malformed`."""

    name = "event_log"
    schema_version = 4  # 3: no primary key; 4: `data` compressed with zstd
    tables = ("event_log",)

    def create(self, conn: Connection) -> None:
        conn.execute(_DDL.format(compressed=ZSTD if zstd_available(conn) else ""))

    def apply(self, conn: Connection, items: Sequence[Item]) -> None:
        insert_rows(conn, "event_log", SCHEMA, row_tuples(items))

    def prune(self, conn: Connection, horizon: datetime) -> int:
        return delete_older(conn, "event_log", "time", horizon, "seq, part", self.prune_rows)


def rows(items: Sequence[Item]) -> pa.Table:
    """The `event_log` rows of `items` as one Arrow table."""
    return arrow_of(SCHEMA, row_tuples(items))


def row_tuples(items: Sequence[Item]) -> list[tuple[Any, ...]]:
    """The `event_log` rows of `items`, each a tuple of values in the order of `SCHEMA`."""
    out: list[tuple[Any, ...]] = []
    append = out.append
    for item in items:
        envelope = item.event
        if isinstance(envelope, Malformed):
            append((item.seq, item.part, envelope.error.event_id or envelope.msg_id, MALFORMED, None, None, None,
                    item.subject, None, None, None, None, str(envelope.error), envelope.text))
            continue
        event = envelope.event
        append((item.seq, item.part, envelope.id, event.type, event.version, envelope.time, envelope.source,
                item.subject, getattr(event, "tree", None), envelope.basis, envelope.causation, body(event),
                None, None))
    return out


def body(event: Event) -> str:
    """The event as the `data` column holds it: `event.model_dump_json(exclude_none=True)`, written
    by `events.fastencode` where it handles the event, else from pydantic's serializer without the
    method's keyword handling."""
    fast = encode_event_body(event) or view_body(event)  # every view is written here (tests/events/test_views.py)
    if fast is None:
        fast = type(event).__pydantic_serializer__.to_json(event, exclude_none=True)
    return fast.decode()
