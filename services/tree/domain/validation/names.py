"""The rules of a path and its names, and of tree and host names."""

from __future__ import annotations

import re
from collections.abc import Iterator

from events.subjects import TREE_NAME
from services.tree.domain import paths
from services.tree.domain.validation.refusal import Refusal, first

HOST_NAME = re.compile(r"[^\s/]{1,200}")


def check_path_not_empty(path: str) -> Refusal | None:
    if not path.strip():
        return Refusal("path_empty", "path cannot be empty", "path")
    return None


def check_path_absolute(path: str) -> Refusal | None:
    if not path.startswith(paths.SEPARATOR):
        return Refusal("path_relative", f"path {path} should begin with /", "path")
    return None


def check_path_no_empty_name(path: str) -> Refusal | None:
    if paths.SEPARATOR * 2 in path:
        return Refusal("path_empty_name", f"path {path} has an empty name (//)", "path")
    return None


def check_path_not_root(path: str, action: str) -> Refusal | None:
    if paths.normalize(path) == paths.ROOT:
        return Refusal("path_root", f"the root / cannot be {action}: its reservation and limit are "
                                    "the tree's capacity", "path")
    return None


def check_name_reserved(name: str, path: str) -> Refusal | None:
    if paths.is_ephemeral_name(name):
        return Refusal("name_reserved", f"name `{name}` in path {path}: `$` is reserved for ephemeral pools",
                       "path")
    return None


def check_name_charset(name: str, path: str) -> Refusal | None:
    if not paths.NAME_PATTERN.fullmatch(name):
        bad = ", ".join(repr(c) for c in sorted({c for c in name if not paths.NAME_PATTERN.fullmatch(c)}))
        return Refusal("name_charset", f"name `{name}` in path {path} breaks {paths.NAME_PATTERN.pattern} "
                                       f"(not allowed: {bad})", "path")
    return None


def check_name_length(name: str, path: str) -> Refusal | None:
    if len(name) > paths.MAX_NAME_LENGTH:
        return Refusal("name_too_long", f"name `{name[:20]}...` in path {path[:40]}... is {len(name)} "
                                        f"characters long, more than {paths.MAX_NAME_LENGTH}", "path")
    return None


def _path_checks(path: str, action: str, allow_root: bool) -> Iterator[Refusal | None]:
    yield check_path_not_empty(path)
    yield check_path_absolute(path)
    yield check_path_no_empty_name(path)
    if not allow_root:
        yield check_path_not_root(path, action)
    normal = paths.normalize(path)
    for name in paths.names(normal):
        yield check_name_reserved(name, normal)
        yield check_name_length(name, normal)
        yield check_name_charset(name, normal)


def check_path(path: str, action: str = "configured", allow_root: bool = False) -> Refusal | None:
    """Every rule about the path itself: not empty, absolute, no `//`, not the root, valid names."""
    return first(_path_checks(path, action, allow_root))


def check_tree_name(name: str) -> Refusal | None:
    if not TREE_NAME.fullmatch(name):
        return Refusal("tree_name", f"tree name {name!r} must match {TREE_NAME.pattern}", "tree")
    return None


def check_host_name(name: str) -> Refusal | None:
    if not HOST_NAME.fullmatch(name):
        return Refusal("host_name", f"host name {name!r} must be 1..200 characters, without spaces or /",
                       "host")
    return None
