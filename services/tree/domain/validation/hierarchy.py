"""The rules of a pool among the others, on the tree as it would be: job limits, reservation
within limit, kinds its parent covers, limits within the parent's, children's reservations within
the parent's. They compare *resolved* options and *declared* limits (`effective`)."""

from __future__ import annotations

from services.tree.domain import effective, paths
from services.tree.domain.amounts import UNBOUNDED, exceeds, spell
from services.tree.domain.tree import Tree
from services.tree.domain.validation.config import check_job_limits_order
from services.tree.domain.validation.refusal import Refusal


def _of(path: str, named: bool) -> str:
    return f" of {path}" if named else ""


def check_job_limits(tree: Tree, path: str) -> Refusal | None:
    """`max_running_jobs <= max_jobs` once presets and the tree's per-pool defaults are in."""
    config = effective.resolved(tree, path)
    running, total = effective.job_limits(tree, path)
    sources = []
    if config.max_running_jobs is None and running is not None:
        sources.append("max_running_jobs from the tree's max_running_jobs_per_pool")
    if config.max_jobs is None and total is not None:
        sources.append("max_jobs from the tree's max_jobs_per_pool")
    where = f" ({'; '.join(sources)})" if sources else ""
    return check_job_limits_order(running, total, "config.max_running_jobs", where)


def check_reservation_within_limit(tree: Tree, path: str, named: bool = False) -> Refusal | None:
    """Per kind, `reservation <= limit` (the limit possibly inherited from an ancestor)."""
    reserved = effective.reservation(tree, path)
    limits = effective.declared_limits(tree, path)
    for kind in tree.kinds:
        if exceeds(reserved[kind], limits[kind]):
            origin = effective.limit_origin(tree, path, kind)
            inherited = f" (inherited from {origin})" if origin not in (None, path) else ""
            return Refusal("reservation_exceeds_limit",
                           f"resource {kind}, reservation {spell(reserved[kind])}{_of(path, named)} exceeds "
                           f"limit {spell(limits[kind])}{inherited}", f"config.reservation.{kind}")
    return None


def check_subpool_limit(tree: Tree, path: str, named: bool = False) -> Refusal | None:
    """An ephemeral subpool's limit stays within the limit of the pool that makes it."""
    sub = effective.resolved(tree, path).ephemeral_subpool_config
    if sub is None or not sub.limit:
        return None
    limits = effective.declared_limits(tree, path)
    for kind, amount in sub.limit.items():
        if kind in limits and exceeds(amount, limits[kind]):
            return Refusal("limit_exceeds_parent", f"resource {kind}, ephemeral_subpool_config limit "
                                                   f"{spell(amount)} exceeds limit {spell(limits[kind])}"
                                                   f"{_of(path, named)}",
                           f"config.ephemeral_subpool_config.limit.{kind}")
    return None


def _kinds_named(tree: Tree, path: str) -> set[str]:
    config = effective.resolved(tree, path)
    return set(config.reservation or {}) | set(config.limit or {})


def check_kinds_in_parent(tree: Tree, path: str, named: bool = False) -> Refusal | None:
    """A pool below a top-level pool names (in reservation or limit) only kinds its parent has.

    A parent has the kinds it reserves and those it has a limit on (its own or inherited). A
    parent that has none at all (a pure grouping pool: no reservation, no limit up to the top)
    passes every kind through (Peloton's `parent doesn't have resource kind`, for a model where
    unset options have defaults)."""
    parent = paths.parent_of(path)
    if parent is None or parent == paths.ROOT:
        return None
    parent_limits = effective.declared_limits(tree, parent)
    has = set(effective.resolved(tree, parent).reservation or {}) | {
        k for k, v in parent_limits.items() if v != UNBOUNDED}
    if not has:
        return None
    for kind in sorted(_kinds_named(tree, path)):
        if kind in tree.kinds and kind not in has:
            return Refusal("kind_missing_in_parent",
                           f"resource {kind} is used by {path} but its parent {parent} has no reservation or "
                           f"limit for it (it has: {', '.join(k for k in tree.kinds if k in has)})", "config")
    return None


def check_limit_within_parent(tree: Tree, path: str) -> Refusal | None:
    """A pool below a top-level pool has, per kind, a limit no higher than its parent's."""
    parent = paths.parent_of(path)
    if parent is None or parent == paths.ROOT:
        return None
    own = effective.resolved(tree, path).limit or {}
    parent_limits = effective.declared_limits(tree, parent)
    for kind, amount in own.items():
        if kind in parent_limits and exceeds(amount, parent_limits[kind]):
            origin = effective.limit_origin(tree, parent, kind)
            inherited = f" (inherited from {origin})" if origin not in (None, parent) else ""
            return Refusal("limit_exceeds_parent", f"resource {kind}, limit {spell(amount)} exceeds parent "
                                                   f"{parent} limit {spell(parent_limits[kind])}{inherited}",
                           f"config.limit.{kind}")
    return None


def check_children_reservations(tree: Tree, parent: str) -> Refusal | None:
    """Per kind, the children's reservations add up to at most the parent's (the root exempt:
    top-level guarantees are scaled to the capacity when entitlement is computed)."""
    if parent == paths.ROOT or tree.pool(parent) is None:
        return None
    own = effective.reservation(tree, parent)
    totals = dict.fromkeys(tree.kinds, 0.0)
    for child in tree.children(parent):
        for kind, amount in effective.reservation(tree, child.path).items():
            totals[kind] += amount
    for kind in tree.kinds:
        if exceeds(totals[kind], own[kind]):
            return Refusal("children_reservation_exceeds_parent",
                           f"Aggregated child reservation {spell(totals[kind])} of kind `{kind}` exceed "
                           f"parent `{parent}` reservation {spell(own[kind])}", f"config.reservation.{kind}")
    return None


def check_limit_above_child(tree: Tree, changed: str, child: str) -> Refusal | None:
    """After `changed` changed, `child` (a descendant) still has limits within its parent's."""
    parent = paths.parent_of(child)
    if parent is None or parent == paths.ROOT:
        return None
    own = effective.resolved(tree, child).limit or {}
    parent_limits = effective.declared_limits(tree, parent)
    for kind, amount in own.items():
        if kind in parent_limits and exceeds(amount, parent_limits[kind]):
            relation = "child" if parent == changed else "descendant"
            origin = effective.limit_origin(tree, parent, kind) or parent
            return Refusal("limit_below_children",
                           f"resource {kind}, limit {spell(parent_limits[kind])} of {origin} is below limit "
                           f"{spell(amount)} of {relation} {child}", f"config.limit.{kind}")
    return None
