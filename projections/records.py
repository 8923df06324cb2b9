"""Append-only records of decisions: preemptions asked for, and inputs refused.

Tables:

    preemptions(tree, pool, gang, task, reason, requested_at, requested_seq, grace_period,
                excess MAP, entitlement MAP, allocation MAP)
    rejections(seq, tree, ref, input_type, rule, field, reason, input_seq, input_part, input_id,
               source, rejected_at, input)

`preemptions` has one row per task a `PreemptionRequested` names (DOMAIN §6: the whole gang is
taken, and each of its live tasks is named); `excess`, `entitlement` and `allocation` are the
pool's numbers that justified it. What became of a task: join `tasks` (the `gangs` projection).
`rejections` has one row per `InputRejected`: `ref` names what was refused (a gang, a task, a pool
path, or `seq:<n>` for an undecodable message), `rule` the broken rule, `input_seq` where the
refused input stands in the log (NULL for refused commands, which never became events) and
`input_part` its place in that message (0 unless the message is a pack of inputs), `source`
the service that refused it, and `input` the input as it came.

    SELECT p.pool, p.gang, p.task, p.reason, t.state FROM preemptions p JOIN tasks t USING (tree, task);
    SELECT rule, count(*) FROM rejections GROUP BY rule ORDER BY 2 DESC;

With the store's retention on, rows requested (`requested_at`) or refused (`rejected_at`) before
the horizon are deleted.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

import pyarrow as pa

from events import Envelope, InputRejected, PreemptionRequested
from projections.base import Connection, Item, Projection, delete_older, insert_arrow

Row = dict[str, Any]

_STR = pa.string()
_TIME = pa.timestamp("us", tz="UTC")
_AMOUNTS = pa.map_(pa.string(), pa.float64())

PREEMPTIONS = pa.schema(
    [
        ("tree", _STR),
        ("pool", _STR),
        ("gang", _STR),
        ("task", _STR),
        ("reason", _STR),
        ("requested_at", _TIME),
        ("requested_seq", pa.int64()),
        ("grace_period", pa.float64()),
        ("excess", _AMOUNTS),
        ("entitlement", _AMOUNTS),
        ("allocation", _AMOUNTS),
    ]
)
REJECTIONS = pa.schema(
    [
        ("seq", pa.int64()),
        ("tree", _STR),
        ("ref", _STR),
        ("input_type", _STR),
        ("rule", _STR),
        ("field", _STR),
        ("reason", _STR),
        ("input_seq", pa.int64()),
        ("input_part", pa.int32()),
        ("input_id", _STR),
        ("source", _STR),
        ("rejected_at", _TIME),
        ("input", _STR),
    ]
)


class PreemptionsProjection(Projection):
    """`preemptions`: every task a preemption request names."""

    name = "preemptions"
    schema_version = 2  # 2: `task` (of the key) uncompressed: a deleted row's key is read back (gangs.py)
    tables = ("preemptions",)

    def create(self, conn: Connection) -> None:
        conn.execute(
            """CREATE TABLE preemptions (
                tree VARCHAR NOT NULL, pool VARCHAR, gang VARCHAR NOT NULL,
                task VARCHAR USING COMPRESSION uncompressed NOT NULL,
                reason VARCHAR, requested_at TIMESTAMPTZ, requested_seq BIGINT NOT NULL, grace_period DOUBLE,
                excess MAP(VARCHAR, DOUBLE), entitlement MAP(VARCHAR, DOUBLE), allocation MAP(VARCHAR, DOUBLE),
                PRIMARY KEY (requested_seq, task))"""
        )

    def apply(self, conn: Connection, items: Sequence[Item]) -> None:
        rows: list[Row] = []
        for item in items:
            envelope = item.event
            # by exact type, as events come off the wire: a failed isinstance of a model is slow
            if not isinstance(envelope, Envelope) or type(envelope.event) is not PreemptionRequested:
                continue
            event = cast(PreemptionRequested, envelope.event)
            numbers = {"excess": dict(event.excess), "entitlement": dict(event.entitlement),
                       "allocation": dict(event.allocation)}
            for task in dict.fromkeys(event.tasks):  # a task named twice is one row
                rows.append({"tree": event.tree, "pool": event.pool, "gang": event.gang, "task": task,
                             "reason": event.reason, "requested_at": envelope.time, "requested_seq": item.seq,
                             "grace_period": event.grace_period, **numbers})
        if rows:
            insert_arrow(conn, "preemptions", pa.Table.from_pylist(rows, schema=PREEMPTIONS))

    def prune(self, conn: Connection, horizon: datetime) -> int:
        return delete_older(conn, "preemptions", "requested_at", horizon, "requested_seq, task", self.prune_rows)


class RejectionsProjection(Projection):
    """`rejections`: every refused input, with the rule and the reason."""

    name = "rejections"
    schema_version = 2
    tables = ("rejections",)

    def create(self, conn: Connection) -> None:
        conn.execute(
            """CREATE TABLE rejections (
                seq BIGINT PRIMARY KEY, tree VARCHAR, ref VARCHAR NOT NULL, input_type VARCHAR, rule VARCHAR,
                field VARCHAR, reason VARCHAR, input_seq BIGINT, input_part INTEGER, input_id VARCHAR, source VARCHAR,
                rejected_at TIMESTAMPTZ, input VARCHAR)"""
        )

    def apply(self, conn: Connection, items: Sequence[Item]) -> None:
        rows: list[Row] = []
        for item in items:
            envelope = item.event
            if not isinstance(envelope, Envelope) or type(envelope.event) is not InputRejected:
                continue
            event = cast(InputRejected, envelope.event)
            rows.append({"seq": item.seq, "tree": event.tree, "ref": event.ref, "input_type": event.input_type,
                         "rule": event.rule, "field": event.field, "reason": event.reason,
                         "input_seq": event.input_seq,
                         "input_part": None if event.input_seq is None else event.input_part or 0,
                         "input_id": event.input_id, "source": envelope.source,
                         "rejected_at": envelope.time, "input": event.input.replace("\x00", "\ufffd")})
        if rows:
            insert_arrow(conn, "rejections", pa.Table.from_pylist(rows, schema=REJECTIONS))

    def prune(self, conn: Connection, horizon: datetime) -> int:
        return delete_older(conn, "rejections", "rejected_at", horizon, "seq", self.prune_rows)
