"""What each pool is entitled to, how that changed, and whether it starves (DOMAIN §3, §6, §7).

Tables:

    pool_entitlements(tree, path, kind, entitlement, non_slack_entitlement, slack_entitlement,
                      capacity, fair_share, usage_share, demand_share, dominant_kind,
                      computed_seq, computed_at)
    entitlement_history(tree, path, seq, computed_at, entitlement MAP, non_slack_entitlement MAP,
                        slack_entitlement MAP, fair_share, usage_share, demand_share, dominant_kind)
    pool_starvation(tree, pool, status, previous, since, below_since, kinds[], usage MAP,
                    entitlement MAP, demand MAP, seq, changed_at)

`pool_entitlements` is the latest `EntitlementsComputed` of each tree, one row per pool and kind
(every kind of the tree's capacity, 0 where the computation gives none); `capacity` is the tree's
capacity of that kind then. The shares are fractions of the tree's capacity, per pool (the same on
each of its kind rows), with the kind that dominates.

`entitlement_history` keeps one row per pool per computation *that changed something for that
pool* (an admission cycle recomputes every pool at every tick; most of them change nothing):
a pool's first computation, then every one whose maps or shares differ from the pool's previous
row. A pool that leaves the computation (deleted) gets a last row with NULL maps and shares. So the
entitlement of a pool at any instant is its latest history row at or before it:

    SELECT * FROM entitlement_history WHERE path = '/a' AND computed_at <= TIMESTAMPTZ '2024-05-01 12:00:30+00'
    ORDER BY seq DESC LIMIT 1;

`pool_starvation` is each pool's latest `PoolStarvationChanged` (status ok, below_fair_share or
starving; `since` when it entered that status, `below_since` when its current stretch below fair
share began); a deleted pool's row goes with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import pyarrow as pa

from events import EntitlementsComputed, Envelope, PoolDeleted, PoolEntitlement, PoolStarvationChanged, at_seconds
from projections.base import Connection, Item, Projection, delete_keys, insert_arrow, registered
from projections.gangs import fetch_rows

Row = dict[str, Any]

_STR = pa.string()
_TIME = pa.timestamp("us", tz="UTC")
_AMOUNTS = pa.map_(pa.string(), pa.float64())

POOL_ENTITLEMENTS = pa.schema(
    [
        ("tree", _STR),
        ("path", _STR),
        ("kind", _STR),
        ("entitlement", pa.float64()),
        ("non_slack_entitlement", pa.float64()),
        ("slack_entitlement", pa.float64()),
        ("capacity", pa.float64()),
        ("fair_share", pa.float64()),
        ("usage_share", pa.float64()),
        ("demand_share", pa.float64()),
        ("dominant_kind", _STR),
        ("computed_seq", pa.int64()),
        ("computed_at", _TIME),
    ]
)
ENTITLEMENT_HISTORY = pa.schema(
    [
        ("tree", _STR),
        ("path", _STR),
        ("seq", pa.int64()),
        ("computed_at", _TIME),
        ("entitlement", _AMOUNTS),
        ("non_slack_entitlement", _AMOUNTS),
        ("slack_entitlement", _AMOUNTS),
        ("fair_share", pa.float64()),
        ("usage_share", pa.float64()),
        ("demand_share", pa.float64()),
        ("dominant_kind", _STR),
    ]
)
POOL_STARVATION = pa.schema(
    [
        ("tree", _STR),
        ("pool", _STR),
        ("status", _STR),
        ("previous", _STR),
        ("since", _TIME),
        ("below_since", _TIME),
        ("kinds", pa.list_(_STR)),
        ("usage", _AMOUNTS),
        ("entitlement", _AMOUNTS),
        ("demand", _AMOUNTS),
        ("seq", pa.int64()),
        ("changed_at", _TIME),
    ]
)

_DDL = (
    """CREATE TABLE pool_entitlements (
        tree VARCHAR NOT NULL, path VARCHAR NOT NULL, kind VARCHAR NOT NULL, entitlement DOUBLE,
        non_slack_entitlement DOUBLE, slack_entitlement DOUBLE, capacity DOUBLE, fair_share DOUBLE,
        usage_share DOUBLE, demand_share DOUBLE, dominant_kind VARCHAR, computed_seq BIGINT NOT NULL,
        computed_at TIMESTAMPTZ, PRIMARY KEY (tree, path, kind))""",
    """CREATE TABLE entitlement_history (
        tree VARCHAR NOT NULL, path VARCHAR NOT NULL, seq BIGINT NOT NULL, computed_at TIMESTAMPTZ,
        entitlement MAP(VARCHAR, DOUBLE), non_slack_entitlement MAP(VARCHAR, DOUBLE),
        slack_entitlement MAP(VARCHAR, DOUBLE), fair_share DOUBLE, usage_share DOUBLE, demand_share DOUBLE,
        dominant_kind VARCHAR, PRIMARY KEY (tree, path, seq))""",
    """CREATE TABLE pool_starvation (
        tree VARCHAR NOT NULL, pool VARCHAR NOT NULL, status VARCHAR NOT NULL, previous VARCHAR,
        since TIMESTAMPTZ, below_since TIMESTAMPTZ, kinds VARCHAR[], usage MAP(VARCHAR, DOUBLE),
        entitlement MAP(VARCHAR, DOUBLE), demand MAP(VARCHAR, DOUBLE), seq BIGINT NOT NULL,
        changed_at TIMESTAMPTZ, PRIMARY KEY (tree, pool))""",
)

_MAPS = ("entitlement", "non_slack_entitlement", "slack_entitlement")
_SHARES = ("fair_share", "usage_share", "demand_share", "dominant_kind")


class PoolStatusProjection(Projection):
    """`pool_entitlements`, `entitlement_history` and `pool_starvation`."""

    name = "pool_status"
    schema_version = 1
    tables = ("pool_entitlements", "entitlement_history", "pool_starvation")

    def create(self, conn: Connection) -> None:
        for ddl in _DDL:
            conn.execute(ddl)

    def apply(self, conn: Connection, items: Sequence[Item]) -> None:
        computed: list[tuple[int, datetime, EntitlementsComputed]] = []
        starvation: dict[tuple[str, str], Row | None] = {}  # None: the pool was deleted
        for item in items:
            envelope = item.event
            if not isinstance(envelope, Envelope):
                continue
            event = envelope.event
            if isinstance(event, EntitlementsComputed):
                computed.append((item.seq, envelope.time, event))
            elif isinstance(event, PoolStarvationChanged):
                starvation[(event.tree, event.pool)] = _starvation_row(event, item.seq, envelope.time)
            elif isinstance(event, PoolDeleted):
                starvation[(event.tree, event.path)] = None
        if computed:
            _entitlements(conn, computed)
        if starvation:
            keys = list(starvation)
            delete_keys(conn, "pool_starvation", pa.table({"tree": [k[0] for k in keys], "pool": [k[1] for k in keys]}))
            rows = [row for row in starvation.values() if row is not None]
            insert_arrow(conn, "pool_starvation", pa.Table.from_pylist(rows, schema=POOL_STARVATION))


def _entitlements(conn: Connection, computed: list[tuple[int, datetime, EntitlementsComputed]]) -> None:
    """History rows for what changed, then each touched tree's latest computation as its rows."""
    trees = sorted({event.tree for _, _, event in computed})
    last: dict[str, dict[str, Row]] = {tree: {} for tree in trees}  # tree -> path -> values, as last computed
    with registered(conn, pa.table({"tree": trees})) as view:
        for row in fetch_rows(conn, f"SELECT e.* FROM pool_entitlements e JOIN {view} USING (tree) "
                                    "ORDER BY e.tree, e.path, e.kind"):
            values = last[row["tree"]].setdefault(row["path"], {m: {} for m in _MAPS})
            for name in _MAPS:
                values[name][row["kind"]] = row[name]
            values.update({name: row[name] for name in _SHARES})
    history: list[Row] = []
    latest: dict[str, tuple[int, datetime, EntitlementsComputed]] = {}
    for seq, time, event in computed:
        before = last[event.tree]
        now = {pool.path: _values(pool) for pool in event.pools}
        for path, values in now.items():
            if path not in before or not _same(before[path], values):
                history.append({"tree": event.tree, "path": path, "seq": seq, "computed_at": time, **values})
        for path in sorted(set(before) - set(now)):
            history.append({"tree": event.tree, "path": path, "seq": seq, "computed_at": time})
        last[event.tree] = now
        latest[event.tree] = (seq, time, event)
    insert_arrow(conn, "entitlement_history", pa.Table.from_pylist(history, schema=ENTITLEMENT_HISTORY))
    conn.execute(f"DELETE FROM pool_entitlements WHERE tree IN ({', '.join('?' for _ in trees)})", trees)
    rows = [row for seq, time, event in latest.values() for row in _kind_rows(event, seq, time)]
    insert_arrow(conn, "pool_entitlements", pa.Table.from_pylist(rows, schema=POOL_ENTITLEMENTS))


def _values(pool: PoolEntitlement) -> Row:
    return {
        "entitlement": dict(pool.entitlement),
        "non_slack_entitlement": dict(pool.non_slack_entitlement),
        "slack_entitlement": dict(pool.slack_entitlement),
        "fair_share": pool.fair_share,
        "usage_share": pool.usage_share,
        "demand_share": pool.demand_share,
        "dominant_kind": pool.dominant_kind,
    }


def _same(a: Row, b: Row) -> bool:
    """Equal values (a kind missing from a map counts as 0)."""
    if any(a.get(name) != b.get(name) for name in _SHARES):
        return False
    for name in _MAPS:
        x, y = a.get(name) or {}, b.get(name) or {}
        if any(x.get(k, 0.0) != y.get(k, 0.0) for k in set(x) | set(y)):
            return False
    return True


def _kind_rows(event: EntitlementsComputed, seq: int, time: datetime) -> list[Row]:
    rows: list[Row] = []
    for pool in event.pools:
        maps = {name: getattr(pool, name) for name in _MAPS}
        kinds = sorted(set(event.capacity).union(*maps.values()))
        for kind in kinds:
            rows.append({
                "tree": event.tree, "path": pool.path, "kind": kind,
                **{name: float(values.get(kind, 0.0)) for name, values in maps.items()},
                "capacity": float(event.capacity.get(kind, 0.0)), "fair_share": pool.fair_share,
                "usage_share": pool.usage_share, "demand_share": pool.demand_share,
                "dominant_kind": pool.dominant_kind, "computed_seq": seq, "computed_at": time,
            })
    return rows


def _starvation_row(event: PoolStarvationChanged, seq: int, time: datetime) -> Row:
    return {
        "tree": event.tree,
        "pool": event.pool,
        "status": event.status,
        "previous": event.previous,
        "since": at_seconds(event.since),
        "below_since": None if event.below_since is None else at_seconds(event.below_since),
        "kinds": list(event.kinds),
        "usage": dict(event.usage),
        "entitlement": dict(event.entitlement),
        "demand": dict(event.demand),
        "seq": seq,
        "changed_at": time,
    }
