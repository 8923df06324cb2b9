"""Pool paths: `/` is the root, `/ATG/AVMaps` a pool named `AVMaps` under the top-level `/ATG`.

Pure string operations; whether a path is *valid* is a validation rule (`validation/names.py`).
A path names its parent, so a pool cannot move (re-parenting is a different path, that is, a
different pool) and a path-addressed tree cannot hold a cycle.
"""

from __future__ import annotations

import re

ROOT = "/"
SEPARATOR = "/"
EPHEMERAL_MARK = "$"
"""Reserved in names: `pool$user` is the ephemeral per-user child of `pool` (YTsaurus)."""

NAME_PATTERN = re.compile(r"[-_a-zA-Z0-9:]+")
MAX_NAME_LENGTH = 100


def normalize(path: str) -> str:
    """`/a/` is `/a`: drop one trailing separator (not the root's). Does not validate."""
    if len(path) > 1 and path.endswith(SEPARATOR) and not path.endswith(SEPARATOR * 2):
        return path[:-1]
    return path


def names(path: str) -> list[str]:
    """The names along a normalized path: `/a/b` -> [a, b]; the root -> []."""
    return [] if path == ROOT else path[1:].split(SEPARATOR)


def name_of(path: str) -> str:
    """The last name of a path (the root's is empty)."""
    return "" if path == ROOT else path.rsplit(SEPARATOR, 1)[1]


def parent_of(path: str) -> str | None:
    """The parent's path: `/a/b` -> `/a`, `/a` -> `/`, the root -> None."""
    if path == ROOT:
        return None
    head = path.rsplit(SEPARATOR, 1)[0]
    return head or ROOT


def child_of(parent: str, name: str) -> str:
    return f"{SEPARATOR}{name}" if parent == ROOT else f"{parent}{SEPARATOR}{name}"


def is_top_level(path: str) -> bool:
    """A child of the root (held neither to the root's limit nor to its reservation)."""
    return parent_of(path) == ROOT


def ancestors(path: str) -> list[str]:
    """Every ancestor, nearest first, the root last: `/a/b/c` -> [/a/b, /a, /]."""
    found: list[str] = []
    parent = parent_of(path)
    while parent is not None:
        found.append(parent)
        parent = parent_of(parent)
    return found


def is_ephemeral_name(name: str) -> bool:
    return EPHEMERAL_MARK in name
