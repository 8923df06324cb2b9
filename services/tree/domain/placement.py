"""Where a gang goes: the pool it names, or an ephemeral pool made for it (DOMAIN §2).

- A gang for a pool with `create_ephemeral_subpools` goes to its child `pool$user`
  (`/users/users$alice` for user alice and pool `/users`).
- A gang naming a missing pool, in a tree with a `default_parent_pool`, goes to a pool of that
  name under it (`/scratch` becomes `/adhoc/scratch`), at most `max_ephemeral_pools_per_user`
  such pools per user there. Only a top-level name (`/scratch`) is placed so: a deeper missing
  path (`/org/zzz`) names a place that does not exist, and is refused.
- Otherwise the gang has no pool, and is refused.

`TreeState.apply` uses this on the first `GangEnqueued` of a gang to count it in its pool (and
to make the ephemeral pool); admission should use the same function so that both agree. Whether
the pool is a leaf, and whether the gang itself is valid, is admission's business.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from services.tree.domain import paths
from services.tree.domain.presets import resolved_config
from services.tree.domain.tree import Tree

USER_PATTERN = re.compile(r"[-_a-zA-Z0-9:.@]+")


@dataclass(frozen=True, slots=True)
class Placement:
    """`path` is the pool the gang goes to (None: nowhere, see `reason`); `create` says it is an
    ephemeral pool that does not exist yet."""

    path: str | None
    create: bool = False
    reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.path is not None


def _nowhere(reason: str) -> Placement:
    return Placement(None, False, reason)


def _into(tree: Tree, path: str, user: str, create: bool) -> Placement:
    """The gang goes to `path`, or to its `path$user` child if that pool makes ephemeral subpools."""
    pool = tree.pool(path)
    if pool is None or pool.ephemeral:
        return Placement(path, create)
    if not resolved_config(tree.options, pool.config).create_ephemeral_subpools:
        return Placement(path)
    if not USER_PATTERN.fullmatch(user):
        return _nowhere(f"user {user!r} cannot name an ephemeral pool under {path} "
                        f"(allowed: {USER_PATTERN.pattern})")
    sub = paths.child_of(path, f"{pool.name}{paths.EPHEMERAL_MARK}{user}")
    return Placement(sub, sub not in tree.pools)


def fixed_placement(tree: Tree, pool: str) -> str | None:
    """Where `place_gang` puts a gang naming `pool` whoever its user, if that does not depend on
    the user: the pool named, when it exists and makes no ephemeral subpools (None otherwise).
    A pure function of the tree's pools and options, so callers may memoise it until they change."""
    path = paths.normalize(pool)
    found = tree.pool(path)
    if found is None:
        return None
    if not found.ephemeral and resolved_config(tree.options, found.config).create_ephemeral_subpools:
        return None
    return path


def place_gang(tree: Tree, pool: str, user: str) -> Placement:
    """The pool a new gang of `user` naming `pool` goes to, given the tree as it is now."""
    path = paths.normalize(pool)
    if tree.pool(path) is not None:
        return _into(tree, path, user, create=False)
    parent_path = tree.options.default_parent_pool
    if parent_path is None:
        return _nowhere(f"pool {path} does not exist")
    parent_path = paths.normalize(parent_path)
    parent = tree.pool(parent_path)
    if parent is None:
        return _nowhere(f"pool {path} does not exist, nor does the default parent pool {parent_path}")
    names = paths.names(path) if path.startswith(paths.SEPARATOR) else []
    if len(names) != 1 or not paths.NAME_PATTERN.fullmatch(names[0]):
        return _nowhere(f"pool {path} does not exist (only a top-level name gets an ephemeral pool "
                        f"under {parent_path})")
    target = paths.child_of(parent_path, names[0])
    existing = tree.pool(target)
    if existing is not None and not existing.ephemeral:
        return _into(tree, target, user, create=False)
    if existing is not None and user in tree.users_in(target):
        return Placement(target)
    mine = [c.path for c in tree.children(parent_path) if c.ephemeral and user in tree.users_in(c.path)]
    allowed = tree.options.max_ephemeral_pools_per_user
    if len(mine) >= allowed:
        held = ", ".join(mine) or "none"
        return _nowhere(f"pool {path} does not exist and user {user} may have at most {allowed} ephemeral "
                        f"pool(s) under {parent_path} (has: {held})")
    return Placement(target, existing is None)
