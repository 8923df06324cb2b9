"""`TreeState`: every pool tree and every host, rebuilt by folding the log (`apply`).

What is folded, and how:

- `TreeConfigured`: the tree's options are replaced; it is now `configured`.
- `PoolConfigChanged`: the pool gets the event's config, whole (the event carries the full
  explicit config after the change); a pool that was ephemeral becomes explicit. A tree never
  configured is the default tree options (so a fresh system works with no `tree configure`).
- `PoolDeleted`: the pool (and, defensively, anything left below it) is gone.
- `HostRegistered` / `HostRemoved`: hosts are shared by every tree; each tree counts those
  matching its `node_tag_filter` (`effective.capacity`).
- `GangEnqueued` for a gang id not seen before in that tree: the gang is unfinished, counted in
  the pool `placement.place_gang` gives it (an ephemeral pool is made if need be); later
  members of the same gang, and gang ids already used, change nothing.
- `GangFinished`: the gang is no longer unfinished; an ephemeral pool left with no unfinished
  gang (and no child) is removed.

Everything else is ignored. The three config events set the tree's `version` to their sequence.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import cast

from events import (
    Event,
    GangEnqueued,
    GangFinished,
    HostRegistered,
    HostRemoved,
    PoolConfigChanged,
    PoolDeleted,
    TreeConfigured,
    event_class,
)
from services.tree.domain import paths
from services.tree.domain.placement import fixed_placement, place_gang
from services.tree.domain.tree import DEFAULT_TREE, Host, Pool, Tree, UnfinishedGang

# The event types the tree state folds (by exact type, as events come off the wire; the others,
# most of the log, are passed over with one set lookup).
_FOLDED: frozenset[type[Event]] = frozenset({GangEnqueued, GangFinished, TreeConfigured, PoolConfigChanged,
                                             PoolDeleted, HostRegistered, HostRemoved})


@dataclass(slots=True)
class TreeState:
    trees: dict[str, Tree] = field(default_factory=dict)
    hosts: dict[str, Host] = field(default_factory=dict)
    last_seq: int = 0
    cache: dict[tuple[str, ...], object] = field(default_factory=dict)
    """Derived values memoised by key (capacity and effective options by `effective`, where gangs
    go by `_placement`, admission's per-pool facts, the entitlement engine); emptied whenever a
    config, host or pool-structure change could alter them. Read-only for callers."""

    def __getstate__(self) -> tuple[object, ...]:
        """Pickled (a snapshot) without `cache`: memoised values are made again when asked for."""
        return (self.trees, self.hosts, self.last_seq)

    def __setstate__(self, state: tuple[object, ...]) -> None:
        self.trees, self.hosts, self.last_seq = state  # type: ignore[assignment]
        self.cache = {}

    @classmethod
    def of(cls, events: Iterable[Event]) -> TreeState:
        """The state after `events`, numbered 1, 2, 3... (tests and the scenario runner)."""
        state = cls()
        for seq, event in enumerate(events, start=1):
            state.apply(event, seq)
        return state

    def tree(self, name: str = DEFAULT_TREE) -> Tree:
        """The tree of that name; one never seen reads as a fresh one (default options, only the
        root, version 0), which is not stored."""
        found = self.trees.get(name)
        return found if found is not None else Tree(name)

    def tree_names(self) -> list[str]:
        """Trees that exist: configured, holding pools, or the default tree."""
        shown = {n for n, t in self.trees.items() if t.configured or len(t.pools) > 1}
        return sorted(shown | {DEFAULT_TREE})

    def apply(self, event: Event, seq: int) -> None:
        """Fold one event read at log position `seq`."""
        if seq > self.last_seq:
            self.last_seq = seq
        kind = event_class(event)  # the model's class, or the model a view stands for (events.views)
        if kind not in _FOLDED:  # most of the log: decisions, task reports, ticks
            return
        if kind is GangEnqueued:
            self.gang_enqueued(cast(GangEnqueued, event), seq)
            return
        if kind is GangFinished:
            self.gang_finished(cast(GangFinished, event), seq)
            return
        self.cache.clear()  # a config or host change
        if isinstance(event, TreeConfigured):
            tree = self._materialized(event.tree)
            tree.options, tree.configured, tree.version = event.options, True, seq
        elif isinstance(event, PoolConfigChanged):
            tree = self._materialized(event.tree)
            _set_pool(tree, paths.normalize(event.path), event)
            tree.version = seq
        elif isinstance(event, PoolDeleted):
            tree = self._materialized(event.tree)
            _remove_pool(tree, paths.normalize(event.path))
            tree.version = seq
        elif isinstance(event, HostRegistered):
            self.hosts[event.host] = Host(event.host, dict(event.resources), dict(event.revocable),
                                          frozenset(event.tags))
        elif isinstance(event, HostRemoved):
            self.hosts.pop(event.host, None)

    def gang_enqueued(self, event: GangEnqueued, seq: int) -> None:
        """`apply` of a `GangEnqueued` (or its view) but `last_seq`, for a caller that knows the
        event's type (admission's fold: `event_class` and the tests before were ~0.3% of a
        replay's child, once per gang). `seq` is `apply`'s (a table holds both)."""
        tree = self.trees.get(event.tree)
        if tree is None:
            tree = self._materialized(event.tree)
        if event.gang in tree.seen_gangs:
            tree.last_new_gang = None
            return
        tree.seen_gangs.add(event.gang)
        tree.last_new_gang = event.gang
        path = self._placement(tree, event)
        if path is None:
            return
        if path not in tree.pools:  # an ephemeral pool comes
            _ensure_parents(tree, path)
            tree.pools[path] = Pool(path, ephemeral=True)
            self.cache.clear()
        tree.unfinished[event.gang] = UnfinishedGang(path, event.user)
        held = tree.pool_gangs.get(path)
        if held is None:
            held = tree.pool_gangs[path] = set()
        held.add(event.gang)

    def gang_finished(self, event: GangFinished, seq: int) -> None:
        """`apply` of a `GangFinished` (or its view) but `last_seq` (see `gang_enqueued`)."""
        tree = self._materialized(event.tree)
        before = len(tree.pools)
        _gang_finished(tree, event.gang)
        if len(tree.pools) != before:  # an ephemeral pool went
            self.cache.clear()

    def _placement(self, tree: Tree, event: GangEnqueued) -> str | None:
        """`place_gang`'s path for this gang; where that does not depend on the user (the pool
        named exists and makes no ephemeral subpools: most gangs) memoised per pool named."""
        key = ("placement", tree.name, event.pool)
        fixed = self.cache.get(key)
        if fixed is None:
            fixed = self.cache[key] = fixed_placement(tree, event.pool) or ""
        if fixed:
            return fixed  # type: ignore[return-value]
        return place_gang(tree, event.pool, event.user).path

    def _materialized(self, name: str) -> Tree:
        tree = self.trees.get(name)
        if tree is None:
            tree = self.trees[name] = Tree(name)
        return tree


def _set_pool(tree: Tree, path: str, event: PoolConfigChanged) -> None:
    if path == paths.ROOT:
        return
    _ensure_parents(tree, path)
    current = tree.pools.get(path)
    children = current.children if current is not None else frozenset()
    tree.pools[path] = Pool(path, event.config, children, ephemeral=False)


def _ensure_parents(tree: Tree, path: str) -> None:
    """Link `path` under its parent, making missing ancestors (only a log that skipped validation
    could need this: the tree service never appends a pool whose parent is missing)."""
    parent = paths.parent_of(path)
    if parent is None:
        return
    if parent not in tree.pools:
        _ensure_parents(tree, parent)
        tree.pools[parent] = Pool(parent)
    above = tree.pools[parent]
    if path not in above.children:
        tree.pools[parent] = replace(above, children=above.children | {path})


def _remove_pool(tree: Tree, path: str) -> None:
    pool = tree.pools.get(path)
    if pool is None or pool.is_root:
        return
    for child in list(pool.children):
        _remove_pool(tree, child)
    del tree.pools[path]
    for gang in tree.pool_gangs.pop(path, set()):
        tree.unfinished.pop(gang, None)
    parent = pool.parent
    if parent is not None and parent in tree.pools:
        above = tree.pools[parent]
        tree.pools[parent] = replace(above, children=above.children - {path})


def _gang_finished(tree: Tree, gang: str) -> None:
    record = tree.unfinished.pop(gang, None)
    if record is None:
        return
    held = tree.pool_gangs.get(record.pool)
    if held is not None:
        held.discard(gang)
        if not held:
            del tree.pool_gangs[record.pool]
    pool = tree.pools.get(record.pool)
    if pool is not None and pool.ephemeral and pool.is_leaf and record.pool not in tree.pool_gangs:
        _remove_pool(tree, record.pool)
