"""The values a tree state is made of: hosts, pools and one pool tree with its unfinished gangs.

`Pool` is immutable (a change replaces it); `Tree` is the mutable aggregate that
`TreeState.apply` folds events into. `Tree.with_pool` gives a hypothetical copy for validation
without touching the original.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from events import PoolConfig, TreeOptions
from services.tree.domain import paths
from services.tree.domain.used_ids import UsedIds

DEFAULT_TREE = "default"


@dataclass(frozen=True, slots=True)
class Host:
    """A machine: what it offers (`resources`), its oversubscribed `revocable` part, its tags."""

    name: str
    resources: dict[str, float]
    revocable: dict[str, float] = field(default_factory=dict)
    tags: frozenset[str] = frozenset()

    def matches(self, node_tag_filter: list[str] | None) -> bool:
        """A host belongs to a tree when it carries every tag of its filter (no filter: every host)."""
        return not node_tag_filter or set(node_tag_filter) <= self.tags


@dataclass(frozen=True, slots=True)
class Pool:
    """One node of a tree. `config` is what an operator set explicitly (empty for the root and
    for ephemeral pools, whose options derive from their parent: see `effective.explicit_config`).

    `ephemeral` pools are made by gangs, not by operators: `pool$user` children of a pool with
    `create_ephemeral_subpools`, and pools under the tree's `default_parent_pool` for gangs that
    name a missing pool. They are removed as soon as they hold no unfinished gang."""

    path: str
    config: PoolConfig = field(default_factory=PoolConfig)
    children: frozenset[str] = frozenset()
    ephemeral: bool = False

    @property
    def name(self) -> str:
        return paths.name_of(self.path)

    @property
    def parent(self) -> str | None:
        return paths.parent_of(self.path)

    @property
    def is_root(self) -> bool:
        return self.path == paths.ROOT

    @property
    def is_top_level(self) -> bool:
        return paths.is_top_level(self.path)

    @property
    def is_leaf(self) -> bool:
        return not self.children


class UnfinishedGang(NamedTuple):
    """Where an unfinished gang is counted, and its user. (An immutable tuple: one is made for
    every gang, and a frozen dataclass is more than twice as slow to make.)"""

    pool: str
    user: str


def _root_only() -> dict[str, Pool]:
    return {paths.ROOT: Pool(paths.ROOT)}


@dataclass(slots=True)
class Tree:
    """One pool tree: its options, pools by path, and the gangs that are not finished yet.

    `version` is the log sequence of the last config event (TreeConfigured, PoolConfigChanged,
    PoolDeleted) applied for this tree, 0 before any: what `expected_version` is compared with.
    `configured` tells whether a TreeConfigured was seen (else the options are the defaults)."""

    name: str
    options: TreeOptions = field(default_factory=TreeOptions)
    version: int = 0
    configured: bool = False
    pools: dict[str, Pool] = field(default_factory=_root_only)
    # Every gang id ever enqueued in the tree (ids are single use; compact: ~16 bytes an id), and
    # whether the enqueue just folded started a gang (its id; None: the id was seen before).
    seen_gangs: UsedIds = field(default_factory=UsedIds)
    last_new_gang: str | None = None
    unfinished: dict[str, UnfinishedGang] = field(default_factory=dict)
    pool_gangs: dict[str, set[str]] = field(default_factory=dict)

    @property
    def kinds(self) -> list[str]:
        return list(self.options.resources)

    @property
    def root(self) -> Pool:
        return self.pools[paths.ROOT]

    def pool(self, path: str) -> Pool | None:
        return self.pools.get(path)

    def children(self, path: str) -> list[Pool]:
        """The children of a pool, in path order."""
        pool = self.pools.get(path)
        return [] if pool is None else [self.pools[c] for c in sorted(pool.children)]

    def descendants(self, path: str) -> Iterator[Pool]:
        """Every pool below `path`, parents before their children (path order among siblings)."""
        for child in self.children(path):
            yield child
            yield from self.descendants(child.path)

    def in_path_order(self) -> list[Pool]:
        return [self.pools[p] for p in sorted(self.pools)]

    def gangs_in(self, path: str) -> frozenset[str]:
        """Ids of the unfinished gangs of one pool."""
        return frozenset(self.pool_gangs.get(path, ()))

    def users_in(self, path: str) -> frozenset[str]:
        return frozenset(self.unfinished[g].user for g in self.pool_gangs.get(path, ()))

    def with_pool(self, path: str, config: PoolConfig) -> Tree:
        """A copy of this tree where `path` (whose parent must exist) has `config` and is explicit.

        Shares the gang bookkeeping with this tree: the copy is for reading (validation)."""
        pools = dict(self.pools)
        current = pools.get(path)
        children = current.children if current is not None else frozenset()
        pools[path] = Pool(path, config, children, ephemeral=False)
        parent = paths.parent_of(path)
        if parent is not None and current is None:
            above = pools[parent]
            pools[parent] = replace(above, children=above.children | {path})
        return replace(self, pools=pools)

    def with_options(self, options: TreeOptions) -> Tree:
        return replace(self, options=options)
