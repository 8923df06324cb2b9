"""Where a pool sits: its parent exists and is not ephemeral, it keeps its parent, and no sibling
has its name."""

from __future__ import annotations

from services.tree.domain import paths
from services.tree.domain.tree import Tree
from services.tree.domain.validation.refusal import Refusal


def check_parent_exists(tree: Tree, path: str) -> Refusal | None:
    parent = paths.parent_of(path)
    if parent is not None and tree.pool(parent) is None:
        return Refusal("parent_missing", f"parent {parent} does not exist", "path")
    return None


def check_parent_not_ephemeral(tree: Tree, path: str) -> Refusal | None:
    parent = tree.pool(paths.parent_of(path) or paths.ROOT)
    if parent is not None and parent.ephemeral:
        return Refusal("parent_ephemeral", f"parent {parent.path} is an ephemeral pool: it is removed "
                                           "with its last gang and cannot hold configured pools", "path")
    return None


def check_no_reparent(tree: Tree, path: str, parent: str | None) -> Refusal | None:
    """Guard: an existing pool keeps its parent (by construction, since a path names it)."""
    current = tree.pool(path)
    if current is not None and current.parent != parent:
        return Refusal("reparent", f"pool {path} is under {current.parent} and cannot move to {parent}",
                       "path")
    return None


def check_no_cycle(path: str, parent: str | None) -> Refusal | None:
    """Guard: the parent is a strict ancestor (by construction, since its path is a prefix)."""
    if parent is not None and parent not in paths.ancestors(path):
        return Refusal("cycle", f"pool {path} cannot be under {parent}: it would be its own ancestor", "path")
    return None


def check_sibling_names(tree: Tree, path: str) -> Refusal | None:
    """A new pool's name must differ from every sibling's, ignoring case."""
    if tree.pool(path) is not None:
        return None
    parent = paths.parent_of(path) or paths.ROOT
    name = paths.name_of(path)
    for sibling in tree.children(parent):
        if sibling.name.lower() == name.lower():
            return Refusal("sibling_clash", f"pool {path}: sibling {sibling.path} already has that name "
                                            "(names differing only in case are the same name)", "path")
    return None
