"""Whole commands: would a pool upsert keep every rule, can a pool be deleted, is a host valid."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from events import PoolConfig
from services.tree.domain import paths
from services.tree.domain.tree import Tree
from services.tree.domain.validation.config import check_config, check_not_negative
from services.tree.domain.validation.hierarchy import (
    check_children_reservations,
    check_job_limits,
    check_kinds_in_parent,
    check_limit_above_child,
    check_limit_within_parent,
    check_reservation_within_limit,
    check_subpool_limit,
)
from services.tree.domain.validation.names import check_host_name
from services.tree.domain.validation.position import (
    check_no_cycle,
    check_no_reparent,
    check_parent_exists,
    check_parent_not_ephemeral,
    check_sibling_names,
)
from services.tree.domain.validation.refusal import Refusal, first


def _upsert_checks(tree: Tree, path: str, config: PoolConfig) -> Iterator[Refusal | None]:
    parent = paths.parent_of(path)
    yield check_parent_exists(tree, path)
    yield check_parent_not_ephemeral(tree, path)
    yield check_no_reparent(tree, path, parent)
    yield check_no_cycle(path, parent)
    yield check_sibling_names(tree, path)
    yield check_config(config, tree.options)
    after = tree.with_pool(path, config)
    yield check_job_limits(after, path)
    yield check_reservation_within_limit(after, path)
    yield check_subpool_limit(after, path)
    yield check_kinds_in_parent(after, path)
    yield check_limit_within_parent(after, path)
    if parent is not None:
        yield check_children_reservations(after, parent)
    yield check_children_reservations(after, path)
    for below in after.descendants(path):
        if below.ephemeral:
            continue
        yield check_limit_above_child(after, path, below.path)
        yield check_kinds_in_parent(after, below.path, named=True)
        yield check_reservation_within_limit(after, below.path, named=True)
        yield check_subpool_limit(after, below.path, named=True)


def validate_upsert(tree: Tree, path: str, config: PoolConfig) -> Refusal | None:
    """Would `path` (valid and normalized) with the whole explicit `config` keep every rule?"""
    return first(_upsert_checks(tree, path, config))


def check_pool_exists(tree: Tree, path: str) -> Refusal | None:
    if tree.pool(path) is None:
        return Refusal("pool_missing", f"pool {path} does not exist", "path")
    return None


def check_no_children(tree: Tree, path: str) -> Refusal | None:
    children = tree.children(path)
    if children:
        shown = ", ".join(c.path for c in children[:5]) + (", ..." if len(children) > 5 else "")
        return Refusal("delete_has_children", f"pool {path} has {len(children)} child pool(s) ({shown}): "
                                              "delete them first", "path")
    return None


def check_no_unfinished_gangs(tree: Tree, path: str) -> Refusal | None:
    gangs = sorted(tree.gangs_in(path))
    if gangs:
        shown = ", ".join(gangs[:5]) + (", ..." if len(gangs) > 5 else "")
        return Refusal("delete_has_gangs", f"pool {path} has {len(gangs)} unfinished gang(s) ({shown})",
                       "path")
    return None


def validate_delete(tree: Tree, path: str) -> Refusal | None:
    """Can `path` (valid and normalized) be deleted?"""
    return first([check_pool_exists(tree, path), check_no_children(tree, path),
                  check_no_unfinished_gangs(tree, path)])


def validate_host(name: str, resources: Mapping[str, float],
                  revocable: Mapping[str, float]) -> Refusal | None:
    return first([
        check_host_name(name),
        check_not_negative("resources", resources, ""),
        check_not_negative("revocable", revocable, ""),
    ])
