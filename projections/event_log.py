"""The whole log as one SQL table: one row per event, in log order (`seq`, then `part`: a pack
of decisions is one message holding several events, `part` 0, 1, ...; every other message is one
event, `part` 0).

    SELECT type, count(*) FROM event_log GROUP BY ALL;
    SELECT seq, time, data->>'gang' AS gang FROM event_log WHERE type = 'GangAdmitted';
    SELECT seq, subject, error, raw FROM event_log WHERE type = '_malformed';
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import pyarrow as pa

from projections.base import Connection, Item, Malformed, Projection, insert_arrow

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
    data      JSON,                -- the event body (NULL for a malformed message)
    error     VARCHAR,             -- malformed: why it could not be decoded
    raw       VARCHAR,             -- malformed: the message as it came (invalid UTF-8 replaced)
    PRIMARY KEY (seq, part)
)"""


class EventLogProjection(Projection):
    """Every event of the log as one row of `event_log`; undecodable messages as `_malformed`."""

    name = "event_log"
    schema_version = 2
    tables = ("event_log",)

    def create(self, conn: Connection) -> None:
        conn.execute(_DDL)

    def apply(self, conn: Connection, items: Sequence[Item]) -> None:
        insert_arrow(conn, "event_log", rows(items))


def rows(items: Sequence[Item]) -> pa.Table:
    """The `event_log` rows of `items` as one Arrow table."""
    n = len(items)
    seq: list[int] = [0] * n
    parts: list[int] = [0] * n
    ids: list[str | None] = [None] * n
    types: list[str] = [MALFORMED] * n
    versions: list[int | None] = [None] * n
    times: list[datetime | None] = [None] * n
    sources: list[str | None] = [None] * n
    subjects: list[str] = [""] * n
    trees: list[str | None] = [None] * n
    bases: list[int | None] = [None] * n
    causations: list[str | None] = [None] * n
    data: list[str | None] = [None] * n
    errors: list[str | None] = [None] * n
    raws: list[str | None] = [None] * n
    for i, item in enumerate(items):
        seq[i] = item.seq
        parts[i] = item.part
        subjects[i] = item.subject
        envelope = item.event
        if isinstance(envelope, Malformed):
            ids[i] = envelope.error.event_id or envelope.msg_id
            errors[i] = str(envelope.error)
            raws[i] = envelope.text
            continue
        event = envelope.event
        ids[i] = envelope.id
        types[i] = event.type
        versions[i] = event.version
        times[i] = envelope.time
        sources[i] = envelope.source
        trees[i] = getattr(event, "tree", None)
        bases[i] = envelope.basis
        causations[i] = envelope.causation
        data[i] = event.model_dump_json(exclude_none=True)
    columns: list[list[Any]] = [
        seq, parts, ids, types, versions, times, sources, subjects, trees, bases, causations, data, errors, raws
    ]
    return pa.Table.from_arrays(
        [pa.array(values, type=field.type) for values, field in zip(columns, SCHEMA, strict=True)],
        schema=SCHEMA,
    )
