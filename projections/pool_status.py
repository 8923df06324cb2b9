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

What a computation is compared with is kept in memory: each tree's pools as `pool_entitlements`
holds them, read once, then kept in step with every write and forgotten on a rollback. A
batch writes each tree's `pool_entitlements` rows once, from the last computation it holds.

`pool_starvation` is each pool's latest `PoolStarvationChanged` (status ok, below_fair_share or
starving; `since` when it entered that status, `below_since` when its current stretch below fair
share began); a deleted pool's row goes with it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import pyarrow as pa

from events import EntitlementsComputed, Envelope, PoolDeleted, PoolStarvationChanged, at_seconds
from projections.base import Connection, Item, Projection, delete_keys, insert_arrow, insert_rows, registered
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

    def __init__(self) -> None:
        # Each tree's pools as `pool_entitlements` holds them (what a history row is compared
        # with): read from the table once per tree, then kept in step with every write; forgotten
        # on a rollback (the store is the only writer).
        self._last: dict[str, dict[str, Values]] = {}

    def create(self, conn: Connection) -> None:
        for ddl in _DDL:
            conn.execute(ddl)
        self.rolled_back()

    def rolled_back(self) -> None:
        self._last = {}

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
            self._entitlements(conn, computed)
        if starvation:
            keys = list(starvation)
            delete_keys(conn, "pool_starvation", pa.table({"tree": [k[0] for k in keys], "pool": [k[1] for k in keys]}))
            rows = [row for row in starvation.values() if row is not None]
            insert_arrow(conn, "pool_starvation", pa.Table.from_pylist(rows, schema=POOL_STARVATION))

    def _entitlements(self, conn: Connection, computed: list[tuple[int, datetime, EntitlementsComputed]]) -> None:
        """History rows for what changed, then each touched tree's latest computation as its rows."""
        trees = sorted({event.tree for _, _, event in computed})
        missing = [tree for tree in trees if tree not in self._last]
        if missing:
            self._last.update(_stored(conn, missing))
        last = {tree: self._last[tree] for tree in trees}  # tree -> path -> values, as last computed
        history: list[tuple[Any, ...]] = []
        latest: dict[str, tuple[int, datetime, EntitlementsComputed]] = {}
        for seq, time, event in computed:
            tree = event.tree
            before = last[tree]
            now: dict[str, Values] = {
                pool.path: (pool.entitlement, pool.non_slack_entitlement, pool.slack_entitlement, pool.fair_share,
                            pool.usage_share, pool.demand_share, pool.dominant_kind)
                for pool in event.pools}
            for path, values in now.items():
                previous = before.get(path)
                if previous is None or (previous != values and not _same(previous, values)):
                    history.append((tree, path, seq, time, dict(values[0]), dict(values[1]), dict(values[2]),
                                    *values[3:]))
            for path in sorted(before.keys() - now.keys()):
                history.append((tree, path, seq, time, None, None, None, None, None, None, None))
            last[tree] = now
            latest[tree] = (seq, time, event)
        insert_rows(conn, "entitlement_history", ENTITLEMENT_HISTORY, history)
        conn.execute(f"DELETE FROM pool_entitlements WHERE tree IN ({', '.join('?' for _ in trees)})", trees)
        columns: list[list[Any]] = [[] for _ in POOL_ENTITLEMENTS]
        for seq, time, event in latest.values():
            _kind_columns(columns, event, seq, time)
        if columns[0]:
            insert_arrow(conn, "pool_entitlements", pa.Table.from_arrays(
                [pa.array(values, type=field.type) for values, field in zip(columns, POOL_ENTITLEMENTS, strict=True)],
                schema=POOL_ENTITLEMENTS))
        for tree, (_, _, event) in latest.items():
            self._last[tree] = _kept(event, last[tree])


# A pool's values as last computed: entitlement, non_slack_entitlement, slack_entitlement (maps),
# fair_share, usage_share, demand_share, dominant_kind.
Values = tuple[Mapping[str, float], Mapping[str, float], Mapping[str, float], float | None, float | None,
               float | None, str | None]


def _stored(conn: Connection, trees: list[str]) -> dict[str, dict[str, Values]]:
    """The pools of `trees` as `pool_entitlements` holds them (a tree without rows: no pools)."""
    found: dict[str, dict[str, Values]] = {tree: {} for tree in trees}
    with registered(conn, pa.table({"tree": trees})) as view:
        rows = fetch_rows(conn, f"SELECT e.* FROM pool_entitlements e JOIN {view} USING (tree) "
                                "ORDER BY e.tree, e.path, e.kind")
    maps: dict[tuple[str, str], tuple[dict[str, float], dict[str, float], dict[str, float]]] = {}
    for row in rows:
        key = (row["tree"], row["path"])
        kinds = maps.get(key)
        if kinds is None:
            kinds = maps[key] = ({}, {}, {})
        for values, name in zip(kinds, _MAPS, strict=True):
            values[row["kind"]] = row[name]
        found[key[0]][key[1]] = (*kinds, row["fair_share"], row["usage_share"], row["demand_share"],
                                 row["dominant_kind"])
    return found


def _kept(event: EntitlementsComputed, now: dict[str, Values]) -> dict[str, Values]:
    """What `pool_entitlements` holds of `now` once `event` is written: a pool with no kind (no
    capacity and empty maps) has no row there, so it counts as not computed before."""
    if event.capacity:
        return now
    return {path: values for path, values in now.items() if values[0] or values[1] or values[2]}


def _same(a: Values, b: Values) -> bool:
    """Equal values (a kind missing from a map counts as 0)."""
    if a[3:] != b[3:]:
        return False
    for x, y in zip(a[:3], b[:3], strict=True):
        if any(x.get(k, 0.0) != y.get(k, 0.0) for k in x.keys() | y.keys()):
            return False
    return True


def _kind_columns(columns: list[list[Any]], event: EntitlementsComputed, seq: int, time: datetime) -> None:
    """Append the `pool_entitlements` rows of `event` to `columns` (one list per column of
    `POOL_ENTITLEMENTS`, in its order)."""
    (trees, paths, kinds_, entitlements, non_slacks, slacks, capacities, fairs, usages, demands, dominants, seqs,
     times) = columns
    tree, capacity = event.tree, event.capacity
    for pool in event.pools:
        maps = (pool.entitlement, pool.non_slack_entitlement, pool.slack_entitlement)
        kinds = sorted(capacity.keys() | maps[0].keys() | maps[1].keys() | maps[2].keys())
        n = len(kinds)
        trees.extend([tree] * n)
        paths.extend([pool.path] * n)
        kinds_.extend(kinds)
        for out, values in zip((entitlements, non_slacks, slacks), maps, strict=True):
            out.extend([float(values.get(kind, 0.0)) for kind in kinds])
        capacities.extend([float(capacity.get(kind, 0.0)) for kind in kinds])
        fairs.extend([pool.fair_share] * n)
        usages.extend([pool.usage_share] * n)
        demands.extend([pool.demand_share] * n)
        dominants.extend([pool.dominant_kind] * n)
        seqs.extend([seq] * n)
        times.extend([time] * n)


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
