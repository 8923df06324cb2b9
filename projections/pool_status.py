"""What each pool is entitled to, how that changed, and whether it starves (DOMAIN §3, §6, §7).

Tables:

    pool_entitlements(tree, path, kind, entitlement, non_slack_entitlement, slack_entitlement,
                      capacity, fair_share, usage_share, demand_share, dominant_kind,
                      computed_seq, computed_at, lent_given, lent_share, lent_limit)
    lending_factors(tree, grp, kind, factor)
    entitlement_history(tree, path, seq, computed_at, entitlement MAP, non_slack_entitlement MAP,
                        slack_entitlement MAP, fair_share, usage_share, demand_share, dominant_kind)
    pool_starvation(tree, pool, status, previous, since, below_since, kinds[], usage MAP,
                    entitlement MAP, demand MAP, seq, changed_at)

`pool_entitlements` is each tree's entitlement map as its `EntitlementsComputed` events fold
(`events.decisions.fold_entitlements`: a whole map, or a large tree's pools that changed and paths
removed, in parts), one row per pool and kind (every kind of the tree's capacity, 0 where the
computation gives none); `capacity` is the tree's capacity of that kind then. The shares are
fractions of the tree's capacity, per pool (the same on each of its kind rows), with the kind that
dominates. `computed_seq` and `computed_at` are those of the event that last wrote the pool (a
capacity change writes every pool), or, for a lent pool (`EntitlementsComputed` v3), that last
changed its sibling group's factor: a lent pool's numbers are computed from its part (`lent_given`,
`lent_share`, `lent_limit`: NULL when not lent; no limit: NULL) and its group's factor
(`lending_factors`, per parent path `grp` and kind), which the projection keeps to read them back.

`entitlement_history` samples each pool's entitlement once per second of log time (`HISTORY_WINDOW`;
windows aligned to whole epoch seconds of the computations' envelope time). For each second in
which a tree had computations, the *last* of them gives a pool a row if the pool's values then
differ from its previous row (a kind missing from a map counts as 0) or it has no row yet; a pool
of a previous (non-NULL) row that is not in the tree's map then (deleted) gets a row with NULL maps
and shares. A row carries that computation's seq, time and values; the computations before it in
the second leave no row (an admission cycle recomputes every pool many times a second). Maps hold
every kind of the pool's `pool_entitlements` rows (0 where the computation gives none); a pool
with no such row (no kind at all: a tree without capacity and empty maps) counts as not in the
computation. A second's rows are written once the projection applies an event at or after its end
(any event: the next computation, a tick, a gang event), not before: the latest values reach the
history at the latest with the first event of a later second (`pool_entitlements` is the exact
now). So the entitlement of a pool at any instant, to the second, is its latest history row at or
before it:

    SELECT * FROM entitlement_history WHERE path = '/a' AND computed_at <= TIMESTAMPTZ '2024-05-01 12:00:30+00'
    ORDER BY seq DESC LIMIT 1;

Kept in memory: each tree's entitlement map (as `pool_entitlements` holds it), its open second (the
pools written in it: only those are compared when it closes) and, once a second of the tree was
closed, each pool's last history row. All are in the tables, read back after a start or a
rollback: a tree's map is what `pool_entitlements` holds (closing its second again, if it was
closed already, compares every pool and writes nothing); the last history row of each pool is what
the next second is compared with. (A tree whose latest
computation has no pool with a kind has no `pool_entitlements` row: if the store stops, or a batch
rolls back, while that second is open, the NULL rows it would give are not written.) A batch
writes the `pool_entitlements` rows of the pools its computations wrote or removed, once each
(all of a tree's after a `replace`). A computation that moves a sibling group's factor changes
every lent pool of that group (most of a shared tree): those are computed again once per batch
(and before a second closes), with the seq, time and capacity of the last computation that moved
their group, unless a later one wrote the pool itself, not once per computation.

With the store's retention on, the `entitlement_history` rows computed before the horizon are
deleted, but each pool's last row (it still says what the pool is entitled to), unless that row
says the pool was deleted and every row of the pool is before the horizon (then all go): the
query above still answers for any instant after the horizon. The key columns are stored
uncompressed (projections/gangs.py, "Retention").

`pool_starvation` is each pool's latest `PoolStarvationChanged` (status ok, below_fair_share or
starving; `since` when it entered that status, `below_since` when its current stretch below fair
share began); a deleted pool's row goes with it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pyarrow as pa

from events import EntitlementsComputed, PoolDeleted, PoolEntitlement, PoolStarvationChanged, at_seconds, event_class
from events.decisions import LentPool
from events.entitlement_map import EntitlementMap, fold_entitlements, group_of
from projections.base import (
    Connection,
    Item,
    Malformed,
    Projection,
    delete_keys,
    fetch_rows,
    insert_arrow,
    insert_rows,
)

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
        ("lent_given", pa.float64()),
        ("lent_share", pa.float64()),
        ("lent_limit", pa.float64()),
    ]
)
LENDING_FACTORS = pa.schema([("tree", _STR), ("grp", _STR), ("kind", _STR), ("factor", pa.float64())])
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
        computed_at TIMESTAMPTZ, lent_given DOUBLE, lent_share DOUBLE, lent_limit DOUBLE,
        PRIMARY KEY (tree, path, kind))""",
    """CREATE TABLE lending_factors (
        tree VARCHAR NOT NULL, grp VARCHAR NOT NULL, kind VARCHAR NOT NULL, factor DOUBLE,
        PRIMARY KEY (tree, grp, kind))""",
    """CREATE TABLE entitlement_history (
        tree VARCHAR USING COMPRESSION uncompressed NOT NULL, path VARCHAR USING COMPRESSION uncompressed NOT NULL,
        seq BIGINT NOT NULL, computed_at TIMESTAMPTZ,
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

HISTORY_WINDOW = 1.0  # seconds of log time: at most one entitlement_history row per pool per window
_WINDOW = timedelta(seconds=HISTORY_WINDOW)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class PoolStatusProjection(Projection):
    """`pool_entitlements`, `entitlement_history` and `pool_starvation`."""

    name = "pool_status"
    # 2: entitlement_history sampled per second of log time; 3: its keys uncompressed; 4: lent pools
    # (`EntitlementsComputed` v3: `lent_*` columns, `lending_factors`)
    schema_version = 4
    tables = ("pool_entitlements", "entitlement_history", "pool_starvation", "lending_factors")

    def __init__(self) -> None:
        # Each tree's open window (its latest computation); None: not read back yet (after a start
        # or a rollback). `_due`: the earliest end of an open window.
        self._open: dict[str, _Open] | None = None
        self._due: datetime | None = None
        # Each tree's map: path -> (seq, time, values) of the event that last wrote it (read back
        # with `_open`).
        self._maps: dict[str, dict[str, _Pool]] = {}
        # Each tree's map as `fold_entitlements` keeps it (what a lent pool is computed from),
        # read back with `_open`.
        self._lending: dict[str, EntitlementMap] = {}
        # Per tree, once it closed a window: each pool's values as its last history row has them
        # (a pool whose last row is NULL, or that has none: absent). The store is the only writer.
        self._rows: dict[str, dict[str, Values]] = {}
        # Within a batch: per tree, the sibling groups whose factor moved and the last computation
        # that moved each (`_Moved`); and when each pool was last written by a computation itself
        # (the batch's count of computations folded then). Their lent pools are computed at
        # `_lend`, once per batch.
        self._moved: dict[str, dict[str, _Moved]] = {}
        self._wrote: dict[str, dict[str, int]] = {}
        self._count = 0

    def create(self, conn: Connection) -> None:
        for ddl in _DDL:
            conn.execute(ddl)
        self.rolled_back()

    def rolled_back(self) -> None:
        self._open = None
        self._due = None
        self._rows = {}
        self._maps = {}
        self._lending = {}
        self._moved, self._wrote, self._count = {}, {}, 0

    def apply(self, conn: Connection, items: Sequence[Item]) -> None:
        windows = self._open
        if windows is None:
            windows, self._maps, self._lending = _latest_stored(conn)
            self._open = windows
            self._due = min((window.end for window in windows.values()), default=None)
        history: list[tuple[Any, ...]] = []
        written: dict[str, set[str] | None] = {}  # per tree, the paths to write again (None: all)
        groups: dict[str, set[str] | None] = {}  # per tree, the lending factors to write again (None: all)
        starvation: dict[tuple[str, str], Row | None] = {}  # None: the pool was deleted
        for item in items:
            envelope = item.event
            if isinstance(envelope, Malformed):  # (gang events may be views of envelopes: events.views)
                continue
            time = envelope.time
            due = self._due
            if due is not None and time >= due:
                self._lend(written)
                self._close(conn, [tree for tree, window in windows.items() if window.end <= time], history)
            event = envelope.event
            if event_class(event) is EntitlementsComputed:  # the model or its view (events.views)
                event = cast(EntitlementsComputed, event)
                tree = event.tree
                window = windows.get(tree)
                if window is not None and time < window.start:
                    self._lend(written)
                    self._close(conn, [tree], history)  # the log's time went back: a window before it
                    window = None
                if window is None:
                    start = _EPOCH + (time - _EPOCH) // _WINDOW * _WINDOW
                    window = windows[tree] = _Open(item.seq, time, start, start + _WINDOW, set())
                    if self._due is None or window.end < self._due:
                        self._due = window.end
                window.seq, window.time = item.seq, time
                touched = self._fold(event, item.seq, time)
                _note_groups(groups, event)
                _note_written(written, window, tree, touched)
            elif isinstance(event, PoolStarvationChanged):
                starvation[(event.tree, event.pool)] = _starvation_row(event, item.seq, time)
            elif isinstance(event, PoolDeleted):
                starvation[(event.tree, event.path)] = None
        self._lend(written)
        insert_rows(conn, "entitlement_history", ENTITLEMENT_HISTORY, history)
        if written:
            self._entitlements(conn, written)
        if groups:
            self._factors(conn, groups)
        if starvation:
            keys = list(starvation)
            delete_keys(conn, "pool_starvation", pa.table({"tree": [k[0] for k in keys], "pool": [k[1] for k in keys]}))
            rows = [row for row in starvation.values() if row is not None]
            insert_arrow(conn, "pool_starvation", pa.Table.from_pylist(rows, schema=POOL_STARVATION))

    def prune(self, conn: Connection, horizon: datetime) -> int:
        """The `entitlement_history` rows before `horizon` but each pool's last one (module
        docstring). What is kept in memory (`_rows`: each pool's last row) stays true."""
        ((old,),) = conn.execute("SELECT count(*) FROM entitlement_history WHERE computed_at < ?",
                                 [horizon]).fetchall()
        if not old:
            return 0
        ((count,),) = conn.execute("""DELETE FROM entitlement_history WHERE rowid IN (
            SELECT h.rowid FROM entitlement_history h JOIN (
                SELECT tree, path, max(seq) AS last, max(computed_at) AS latest,
                       arg_max(entitlement IS NULL, seq) AS gone
                FROM entitlement_history GROUP BY tree, path) p USING (tree, path)
            WHERE h.computed_at < $horizon AND (h.seq < p.last OR (p.gone AND p.latest < $horizon))
            ORDER BY h.seq, h.tree, h.path LIMIT $limit)""", {"horizon": horizon, "limit": self.prune_rows}).fetchall()
        return int(count)

    def _close(self, conn: Connection, trees: list[str], history: list[tuple[Any, ...]]) -> None:
        """Close the open windows of `trees`: append their history rows to `history`."""
        windows = self._open
        assert windows is not None
        missing = [tree for tree in trees if tree not in self._rows]
        if missing:
            self._rows.update(_last_rows(conn, missing))
        for tree in sorted(trees):
            window = windows.pop(tree)
            rows = self._rows[tree]
            seq, time = window.seq, window.time
            pools = self._maps.get(tree, {})
            paths = sorted(pools) if window.dirty is None else sorted(window.dirty)
            for path in paths:
                found = pools.get(path)
                if found is None:
                    continue
                values = found[2]
                previous = rows.get(path)
                if previous is None or (previous != values and not _same(previous, values)):
                    history.append((tree, path, seq, time, *values))
                    rows[path] = values
            gone = rows.keys() - pools.keys() if window.dirty is None else \
                {path for path in window.dirty if path in rows and path not in pools}
            for path in sorted(gone):
                history.append((tree, path, seq, time, None, None, None, None, None, None, None))
                del rows[path]
        self._due = min((window.end for window in windows.values()), default=None)

    def _fold(self, event: EntitlementsComputed, seq: int, time: datetime) -> set[str] | None:
        """Fold one computation into its tree's map (`events.entitlement_map.fold_entitlements`,
        with each pool as `pool_entitlements` holds it): the paths it wrote or removed (None: all of
        the tree's, a `replace`). The lent pools of the groups whose factor it moved are noted, and
        computed at `_lend`."""
        tree = event.tree
        before = self._lending.get(tree)
        old_capacity = dict(before.capacity) if before is not None else None
        lending = self._lending[tree] = fold_entitlements(self._lending.get(tree, {}), event)
        pools = self._maps.get(tree)
        self._count += 1
        wrote = self._wrote.setdefault(tree, {})
        if pools is None or event.replace:
            pools = self._maps[tree] = {}
            self._moved.pop(tree, None)  # (every pool is written by this one)
        touched: set[str] = set(event.removed)
        for path in event.removed:
            pools.pop(path, None)
        capacity = dict(event.capacity)
        count = self._count
        for pool in event.pools:
            path = pool.path
            touched.add(path)
            wrote[path] = count
            _write(pools, path, seq, time, capacity, lending)
        if event.factors:
            moved = self._moved.setdefault(tree, {})
            for factor in event.factors:
                moved[factor.group] = _Moved(count, seq, time, capacity)
        if not event.replace and old_capacity is not None and old_capacity != capacity:
            # A lent pool's fair share reads the tree's capacity: a computation that changed it
            # moved every lent pool, as a factor does (else its row kept the old fair share, and
            # a batch ending after such a computation gave other rows than the same log cut
            # elsewhere: a restart's cut must not change the table).
            moved = self._moved.setdefault(tree, {})
            for group in {group_of(path) for path in lending.lent}:
                moved[group] = _Moved(count, seq, time, capacity)
        return None if event.replace else touched

    def _lend(self, written: dict[str, set[str] | None]) -> None:
        """Compute the lent pools of the groups whose factor moved since the last call, each as
        the last computation that moved its group left it (unless one after that wrote the pool
        itself): once per batch, where each computation that moved a factor rewrote them all."""
        windows = self._open
        assert windows is not None
        for tree, moved in self._moved.items():
            lending, pools, wrote = self._lending[tree], self._maps[tree], self._wrote.get(tree, {})
            touched: set[str] = set()
            for path in lending.lent:
                found = moved.get(group_of(path))
                if found is not None and wrote.get(path, 0) <= found.count:
                    touched.add(path)
                    _write(pools, path, found.seq, found.time, found.capacity, lending)
            if touched:
                _note_written(written, windows.get(tree), tree, touched)
        self._moved, self._wrote, self._count = {}, {}, 0

    def _factors(self, conn: Connection, groups: dict[str, set[str] | None]) -> None:
        """The `lending_factors` rows of the groups written (all of a tree's: None)."""
        _delete_written(conn, "lending_factors", "grp", groups)
        rows: list[tuple[Any, ...]] = []
        for tree in sorted(groups):
            factors = self._lending[tree].factors if tree in self._lending else {}
            names = groups[tree]
            for name in sorted(factors) if names is None else sorted(names):
                found = factors.get(name)
                if found is not None:
                    rows += [(tree, name, kind, float(value)) for kind, value in sorted(found.items())]
        insert_rows(conn, "lending_factors", LENDING_FACTORS, rows)

    def _entitlements(self, conn: Connection, written: dict[str, set[str] | None]) -> None:
        """The `pool_entitlements` rows of the pools written: all of a tree's (None), or those paths'."""
        _delete_written(conn, "pool_entitlements", "path", written)
        columns: list[list[Any]] = [[] for _ in POOL_ENTITLEMENTS]
        for tree in sorted(written):
            pools = self._maps.get(tree, {})
            paths = written[tree]
            for path in sorted(pools) if paths is None else sorted(paths):
                found = pools.get(path)
                if found is not None:
                    _kind_columns(columns, tree, path, *found)
        if columns[0]:
            insert_arrow(conn, "pool_entitlements", pa.Table.from_arrays(
                [pa.array(values, type=field.type) for values, field in zip(columns, POOL_ENTITLEMENTS, strict=True)],
                schema=POOL_ENTITLEMENTS))


@dataclass(frozen=True, slots=True)
class _Moved:
    """The last computation of a batch that moved a sibling group's factor: its place among the
    batch's computations, its seq, time and capacity."""

    count: int
    seq: int
    time: datetime
    capacity: Mapping[str, float]


def _write(pools: dict[str, _Pool], path: str, seq: int, time: datetime, capacity: Mapping[str, float],
           lending: EntitlementMap) -> None:
    """A pool of `lending` as `pool_entitlements` holds it, written by the computation at `seq`."""
    values = _pool_values(capacity, lending[path])
    if values is None:  # no kind at all: no row
        pools.pop(path, None)
    else:
        pools[path] = (seq, time, values, capacity, lending.lent.get(path))


def _note_written(written: dict[str, set[str] | None], window: _Open | None, tree: str,
                  touched: set[str] | None) -> None:
    """`touched` (None: every pool of the tree) are to be written to `pool_entitlements` and
    compared when the tree's open second closes."""
    if touched is None:
        if window is not None:
            window.dirty = None
        written[tree] = None
        return
    if window is not None and window.dirty is not None:
        window.dirty |= touched
    if tree not in written:
        written[tree] = set(touched)
    else:
        paths = written[tree]
        if paths is not None:
            paths |= touched


def _delete_written(conn: Connection, table: str, column: str, written: dict[str, set[str] | None]) -> None:
    """Delete the rows of `table` of the trees written whole (None) and of the keys (`column`)
    written of the others."""
    trees = sorted(tree for tree, names in written.items() if names is None)
    if trees:
        conn.execute(f"DELETE FROM {table} WHERE tree IN ({', '.join('?' for _ in trees)})", trees)
    keys = [(tree, name) for tree, names in sorted(written.items(), key=lambda kv: kv[0]) if names is not None
            for name in sorted(names)]
    if keys:
        delete_keys(conn, table, pa.table({"tree": [k[0] for k in keys], column: [k[1] for k in keys]}))


# A pool's values as a history row has them: entitlement, non_slack_entitlement, slack_entitlement
# (maps), fair_share, usage_share, demand_share, dominant_kind.
Values = tuple[Mapping[str, float], Mapping[str, float], Mapping[str, float], float | None, float | None,
               float | None, str | None]
# A pool of a tree's map: the seq and time of the event that wrote it (or its group's factor), its
# values (each map with every kind of its `pool_entitlements` rows), the tree's capacity in that
# event, and its lent part (None: not lent).
_Pool = tuple[int, datetime, Values, Mapping[str, float], LentPool | None]


@dataclass(slots=True)
class _Open:
    """A tree's window of log time [start, end) whose history rows are not written yet: the seq
    and time of the tree's latest computation in it, and the paths its computations wrote or
    removed (None: maybe every pool, after a `replace` or as read back)."""

    seq: int
    time: datetime
    start: datetime
    end: datetime
    dirty: set[str] | None


def _pool_values(capacity: Mapping[str, float], pool: PoolEntitlement) -> Values | None:
    """A pool as `pool_entitlements` holds it: each map with every kind of the pool's rows (the
    tree's capacity and the map's kinds, 0 where missing); None for a pool with no kind (no
    capacity and empty maps: it has no row there)."""
    maps, kinds = _maps_and_kinds(capacity, pool)
    if not kinds:
        return None
    entitlement, non_slack, slack = ({kind: float(values.get(kind, 0.0)) for kind in kinds} for values in maps)
    return (entitlement, non_slack, slack, pool.fair_share, pool.usage_share, pool.demand_share, pool.dominant_kind)


def _note_groups(groups: dict[str, set[str] | None], event: EntitlementsComputed) -> None:
    """Mark the lending factors `event` changed (all of its tree's after a `replace`; a removed
    pool's, if it had one) to be written again."""
    tree = event.tree
    if event.replace:
        groups[tree] = None
        return
    names = groups.setdefault(tree, set())
    if names is not None:
        names.update(event.removed)
        names.update(factor.group for factor in event.factors or ())


def _latest_stored(conn: Connection) -> tuple[dict[str, _Open], dict[str, dict[str, _Pool]],
                                               dict[str, EntitlementMap]]:
    """Each tree's map as `pool_entitlements` holds it, its latest computation as an open window
    (it may have been closed already: closing it again writes nothing), and its map as
    `fold_entitlements` keeps it (the lent pools' parts and the factors: `lending_factors`)."""
    found: dict[str, _Open] = {}
    maps: dict[str, dict[str, _Pool]] = {}
    rows_of: dict[tuple[str, str], list[Row]] = {}
    for row in fetch_rows(conn, "SELECT * FROM pool_entitlements ORDER BY tree, path, kind"):
        tree, path = row["tree"], row["path"]
        window = found.get(tree)
        if window is None or row["computed_seq"] > window.seq:
            time = row["computed_at"]
            start = _EPOCH + (time - _EPOCH) // _WINDOW * _WINDOW
            found[tree] = _Open(row["computed_seq"], time, start, start + _WINDOW, None)
        rows_of.setdefault((tree, path), []).append(row)
    for (tree, path), rows in rows_of.items():
        kinds: tuple[dict[str, float], dict[str, float], dict[str, float]] = ({}, {}, {})
        capacity: dict[str, float] = {}
        for row in rows:
            for values, name in zip(kinds, _MAPS, strict=True):
                values[row["kind"]] = row[name]
            capacity[row["kind"]] = row["capacity"]
        first = rows[0]
        values_of: Values = (*kinds, first["fair_share"], first["usage_share"], first["demand_share"],
                             first["dominant_kind"])
        lent = _stored_lent(path, rows)
        maps.setdefault(tree, {})[path] = (first["computed_seq"], first["computed_at"], values_of, capacity, lent)
    return found, maps, _stored_lending(conn, found, maps)


def _stored_lent(path: str, rows: list[Row]) -> LentPool | None:
    """A pool's lent part as its `pool_entitlements` rows hold it (None: not lent). A kind of the
    pool's rows that its part does not name (a capacity kind outside it) has NULLs there: left out,
    as the part had it, whichever row comes first."""
    given = {row["kind"]: row["lent_given"] for row in rows if row["lent_given"] is not None}
    if not given:
        return None
    return LentPool.model_construct(path=path, given=given,
                                    share={row["kind"]: row["lent_share"] for row in rows
                                           if row["lent_share"] is not None},
                                    limit={row["kind"]: row["lent_limit"] for row in rows
                                           if row["lent_limit"] is not None})


def _stored_lending(conn: Connection, windows: dict[str, _Open], maps: dict[str, dict[str, _Pool]]
                    ) -> dict[str, EntitlementMap]:
    """Each tree's `EntitlementMap` as the stored rows make it: every pool (a lent one with its
    part), the latest computation's capacity and the factors."""
    out: dict[str, EntitlementMap] = {}
    for tree, pools in maps.items():
        found = out[tree] = EntitlementMap()
        latest = windows[tree].seq
        for path, (seq, _, values, capacity, lent) in pools.items():
            found.rows[path] = PoolEntitlement.model_construct(
                path=path, entitlement=dict(values[0]), non_slack_entitlement=dict(values[1]),
                slack_entitlement=dict(values[2]), fair_share=values[3] or 0.0, usage_share=values[4] or 0.0,
                demand_share=values[5] or 0.0, dominant_kind=values[6])
            if lent is not None:
                found.lent[path] = lent
            if seq == latest:
                found.capacity = dict(capacity)
    for row in fetch_rows(conn, "SELECT * FROM lending_factors ORDER BY tree, grp, kind"):
        map_ = out.get(row["tree"])
        if map_ is not None:
            factor = map_.factors.setdefault(row["grp"], {})
            factor[row["kind"]] = row["factor"]  # type: ignore[index]
    return out


def _last_rows(conn: Connection, trees: list[str]) -> dict[str, dict[str, Values]]:
    """Each pool of `trees` as its last `entitlement_history` row has it (NULL maps: left out)."""
    found: dict[str, dict[str, Values]] = {tree: {} for tree in trees}
    marks = ", ".join("?" for _ in trees)
    rows = fetch_rows(conn, f"""SELECT h.* FROM entitlement_history h JOIN (
            SELECT tree, path, max(seq) AS seq FROM entitlement_history WHERE tree IN ({marks}) GROUP BY tree, path
        ) USING (tree, path, seq) WHERE h.entitlement IS NOT NULL""", trees)
    for row in rows:
        found[row["tree"]][row["path"]] = (row["entitlement"], row["non_slack_entitlement"], row["slack_entitlement"],
                                           row["fair_share"], row["usage_share"], row["demand_share"],
                                           row["dominant_kind"])
    return found


def _same(a: Values, b: Values) -> bool:
    """Equal values (a kind missing from a map counts as 0)."""
    if a[3:] != b[3:]:
        return False
    for x, y in zip(a[:3], b[:3], strict=True):
        if any(x.get(k, 0.0) != y.get(k, 0.0) for k in x.keys() | y.keys()):
            return False
    return True


def _maps_and_kinds(capacity: Mapping[str, float], pool: PoolEntitlement
                    ) -> tuple[tuple[Mapping[str, float], Mapping[str, float], Mapping[str, float]], list[str]]:
    """A pool's three maps and the kinds of its `pool_entitlements` rows: the tree's capacity's
    and the maps', sorted (none: the pool has no row)."""
    maps = (pool.entitlement, pool.non_slack_entitlement, pool.slack_entitlement)
    return maps, sorted(capacity.keys() | maps[0].keys() | maps[1].keys() | maps[2].keys())


def _kind_columns(columns: list[list[Any]], tree: str, path: str, seq: int, time: datetime, values: Values,
                  capacity: Mapping[str, float], lent: LentPool | None) -> None:
    """Append the `pool_entitlements` rows of one pool to `columns` (one list per column of
    `POOL_ENTITLEMENTS`, in its order): a row per kind of its maps."""
    (trees, paths, kinds_, entitlements, non_slacks, slacks, capacities, fairs, usages, demands, dominants, seqs,
     times, given, share, limit) = columns
    maps = values[:3]
    kinds = sorted(maps[0])
    n = len(kinds)
    trees.extend([tree] * n)
    paths.extend([path] * n)
    kinds_.extend(kinds)
    for out, found in zip((entitlements, non_slacks, slacks), maps, strict=True):
        out.extend([float(found.get(kind, 0.0)) for kind in kinds])
    capacities.extend([float(capacity.get(kind, 0.0)) for kind in kinds])
    fairs.extend([values[3]] * n)
    usages.extend([values[4]] * n)
    demands.extend([values[5]] * n)
    dominants.extend([values[6]] * n)
    seqs.extend([seq] * n)
    times.extend([time] * n)
    if lent is None:
        given.extend([None] * n)
        share.extend([None] * n)
        limit.extend([None] * n)
    else:
        given.extend([lent.given.get(kind) for kind in kinds])
        share.extend([lent.share.get(kind) for kind in kinds])
        limit.extend([lent.limit.get(kind) for kind in kinds])


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
