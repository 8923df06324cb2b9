"""The rules of a tree's options (kinds, per-pool job limits, default parent, presets) and of
every pool under them."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

from events import TreeOptions
from services.tree.domain.tree import Tree
from services.tree.domain.validation.config import check_config, check_job_limits_order, check_preset_not_nested
from services.tree.domain.validation.hierarchy import (
    check_children_reservations,
    check_job_limits,
    check_kinds_in_parent,
    check_limit_within_parent,
    check_reservation_within_limit,
    check_subpool_limit,
)
from services.tree.domain.validation.names import check_path
from services.tree.domain.validation.refusal import Refusal, first

KIND_NAME = re.compile(r"[a-z_][a-z0-9_]*")


def check_kinds_declared(kinds: Sequence[str]) -> Refusal | None:
    if not kinds:
        return Refusal("kinds_empty", "a tree must declare at least one resource kind", "options.resources")
    return None


def check_kind_names(kinds: Sequence[str]) -> Refusal | None:
    for kind in kinds:
        if not KIND_NAME.fullmatch(kind):
            return Refusal("kind_name", f"resource kind {kind!r} must match {KIND_NAME.pattern}",
                           "options.resources")
    return None


def check_kind_list_unique(kinds: Sequence[str]) -> Refusal | None:
    seen: set[str] = set()
    for kind in kinds:
        if kind in seen:
            return Refusal("duplicate_kind", f"resource {kind} is given twice in resources",
                           "options.resources")
        seen.add(kind)
    return None


def _tree_checks(tree: Tree, options: TreeOptions) -> Iterator[Refusal | None]:
    yield from option_checks(options)
    after = tree.with_options(options)
    for pool in after.in_path_order():
        if pool.is_root or pool.ephemeral:
            continue
        found = first(pool_checks(after, pool.path))
        yield None if found is None else found.about(f"pool {pool.path}", "options")


def option_checks(options: TreeOptions) -> Iterator[Refusal | None]:
    """The rules tree options keep by themselves (kinds, per-pool job limits, presets); what the
    pools must keep under them is `pool_checks`'. `poolwise apply` runs both on a whole target."""
    yield check_kinds_declared(options.resources)
    yield check_kind_list_unique(options.resources)
    yield check_kind_names(options.resources)
    yield check_job_limits_order(options.max_running_jobs_per_pool, options.max_jobs_per_pool,
                                 "options.max_running_jobs_per_pool", " (tree defaults per pool)")
    if options.default_parent_pool is not None:
        found = check_path(options.default_parent_pool, allow_root=True)
        yield None if found is None else found.about("default_parent_pool", "options.default_parent_pool")
    for name, preset in sorted(options.pool_config_presets.items()):
        yield check_preset_not_nested(name, preset)
        yield check_config(preset, options, f"options.pool_config_presets.{name}.")


def pool_checks(tree: Tree, path: str) -> Iterator[Refusal | None]:
    """Every rule of one pool among the others on a whole tree (its children's sum once, here):
    after a change of the tree's options, and on a whole target configuration (`apply`)."""
    yield check_config(tree.pools[path].config, tree.options)
    yield check_job_limits(tree, path)
    yield check_reservation_within_limit(tree, path)
    yield check_subpool_limit(tree, path)
    yield check_kinds_in_parent(tree, path)
    yield check_limit_within_parent(tree, path)
    yield check_children_reservations(tree, path)


def validate_tree_options(tree: Tree, options: TreeOptions) -> Refusal | None:
    """Are these options valid, and does every pool of the tree stay valid under them?"""
    return first(_tree_checks(tree, options))
