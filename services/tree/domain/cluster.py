"""A cluster's configuration as plain values (trees, hosts, pools), to and from a tree state.

What `poolwise apply -f` wants and what `poolwise export-config` writes: every tree's options,
every host, every configured pool's explicit config. Not configuration: ephemeral pools (made by
gangs), gangs, versions. `hosts` or `pools` None means the file does not manage them (the
section is left out): they are neither compared nor pruned.

`state_of_views` rebuilds a `TreeState` from the tree service's query answers (`tree_list`,
`pool_list`, `host_list`): what the CLI plans and validates on, with the service's own rules,
before it sends any command. Unfinished gangs are kept as a count per pool (placeholders: the
answers carry no gang ids, and only `delete_has_gangs` looks at them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from events import PoolConfig, TreeOptions
from services.tree.domain import paths
from services.tree.domain.state import TreeState
from services.tree.domain.tree import Host, Pool, Tree

PoolKey = tuple[str, str]  # (tree, path)


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """Trees in order with their options; hosts by name (None: not managed); pools by (tree,
    path), in order (None: not managed)."""

    trees: dict[str, TreeOptions]
    hosts: dict[str, Host] | None = None
    pools: dict[PoolKey, PoolConfig] | None = None


def same(a: PoolConfig | TreeOptions, b: PoolConfig | TreeOptions) -> bool:
    """Equal values, as the tree service compares them (`decide._same`): unset is unset."""
    return a.model_dump(exclude_none=True) == b.model_dump(exclude_none=True)


def config_of(state: TreeState) -> ClusterConfig:
    """The configuration a state holds: every tree that exists (`tree_names`), every host, every
    pool that is not ephemeral, in path order (parents first)."""
    trees = {name: state.tree(name).options for name in state.tree_names()}
    hosts = {name: host for name, host in sorted(state.hosts.items())}
    pools: dict[PoolKey, PoolConfig] = {}
    for name in trees:
        for pool in state.tree(name).in_path_order():
            if not pool.is_root and not pool.ephemeral:
                pools[(name, pool.path)] = pool.config
    return ClusterConfig(trees, hosts, pools)


def state_of_views(trees: Iterable[Mapping[str, Any]], pools: Iterable[Mapping[str, Any]],
                   hosts: Iterable[Mapping[str, Any]]) -> TreeState:
    """A tree state holding what the tree service's answers say: `tree_list`'s trees (name,
    options, configured, version), `pool_list`'s pools (tree, path, config, ephemeral,
    unfinished_gangs) and `host_list`'s hosts."""
    state = TreeState()
    for view in trees:
        name = str(view["name"])
        state.trees[name] = Tree(name, TreeOptions.model_validate(view["options"]),
                                 version=int(view.get("version", 0)), configured=bool(view.get("configured")))
    for view in sorted(pools, key=lambda v: (str(v["tree"]), str(v["path"]))):
        name, path = str(view["tree"]), str(view["path"])
        tree = state.trees.get(name)
        if tree is None:
            tree = state.trees[name] = Tree(name)
        if path == paths.ROOT:
            continue
        ephemeral = bool(view.get("ephemeral"))
        # an ephemeral pool's options derive from its parent (its view shows them resolved)
        config = PoolConfig() if ephemeral else PoolConfig.model_validate(view.get("config") or {})
        _link(tree, Pool(path, config, ephemeral=ephemeral))
        count = int(view.get("unfinished_gangs", 0))
        if count:
            tree.pool_gangs[path] = {f"{path}#{n}" for n in range(count)}
    for view in hosts:
        state.hosts[str(view["name"])] = Host(str(view["name"]), dict(view.get("resources") or {}),
                                              dict(view.get("revocable") or {}), frozenset(view.get("tags") or ()))
    return state


def _link(tree: Tree, pool: Pool) -> None:
    """Put `pool` in `tree`, under its parent (parents come first: the pools are in path order)."""
    current = tree.pools.get(pool.path)
    children = current.children if current is not None else frozenset()
    tree.pools[pool.path] = replace(pool, children=children)
    parent = pool.parent
    if parent is not None and parent in tree.pools:
        above = tree.pools[parent]
        tree.pools[parent] = replace(above, children=above.children | {pool.path})
