"""Current pool trees, pools and hosts, as the config and host events left them.

Tables (explicit options only: NULL means "not set", the tree or documented default applies):

    trees(tree, options JSON, policy, resources[], node_tag_filter[], default_parent_pool,
          version, seq, updated_at)
    pools(tree, path, name, parent, depth, ephemeral, share, reservation_type, controller_limit,
          slack_limit, mode, fifo_sort[], max_running_jobs, max_jobs, create_ephemeral_subpools,
          preempt_lower_priority, config_presets[], ephemeral_subpool_config JSON, config JSON,
          version, seq, updated_at)
    pool_resources(tree, path, kind, reservation, "limit", share)   one row per kind a pool names
    hosts(host, resources MAP, revocable MAP, tags[], seq, updated_at)
    host_resources(host, kind, amount, revocable)                   one row per kind a host names

`pools.share` is the share when given as one number; a per-kind share is in `pool_resources.share`.
`version` counts the changes since the tree or pool was (re)created; `seq` is the log position of
the last one. A batch is applied set-based: the final state of every touched key is computed in
Python, then those keys are deleted and their new rows inserted from Arrow.

    SELECT p.path, r.kind, r.reservation, r."limit" FROM pools p JOIN pool_resources r USING (tree, path);
    SELECT kind, sum(amount) FROM host_resources GROUP BY kind;
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import pyarrow as pa

from events import (
    Envelope,
    HostRegistered,
    HostRemoved,
    PoolConfigChanged,
    PoolDeleted,
    TreeConfigured,
)
from projections.base import Connection, Item, Projection, delete_keys, insert_arrow, quote, registered

Row = dict[str, Any]

_STR = pa.string()
_STRS = pa.list_(pa.string())
_TIME = pa.timestamp("us", tz="UTC")
_AMOUNTS = pa.map_(pa.string(), pa.float64())

TREES = pa.schema(
    [
        ("tree", _STR),
        ("options", _STR),
        ("policy", _STR),
        ("resources", _STRS),
        ("node_tag_filter", _STRS),
        ("default_parent_pool", _STR),
        ("version", pa.int32()),
        ("seq", pa.int64()),
        ("updated_at", _TIME),
    ]
)
POOLS = pa.schema(
    [
        ("tree", _STR),
        ("path", _STR),
        ("name", _STR),
        ("parent", _STR),
        ("depth", pa.int32()),
        ("ephemeral", pa.bool_()),
        ("share", pa.float64()),
        ("reservation_type", _STR),
        ("controller_limit", pa.float64()),
        ("slack_limit", pa.float64()),
        ("mode", _STR),
        ("fifo_sort", _STRS),
        ("max_running_jobs", pa.int64()),
        ("max_jobs", pa.int64()),
        ("create_ephemeral_subpools", pa.bool_()),
        ("preempt_lower_priority", pa.bool_()),
        ("config_presets", _STRS),
        ("ephemeral_subpool_config", _STR),
        ("config", _STR),
        ("version", pa.int32()),
        ("seq", pa.int64()),
        ("updated_at", _TIME),
    ]
)
POOL_RESOURCES = pa.schema(
    [
        ("tree", _STR),
        ("path", _STR),
        ("kind", _STR),
        ("reservation", pa.float64()),
        ("limit", pa.float64()),
        ("share", pa.float64()),
    ]
)
HOSTS = pa.schema(
    [
        ("host", _STR),
        ("resources", _AMOUNTS),
        ("revocable", _AMOUNTS),
        ("tags", _STRS),
        ("seq", pa.int64()),
        ("updated_at", _TIME),
    ]
)
HOST_RESOURCES = pa.schema(
    [("host", _STR), ("kind", _STR), ("amount", pa.float64()), ("revocable", pa.float64())]
)

_DDL = (
    """CREATE TABLE trees (
        tree VARCHAR NOT NULL, options JSON, policy VARCHAR, resources VARCHAR[],
        node_tag_filter VARCHAR[], default_parent_pool VARCHAR,
        version INTEGER NOT NULL, seq BIGINT NOT NULL, updated_at TIMESTAMPTZ)""",
    """CREATE TABLE pools (
        tree VARCHAR NOT NULL, path VARCHAR NOT NULL, name VARCHAR, parent VARCHAR,
        depth INTEGER, ephemeral BOOLEAN, share DOUBLE, reservation_type VARCHAR,
        controller_limit DOUBLE, slack_limit DOUBLE, mode VARCHAR, fifo_sort VARCHAR[],
        max_running_jobs BIGINT, max_jobs BIGINT, create_ephemeral_subpools BOOLEAN,
        preempt_lower_priority BOOLEAN, config_presets VARCHAR[], ephemeral_subpool_config JSON,
        config JSON, version INTEGER NOT NULL, seq BIGINT NOT NULL, updated_at TIMESTAMPTZ)""",
    """CREATE TABLE pool_resources (
        tree VARCHAR NOT NULL, path VARCHAR NOT NULL, kind VARCHAR NOT NULL,
        reservation DOUBLE, "limit" DOUBLE, share DOUBLE)""",
    """CREATE TABLE hosts (
        host VARCHAR NOT NULL, resources MAP(VARCHAR, DOUBLE), revocable MAP(VARCHAR, DOUBLE),
        tags VARCHAR[], seq BIGINT NOT NULL, updated_at TIMESTAMPTZ)""",
    """CREATE TABLE host_resources (
        host VARCHAR NOT NULL, kind VARCHAR NOT NULL, amount DOUBLE, revocable DOUBLE)""",
)

_TYPES = frozenset({"TreeConfigured", "PoolConfigChanged", "PoolDeleted", "HostRegistered", "HostRemoved"})


class PoolTreeProjection(Projection):
    """Trees, pools (with their explicit options) and hosts as they are now."""

    name = "pool_tree"
    schema_version = 1
    tables = ("trees", "pools", "pool_resources", "hosts", "host_resources")

    def create(self, conn: Connection) -> None:
        for ddl in _DDL:
            conn.execute(ddl)

    def apply(self, conn: Connection, items: Sequence[Item]) -> None:
        batch = [
            (item.seq, item.event)
            for item in items
            if isinstance(item.event, Envelope) and item.event.event.type in _TYPES
        ]
        if batch:
            _Batch(conn, batch).write()


class _Batch:
    """The final state, after one batch, of every tree, pool and host the batch touches
    (None: deleted), computed in Python, then written with one delete and one insert per table."""

    def __init__(self, conn: Connection, batch: list[tuple[int, Envelope]]) -> None:
        self.conn = conn
        self.trees: dict[str, Row] = {}
        self.pools: dict[tuple[str, str], tuple[Row, list[Row]] | None] = {}
        self.hosts: dict[str, tuple[Row, list[Row]] | None] = {}
        tree_versions = self._versions(
            "trees", ["tree"], [(e.event.tree,) for _, e in batch if isinstance(e.event, TreeConfigured)]
        )
        pool_versions = self._versions(
            "pools",
            ["tree", "path"],
            [(e.event.tree, e.event.path) for _, e in batch if isinstance(e.event, PoolConfigChanged)],
        )
        for seq, envelope in batch:
            event = envelope.event
            if isinstance(event, TreeConfigured):
                version = tree_versions.get((event.tree,), 0) + 1
                tree_versions[(event.tree,)] = version
                self.trees[event.tree] = _tree_row(event, version, seq, envelope.time)
            elif isinstance(event, PoolConfigChanged):
                key = (event.tree, event.path)
                version = pool_versions.get(key, 0) + 1
                pool_versions[key] = version
                self.pools[key] = _pool_rows(event, version, seq, envelope.time)
            elif isinstance(event, PoolDeleted):
                key = (event.tree, event.path)
                pool_versions.pop(key, None)
                self.pools[key] = None
            elif isinstance(event, HostRegistered):
                self.hosts[event.host] = _host_rows(event, seq, envelope.time)
            elif isinstance(event, HostRemoved):
                self.hosts[event.host] = None

    def _versions(
        self, table: str, key: list[str], keys: list[tuple[str, ...]]
    ) -> dict[tuple[str, ...], int]:
        """The current `version` of each of `keys` that exists in `table`."""
        if not keys:
            return {}
        wanted = pa.table({name: [k[i] for k in keys] for i, name in enumerate(key)})
        columns = ", ".join(quote(c) for c in key)
        with registered(self.conn, wanted) as view:
            found = self.conn.execute(
                f"SELECT DISTINCT {columns}, version FROM {quote(table)} JOIN {view} USING ({columns})"
            ).fetchall()
        return {tuple(row[:-1]): int(row[-1]) for row in found}

    def write(self) -> None:
        if self.trees:
            self._replace("trees", TREES, ["tree"], [(t,) for t in self.trees], list(self.trees.values()))
        if self.pools:
            pool_keys = list(self.pools)
            pools = [rows for rows in self.pools.values() if rows is not None]
            self._replace("pools", POOLS, ["tree", "path"], pool_keys, [row for row, _ in pools])
            resources = [r for _, rs in pools for r in rs]
            self._replace("pool_resources", POOL_RESOURCES, ["tree", "path"], pool_keys, resources)
        if self.hosts:
            host_keys = [(h,) for h in self.hosts]
            hosts = [rows for rows in self.hosts.values() if rows is not None]
            self._replace("hosts", HOSTS, ["host"], host_keys, [row for row, _ in hosts])
            resources = [r for _, rs in hosts for r in rs]
            self._replace("host_resources", HOST_RESOURCES, ["host"], host_keys, resources)

    def _replace(
        self, table: str, schema: pa.Schema, key: list[str], keys: Sequence[tuple[str, ...]], rows: list[Row]
    ) -> None:
        delete_keys(self.conn, table, pa.table({name: [k[i] for k in keys] for i, name in enumerate(key)}))
        insert_arrow(self.conn, table, pa.Table.from_pylist(rows, schema=schema))


def _tree_row(event: TreeConfigured, version: int, seq: int, time: datetime) -> Row:
    options = event.options
    return {
        "tree": event.tree,
        "options": options.model_dump_json(),
        "policy": options.policy,
        "resources": list(options.resources),
        "node_tag_filter": options.node_tag_filter,
        "default_parent_pool": options.default_parent_pool,
        "version": version,
        "seq": seq,
        "updated_at": time,
    }


def split_path(path: str) -> tuple[str, str | None, int]:
    """(name, parent path, depth) of a pool path: `/a/b` -> (`b`, `/a`, 2); `/` -> (`/`, None, 0)."""
    parts = [p for p in path.split("/") if p]
    if not parts:
        return "/", None, 0
    return parts[-1], "/" + "/".join(parts[:-1]), len(parts)


def _pool_rows(event: PoolConfigChanged, version: int, seq: int, time: datetime) -> tuple[Row, list[Row]]:
    tree, path, config = event.tree, event.path, event.config
    name, parent, depth = split_path(path)
    share = config.share
    sub = config.ephemeral_subpool_config
    row = {
        "tree": tree,
        "path": path,
        "name": name,
        "parent": parent,
        "depth": depth,
        "ephemeral": "$" in name,
        "share": None if isinstance(share, dict) else share,
        "reservation_type": config.reservation_type,
        "controller_limit": config.controller_limit,
        "slack_limit": config.slack_limit,
        "mode": config.mode,
        "fifo_sort": config.fifo_sort,
        "max_running_jobs": config.max_running_jobs,
        "max_jobs": config.max_jobs,
        "create_ephemeral_subpools": config.create_ephemeral_subpools,
        "preempt_lower_priority": config.preempt_lower_priority,
        "config_presets": config.config_presets,
        "ephemeral_subpool_config": None if sub is None else sub.model_dump_json(exclude_none=True),
        "config": config.model_dump_json(exclude_none=True),
        "version": version,
        "seq": seq,
        "updated_at": time,
    }
    reservation = config.reservation or {}
    limit = config.limit or {}
    shares = share if isinstance(share, dict) else {}
    kinds = sorted(set(reservation) | set(limit) | set(shares))
    resources = [
        {
            "tree": tree,
            "path": path,
            "kind": kind,
            "reservation": reservation.get(kind),
            "limit": limit.get(kind),
            "share": shares.get(kind),
        }
        for kind in kinds
    ]
    return row, resources


def _host_rows(event: HostRegistered, seq: int, time: datetime) -> tuple[Row, list[Row]]:
    row = {
        "host": event.host,
        "resources": dict(event.resources),
        "revocable": dict(event.revocable),
        "tags": list(event.tags),
        "seq": seq,
        "updated_at": time,
    }
    kinds = sorted(set(event.resources) | set(event.revocable))
    resources = [
        {
            "host": event.host,
            "kind": kind,
            "amount": event.resources.get(kind, 0.0),
            "revocable": event.revocable.get(kind, 0.0),
        }
        for kind in kinds
    ]
    return row, resources
