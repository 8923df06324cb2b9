"""Append-only records of decisions: preemptions asked for, and inputs refused.

Tables:

    preemptions(tree, pool, gang, task, reason, requested_at, requested_seq, grace_period,
                excess MAP, entitlement MAP, allocation MAP, cause, for_gang, for_pools[])
    rejections(seq, tree, ref, input_type, rule, field, reason, input_seq, input_part, input_id,
               source, rejected_at, input)

`preemptions` has one row per task a `PreemptionRequested` names (DOMAIN §6: the whole gang is
taken, and each of its live tasks is named); `excess`, `entitlement` and `allocation` are the
pool's numbers that justified it. What became of a task: join `tasks` (the `gangs` projection).
Whom it was for: `cause` is `over_entitlement` (the pool held more than its entitlement and gives
it back) or `lower_priority` (a gang of higher priority, blocked at the head of a queue of the
same pool, takes its place: `for_gang`, read from the reason the preemption service wrote).
`for_pools` are the pools the resources go to: for `lower_priority` the pool itself; for
`over_entitlement` the tree's pools that, in its latest `EntitlementsComputed` before the request,
were entitled to more than they held and asked for more (entitlement share and demand share both
above the usage share), the deepest of them (a parent of such a pool is left out), the
preempted pool never. This projection keeps that set per tree in memory and in its table
`preemption_wants` (internal), which it writes when the set changes. A deleted pool (and what was
under it) is named no more at once: nothing can go to it, and a tree whose pools are all deleted
is computed no more, so it would be named for ever. It is remembered, though (`deleted`), as
admission's entitlement map remembers its numbers until a computation removes it: a pool
re-created at its path before that computation, whose numbers come out the same, is not written
again (`EntitlementsComputed` carries only what changed), and wants more again as it did.
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

import re
from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

import pyarrow as pa

from events import (
    EntitlementsComputed,
    Envelope,
    InputRejected,
    PoolConfigChanged,
    PoolDeleted,
    PreemptionRequested,
    event_class,
)
from projections.base import Connection, Item, Malformed, Projection, delete_older, insert_arrow, insert_rows

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
        ("cause", _STR),
        ("for_gang", _STR),
        ("for_pools", pa.list_(_STR)),
    ]
)
WANTS = pa.schema([("tree", _STR), ("path", _STR), ("deleted", pa.bool_())])
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


# A share above another by less than this is the same share (numbers on the wire have 9 digits).
SHARE_TOLERANCE = 1e-9
_ROOM_FOR = re.compile(r"makes room for gang (.+?) \(priority -?\d+, blocked at the head of queue ")


class PreemptionsProjection(Projection):
    """`preemptions`: every task a preemption request names, and whom it was for."""

    name = "preemptions"
    # 2: `task` (of the key) uncompressed: a deleted row's key is read back (gangs.py);
    # 3: cause, for_gang, for_pools (and the internal preemption_wants);
    # 4: preemption_wants.deleted (a deleted pool's want is remembered for its re-creation)
    schema_version = 4
    tables = ("preemptions", "preemption_wants")

    def __init__(self) -> None:
        # Per tree, the pools that want more as their latest computation says, each with whether
        # it is named (False: deleted since); None: not read back yet (after a start or a rollback).
        self._wanting: dict[str, dict[str, bool]] | None = None

    def create(self, conn: Connection) -> None:
        conn.execute(
            """CREATE TABLE preemptions (
                tree VARCHAR NOT NULL, pool VARCHAR, gang VARCHAR NOT NULL,
                task VARCHAR USING COMPRESSION uncompressed NOT NULL,
                reason VARCHAR, requested_at TIMESTAMPTZ, requested_seq BIGINT NOT NULL, grace_period DOUBLE,
                excess MAP(VARCHAR, DOUBLE), entitlement MAP(VARCHAR, DOUBLE), allocation MAP(VARCHAR, DOUBLE),
                cause VARCHAR, for_gang VARCHAR, for_pools VARCHAR[],
                PRIMARY KEY (requested_seq, task))"""
        )
        conn.execute("CREATE TABLE preemption_wants (tree VARCHAR NOT NULL, path VARCHAR NOT NULL, "
                     "deleted BOOLEAN NOT NULL DEFAULT false, PRIMARY KEY (tree, path))")
        self._wanting = None

    def rolled_back(self) -> None:
        self._wanting = None

    def apply(self, conn: Connection, items: Sequence[Item]) -> None:
        wanting = self._wanting
        if wanting is None:
            wanting = self._wanting = {}
            for tree, path, deleted in conn.execute("SELECT tree, path, deleted FROM preemption_wants").fetchall():
                wanting.setdefault(tree, {})[path] = not deleted
        changed: set[str] = set()
        rows: list[Row] = []
        for item in items:
            envelope = item.event
            if isinstance(envelope, Malformed):
                continue
            event = envelope.event
            kind = event_class(event)  # the model or its view (events.views)
            if kind is EntitlementsComputed:
                if _fold_wants(wanting, cast(EntitlementsComputed, event)):
                    changed.add(cast(EntitlementsComputed, event).tree)
                continue
            if kind is PoolDeleted:
                if _drop_wants(wanting, cast(PoolDeleted, event)):
                    changed.add(cast(PoolDeleted, event).tree)
                continue
            if kind is PoolConfigChanged:
                if _recreated(wanting, cast(PoolConfigChanged, event)):
                    changed.add(cast(PoolConfigChanged, event).tree)
                continue
            # by exact type, as events come off the wire: a failed isinstance of a model is slow
            if kind is not PreemptionRequested:
                continue
            event = cast(PreemptionRequested, event)
            numbers = {"excess": dict(event.excess), "entitlement": dict(event.entitlement),
                       "allocation": dict(event.allocation)}
            whom = _for_whom(event, wanting.get(event.tree, {}))
            for task in dict.fromkeys(event.tasks):  # a task named twice is one row
                rows.append({"tree": event.tree, "pool": event.pool, "gang": event.gang, "task": task,
                             "reason": event.reason, "requested_at": envelope.time, "requested_seq": item.seq,
                             "grace_period": event.grace_period, **numbers, **whom})
        if rows:
            insert_arrow(conn, "preemptions", pa.Table.from_pylist(rows, schema=PREEMPTIONS))
        if changed:
            trees = sorted(changed)
            conn.execute(f"DELETE FROM preemption_wants WHERE tree IN ({', '.join('?' for _ in trees)})", trees)
            wants = [(tree, path, not named) for tree in trees for path, named in sorted(wanting.get(tree, {}).items())]
            insert_rows(conn, "preemption_wants", WANTS, wants)

    def prune(self, conn: Connection, horizon: datetime) -> int:
        return delete_older(conn, "preemptions", "requested_at", horizon, "requested_seq, task", self.prune_rows)


def _fold_wants(wanting: dict[str, dict[str, bool]], event: EntitlementsComputed) -> bool:
    """Fold a computation into its tree's pools that want more; whether they changed. A pool
    deleted after the computation's trigger may still be in it: it stays unnamed."""
    pools = wanting.get(event.tree)
    before = dict(pools) if pools else {}
    if pools is None or event.replace:
        pools = wanting[event.tree] = {}
    for path in event.removed:
        pools.pop(path, None)
    for pool in event.pools:
        usage = pool.usage_share
        want = pool.fair_share > usage + SHARE_TOLERANCE and pool.demand_share > usage + SHARE_TOLERANCE
        if want:
            pools[pool.path] = before.get(pool.path, True)
        else:
            pools.pop(pool.path, None)
    return before != pools


def _drop_wants(wanting: dict[str, dict[str, bool]], event: PoolDeleted) -> bool:
    """A deleted pool, and the pools under it, are named no more (but remembered: module doc);
    whether any was named."""
    pools = wanting.get(event.tree)
    if not pools:
        return False
    under = event.path.rstrip("/") + "/"
    gone = [path for path, named in pools.items() if named and (path == event.path or path.startswith(under))]
    for path in gone:
        pools[path] = False
    return bool(gone)


def _recreated(wanting: dict[str, dict[str, bool]], event: PoolConfigChanged) -> bool:
    """A pool created at a deleted pool's path wants more as its remembered numbers say, until a
    computation says otherwise; whether it is named again."""
    pools = wanting.get(event.tree)
    if not event.created or not pools or pools.get(event.path) is not False:
        return False
    pools[event.path] = True
    return True


def _for_whom(event: PreemptionRequested, wants: dict[str, bool]) -> Row:
    """The cause, for_gang and for_pools columns of a preemption's rows (module docstring)."""
    found = _ROOM_FOR.match(event.reason)
    if found is not None:
        return {"cause": "lower_priority", "for_gang": found.group(1), "for_pools": [event.pool]}
    if not event.reason.startswith("over "):
        return {"cause": None, "for_gang": None, "for_pools": None}
    paths = sorted(path for path, named in wants.items() if named and path != event.pool and path != "/")
    deepest = [p for p in paths if not any(q.startswith(p.rstrip("/") + "/") for q in paths)]
    return {"cause": "over_entitlement", "for_gang": None, "for_pools": deepest}


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
            event = envelope.event
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
