"""Read-only answers for the shell (request/reply) and the CLI: plain, JSON-ready dicts."""

from __future__ import annotations

from typing import Any

from services.tree.domain import effective, paths
from services.tree.domain.state import TreeState
from services.tree.domain.tree import Tree


def _pool_dict(tree: Tree, path: str, cap: dict[str, float]) -> dict[str, Any] | None:
    pool = tree.pool(path)
    resolved = effective.effective_of(tree, path, cap)
    if pool is None or resolved is None:
        return None
    return {
        "tree": tree.name,
        "path": pool.path,
        "name": pool.name,
        "parent": pool.parent,
        "children": sorted(pool.children),
        "leaf": pool.is_leaf,
        "ephemeral": pool.ephemeral,
        "config": effective.explicit_config(tree, path).model_dump(mode="json", exclude_none=True),
        "reservation": dict(resolved.reservation),
        "limit": dict(resolved.limit),
        "share": dict(resolved.share),
        "effective": resolved.to_dict(),
        "unfinished_gangs": len(tree.gangs_in(path)),
        "version": tree.version,
    }


def pool_view(state: TreeState, tree: str, path: str) -> dict[str, Any] | None:
    """One pool: path, explicit config, effective reservation/limit/share (and every other
    resolved option under `effective`), children, ephemeral; None when there is no such pool."""
    found = state.tree(tree)
    return _pool_dict(found, paths.normalize(path), effective.capacity(state, tree)[0])


def list_pools(state: TreeState, tree: str | None = None) -> list[dict[str, Any]]:
    """Every pool of one tree (of every tree when `tree` is None), root included, in path order."""
    names = state.tree_names() if tree is None else [tree]
    result: list[dict[str, Any]] = []
    for name in names:
        found = state.tree(name)
        cap = effective.capacity(state, name)[0]
        for pool in found.in_path_order():
            view = _pool_dict(found, pool.path, cap)
            if view is not None:
                result.append(view)
    return result


def list_trees(state: TreeState) -> list[dict[str, Any]]:
    """Every tree: name, version, options (as given, defaults filled in), capacity, pool count."""
    result: list[dict[str, Any]] = []
    for name in state.tree_names():
        found = state.tree(name)
        total, revocable = effective.capacity(state, name)
        result.append({
            "name": name,
            "version": found.version,
            "configured": found.configured,
            "options": found.options.model_dump(mode="json"),
            "capacity": total,
            "revocable": revocable,
            "pools": len(found.pools),
            "hosts": [h.name for h in effective.tree_hosts(state, name)],
        })
    return result


def list_hosts(state: TreeState) -> list[dict[str, Any]]:
    """Every host, by name, with the trees that count it."""
    trees = {name: effective.tree_hosts(state, name) for name in state.tree_names()}
    return [
        {
            "name": host.name,
            "resources": dict(host.resources),
            "revocable": dict(host.revocable),
            "tags": sorted(host.tags),
            "trees": [t for t, hosts in trees.items() if host in hosts],
        }
        for _, host in sorted(state.hosts.items())
    ]
