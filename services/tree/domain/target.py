"""A whole target configuration checked at once, with the tree service's own rules.

`target_state(live, target, prune)` is the state `poolwise apply` would leave: the target's
trees, hosts and pools, the live pools the file does not name (kept unless `prune`), the live
ephemeral pools and unfinished gangs. Every pool of it is checked with the rules the service runs
on each command (`validation.check_path`, `pool_checks`, the parent and sibling rules), every
tree's options with `option_checks`, every host with `validate_host`, every pool to delete with
the delete rules that no order of commands can satisfy (gangs, ephemeral children). All the
violations are returned, not the first: a file is refused with every rule it breaks.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from events import PoolConfig
from services.tree.domain import paths
from services.tree.domain.cluster import ClusterConfig, PoolKey
from services.tree.domain.state import TreeState
from services.tree.domain.tree import Pool, Tree
from services.tree.domain.validation.commands import validate_host
from services.tree.domain.validation.names import check_path, check_tree_name
from services.tree.domain.validation.position import check_parent_not_ephemeral
from services.tree.domain.validation.refusal import Refusal
from services.tree.domain.validation.tree_options import option_checks, pool_checks


@dataclass(frozen=True, slots=True)
class Violation:
    """A rule the target breaks: `what` is `pool`, `tree` or `host`; `ref` the pool's path, the
    tree's or host's name; `field` the option at fault (`reservation.cpu`), if one is."""

    what: str
    tree: str | None
    ref: str
    rule: str
    message: str
    field: str | None = None

    def to_dict(self) -> dict[str, str | None]:
        return {"what": self.what, "tree": self.tree, "ref": self.ref, "rule": self.rule,
                "field": self.field, "message": self.message}


def _violation(what: str, tree: str | None, ref: str, refusal: Refusal, prefix: str) -> Violation:
    field = refusal.field
    if field is not None and field.startswith(prefix):
        field = field[len(prefix):] or None
    return Violation(what, tree, ref, refusal.rule, refusal.message, field)


def kept_pools(live: TreeState, target: ClusterConfig, prune: bool) -> dict[PoolKey, PoolConfig]:
    """The live pools (not ephemeral) that stay as they are: all of them when the target does not
    manage pools, those it does not name when it does and `prune` is off."""
    if target.pools is not None and prune:
        return {}
    named = target.pools or {}
    return {(name, pool.path): pool.config for name, tree in live.trees.items()
            for pool in tree.in_path_order()
            if not pool.is_root and not pool.ephemeral and (name, pool.path) not in named}


def target_state(live: TreeState, target: ClusterConfig, prune: bool) -> tuple[TreeState, list[Violation]]:
    """The state the target would leave (trees, pools, hosts; the live gangs), and every rule it breaks."""
    violations: list[Violation] = []
    wanted = {**kept_pools(live, target, prune), **(target.pools or {})}
    state = TreeState()
    for name in [*live.trees, *(t for t in target.trees if t not in live.trees)]:
        before = live.trees.get(name)
        options = target.trees.get(name, before.options if before is not None else None)
        tree = Tree(name) if before is None else replace(before, pools={paths.ROOT: Pool(paths.ROOT)})
        if options is not None:
            tree.options = options
        state.trees[name] = tree
    for name in target.trees:
        found = check_tree_name(name)
        if found is not None:
            violations.append(_violation("tree", name, name, found, ""))
        violations.extend(_violation("tree", name, name, r, "options.")
                          for r in option_checks(target.trees[name]) if r is not None)
    for name, tree in state.trees.items():
        before = live.trees.get(name)
        mine = {path: config for (t, path), config in wanted.items() if t == name}
        violations.extend(_build_tree(tree, mine, before))
    for (name, _path), _config in wanted.items():
        if name not in state.trees:  # a pool of a tree neither live nor declared: the tree is made
            tree = state.trees[name] = Tree(name)
            violations.extend(_build_tree(tree, {p: c for (t, p), c in wanted.items() if t == name}, None))
    state.hosts = dict(live.hosts)
    if target.hosts is not None:
        if prune:
            state.hosts = {}
        for host in target.hosts.values():
            found = validate_host(host.name, host.resources, host.revocable)
            if found is not None:
                violations.append(_violation("host", None, host.name, found, ""))
            state.hosts[host.name] = host
    return state, violations


def _build_tree(tree: Tree, wanted: dict[str, PoolConfig], before: Tree | None) -> list[Violation]:
    """Fill `tree` (its root only) with the pools `wanted` and the live ephemeral pools of
    `before`, parents first; every rule broken."""
    violations: list[Violation] = []
    name = tree.name
    normal: dict[str, PoolConfig] = {}
    for path, config in wanted.items():
        found = check_path(path)
        if found is not None:
            violations.append(_violation("pool", name, path, found, "config."))
        else:
            normal[paths.normalize(path)] = config
    ephemeral = [] if before is None else [p.path for p in before.in_path_order() if p.ephemeral]
    skipped: set[str] = set()
    for path in sorted({*normal, *ephemeral}):
        parent = paths.parent_of(path) or paths.ROOT
        if parent in skipped or parent not in tree.pools:
            skipped.add(path)
            if path in normal and parent not in skipped:
                violations.append(Violation("pool", name, path, "parent_missing",
                                            f"parent {parent} does not exist", "path"))
            continue
        pool = Pool(path, normal[path], ephemeral=False) if path in normal else Pool(path, ephemeral=True)
        tree.pools[path] = pool
        above = tree.pools[parent]
        tree.pools[parent] = replace(above, children=above.children | {path})
    violations.extend(_deletions(tree, before, normal))
    for path in sorted(normal):
        if path in skipped:
            continue
        found = check_parent_not_ephemeral(tree, path)
        if found is not None:
            violations.append(_violation("pool", name, path, found, "config."))
        violations.extend(_violation("pool", name, path, r, "config.") for r in _sibling_clash(tree, path))
        violations.extend(_violation("pool", name, path, r, "config.")
                          for r in pool_checks(tree, path) if r is not None)
    return violations


def _sibling_clash(tree: Tree, path: str) -> Iterable[Refusal]:
    """A pool whose name differs from an earlier sibling's only in case (`validation`'s rule
    compares a new pool with the existing ones; here every pool of the target is new)."""
    parent = tree.pools[paths.parent_of(path) or paths.ROOT]
    name = paths.name_of(path).lower()
    for sibling in sorted(parent.children):
        if sibling == path:
            return
        if paths.name_of(sibling).lower() == name:
            yield Refusal("sibling_clash", f"pool {path}: sibling {sibling} already has that name (names "
                                           "differing only in case are the same name)", "path")
            return


def _deletions(tree: Tree, before: Tree | None, wanted: dict[str, PoolConfig]) -> list[Violation]:
    """The live pools the target drops that cannot go whatever the order: those with unfinished
    gangs, and those above an ephemeral pool (made by gangs, it goes with its last gang)."""
    if before is None:
        return []
    violations: list[Violation] = []
    for pool in before.in_path_order():
        if pool.is_root or pool.ephemeral or pool.path in wanted:
            continue
        gangs = len(before.gangs_in(pool.path))
        if gangs:
            violations.append(Violation("pool", tree.name, pool.path, "delete_has_gangs",
                                        f"pool {pool.path} has {gangs} unfinished gang(s): it cannot be deleted "
                                        "before they finish", "path"))
        made = sorted(p.path for p in before.descendants(pool.path) if p.ephemeral)
        if made:
            violations.append(Violation("pool", tree.name, pool.path, "delete_has_children",
                                        f"pool {pool.path} has ephemeral pool(s) below it ({', '.join(made[:5])}): "
                                        "it cannot be deleted before their gangs finish", "path"))
    return violations
