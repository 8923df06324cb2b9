"""Resolved options of a pool (DOMAIN §2), and a tree's capacity.

Resolution, per option: the pool's explicit value, else its presets' (applied in the order
named), else the default:

| option | default |
| --- | --- |
| reservation | 0 per kind (not inherited) |
| limit | per kind, the parent's limit; the root's is the tree's capacity (so a |
|       | top-level pool that sets none is unbounded, that is, the capacity) |
| share | 1 per kind (a number applies to every kind) |
| reservation_type | elastic |
| controller_limit | None (no limit) |
| slack_limit | 20 (percent) |
| mode / fifo_sort | fifo / [priority, arrival] |
| max_running_jobs / max_jobs | the tree's max_running_jobs_per_pool / max_jobs_per_pool (None: unlimited) |
| create_ephemeral_subpools / preempt_lower_priority | false |

The root's reservation and limit are the capacity; it has no job limits. An ephemeral
`pool$user` takes its parent's `ephemeral_subpool_config` as its explicit config; other
ephemeral pools have none. Ephemeral pools never make ephemeral pools of their own.

Two views of a limit: `declared_limits` (what operators set, `inf` where nobody did: what
validation compares, so that it does not depend on which hosts are up) and `EffectivePool.limit`
(the same with `inf` read as the capacity: what entitlement and admission use).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from events import PoolConfig, TreeOptions
from services.tree.domain import paths
from services.tree.domain.amounts import UNBOUNDED
from services.tree.domain.presets import resolved_config
from services.tree.domain.state import TreeState
from services.tree.domain.tree import Host, Tree

DEFAULT_SHARE = 1.0
DEFAULT_SLACK_LIMIT = 20.0
DEFAULT_FIFO_SORT: tuple[str, ...] = ("priority", "arrival")


@dataclass(frozen=True, slots=True)
class EffectivePool:
    """Every option of one pool, resolved; resource maps list every kind of the tree."""

    path: str
    reservation: dict[str, float]
    limit: dict[str, float]
    share: dict[str, float]
    reservation_type: str = "elastic"
    controller_limit: float | None = None
    slack_limit: float = DEFAULT_SLACK_LIMIT
    mode: str = "fifo"
    fifo_sort: tuple[str, ...] = DEFAULT_FIFO_SORT
    max_running_jobs: int | None = None
    max_jobs: int | None = None
    create_ephemeral_subpools: bool = False
    preempt_lower_priority: bool = False
    config_presets: tuple[str, ...] = ()
    ephemeral: bool = False
    unbounded: frozenset[str] = frozenset()
    """Kinds whose limit nobody set on the way up: `limit` reads the capacity there."""

    @property
    def static(self) -> bool:
        return self.reservation_type == "static"

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values."""
        return {
            "path": self.path,
            "reservation": dict(self.reservation),
            "limit": dict(self.limit),
            "share": dict(self.share),
            "reservation_type": self.reservation_type,
            "controller_limit": self.controller_limit,
            "slack_limit": self.slack_limit,
            "mode": self.mode,
            "fifo_sort": list(self.fifo_sort),
            "max_running_jobs": self.max_running_jobs,
            "max_jobs": self.max_jobs,
            "create_ephemeral_subpools": self.create_ephemeral_subpools,
            "preempt_lower_priority": self.preempt_lower_priority,
            "config_presets": list(self.config_presets),
            "ephemeral": self.ephemeral,
            "unbounded": sorted(self.unbounded),
        }


# --- capacity ---------------------------------------------------------------------------------


def tree_hosts(state: TreeState, tree: str) -> list[Host]:
    """The hosts of a tree (those carrying every tag of its `node_tag_filter`), by name."""
    node_filter = state.tree(tree).options.node_tag_filter
    return [h for _, h in sorted(state.hosts.items()) if h.matches(node_filter)]


def capacity(state: TreeState, tree: str) -> tuple[dict[str, float], dict[str, float]]:
    """(resources, revocable) summed over the tree's hosts, for every kind of the tree (0 when no
    host has it); kinds the tree does not declare are not counted. Memoised in `state.cache`."""
    key = ("capacity", tree)
    found = state.cache.get(key)
    if found is None:
        found = state.cache[key] = _capacity(state, tree)
    return found  # type: ignore[return-value]


def _capacity(state: TreeState, tree: str) -> tuple[dict[str, float], dict[str, float]]:
    kinds = state.tree(tree).kinds
    total = dict.fromkeys(kinds, 0.0)
    revocable = dict.fromkeys(kinds, 0.0)
    for host in tree_hosts(state, tree):
        for kind in kinds:
            total[kind] += host.resources.get(kind, 0.0)
            revocable[kind] += host.revocable.get(kind, 0.0)
    return total, revocable


# --- resolution -------------------------------------------------------------------------------


def explicit_config(tree: Tree, path: str) -> PoolConfig:
    """What was set for this pool: its config, or for an ephemeral `pool$user` its parent's
    `ephemeral_subpool_config` (resolved over the parent's presets)."""
    pool = tree.pool(path)
    if pool is None:
        return PoolConfig()
    if not pool.ephemeral:
        return pool.config
    parent = pool.parent
    if parent is None or not paths.is_ephemeral_name(pool.name):
        return PoolConfig()
    above = tree.pool(parent)
    if above is None or above.ephemeral:
        return PoolConfig()
    sub = resolved_config(tree.options, above.config).ephemeral_subpool_config
    return PoolConfig() if sub is None else sub


def resolved(tree: Tree, path: str) -> PoolConfig:
    """Explicit options over presets (no defaults yet)."""
    return resolved_config(tree.options, explicit_config(tree, path))


def reservation(tree: Tree, path: str) -> dict[str, float]:
    """Per kind of the tree, 0 where unset. Not inherited."""
    set_ = resolved(tree, path).reservation or {}
    return {k: set_.get(k, 0.0) for k in tree.kinds}


def declared_limits(tree: Tree, path: str) -> dict[str, float]:
    """Per kind of the tree: the pool's limit, else the nearest ancestor's, else `inf`."""
    chain = [path, *paths.ancestors(path)]
    found: dict[str, float] = {}
    for step in chain:
        if step == paths.ROOT:
            break
        for kind, amount in (resolved(tree, step).limit or {}).items():
            found.setdefault(kind, amount)
    return {k: found.get(k, UNBOUNDED) for k in tree.kinds}


def limit_origin(tree: Tree, path: str, kind: str) -> str | None:
    """The pool (`path` or an ancestor) whose limit on `kind` `path` is held to; None: unbounded."""
    for step in [path, *paths.ancestors(path)]:
        if step == paths.ROOT:
            return None
        if kind in (resolved(tree, step).limit or {}):
            return step
    return None


def share(options: TreeOptions, config: PoolConfig) -> dict[str, float]:
    given = config.share
    if given is None:
        return dict.fromkeys(options.resources, DEFAULT_SHARE)
    if isinstance(given, dict):
        return {k: given.get(k, DEFAULT_SHARE) for k in options.resources}
    return dict.fromkeys(options.resources, float(given))


def job_limits(tree: Tree, path: str) -> tuple[int | None, int | None]:
    """(max_running_jobs, max_jobs): the pool's, else the tree's per-pool default. The root has none."""
    if path == paths.ROOT:
        return None, None
    config = resolved(tree, path)
    running = config.max_running_jobs
    total = config.max_jobs
    return (
        tree.options.max_running_jobs_per_pool if running is None else running,
        tree.options.max_jobs_per_pool if total is None else total,
    )


def _built(tree: Tree, path: str, config: PoolConfig, declared: dict[str, float],
           cap: dict[str, float]) -> EffectivePool:
    pool = tree.pools[path]
    kinds = tree.kinds
    if pool.is_root:
        whole = {k: cap.get(k, 0.0) for k in kinds}
        return EffectivePool(path, dict(whole), dict(whole), dict.fromkeys(kinds, DEFAULT_SHARE))
    unbounded = frozenset(k for k, v in declared.items() if v == UNBOUNDED)
    given = config.reservation or {}
    options = tree.options
    return EffectivePool(
        path=path,
        reservation={k: given.get(k, 0.0) for k in kinds},
        limit={k: cap.get(k, 0.0) if k in unbounded else v for k, v in declared.items()},
        share=share(options, config),
        reservation_type=config.reservation_type or "elastic",
        controller_limit=config.controller_limit,
        slack_limit=DEFAULT_SLACK_LIMIT if config.slack_limit is None else config.slack_limit,
        mode=config.mode or "fifo",
        fifo_sort=DEFAULT_FIFO_SORT if config.fifo_sort is None else tuple(config.fifo_sort),
        max_running_jobs=options.max_running_jobs_per_pool if config.max_running_jobs is None
        else config.max_running_jobs,
        max_jobs=options.max_jobs_per_pool if config.max_jobs is None else config.max_jobs,
        create_ephemeral_subpools=bool(config.create_ephemeral_subpools) and not pool.ephemeral,
        preempt_lower_priority=bool(config.preempt_lower_priority),
        config_presets=tuple(config.config_presets or ()),
        ephemeral=pool.ephemeral,
        unbounded=unbounded,
    )


def effective_of(tree: Tree, path: str, cap: dict[str, float]) -> EffectivePool | None:
    """The resolved options of one pool, `cap` being the tree's capacity (see `capacity`)."""
    if tree.pool(path) is None:
        return None
    return _built(tree, path, resolved(tree, path), declared_limits(tree, path), cap)


def effective_pool(state: TreeState, tree: str, path: str) -> EffectivePool | None:
    """The resolved options of one pool (None when there is no such pool). Memoised."""
    key = ("effective", tree, path)
    if key in state.cache:
        return state.cache[key]  # type: ignore[return-value]
    found = effective_of(state.tree(tree), paths.normalize(path), capacity(state, tree)[0])
    state.cache[key] = found
    return found


def effective_pools(state: TreeState, tree: str) -> dict[str, EffectivePool]:
    """Every pool of a tree, root included, in path order. Memoised: read-only for callers."""
    key = ("effective_pools", tree)
    found = state.cache.get(key)
    if found is None:
        found = state.cache[key] = _effective_pools(state, tree)
    return found  # type: ignore[return-value]


def _effective_pools(state: TreeState, tree: str) -> dict[str, EffectivePool]:
    """Every pool of a tree, root included, in path order (one top-down pass)."""
    found = state.tree(tree)
    cap = capacity(state, tree)[0]
    declared: dict[str, dict[str, float]] = {}
    result: dict[str, EffectivePool] = {}
    for pool in found.in_path_order():  # a parent's path sorts before its children's
        config = resolved(found, pool.path)
        above = declared.get(pool.parent or "", dict.fromkeys(found.kinds, UNBOUNDED))
        own = {} if pool.is_root else config.limit or {}
        declared[pool.path] = {k: own.get(k, above[k]) for k in found.kinds}
        result[pool.path] = _built(found, pool.path, config, declared[pool.path], cap)
    return result
