"""Per-pool facts that admission reads for every gang and that only configuration changes:
resolved once, then read in O(1) by the fold of every `GangEnqueued` (the refusal checks) and of
every admission `CycleCompleted` (the running-job limits of `mark_slot_waiters`).

They are memoised in the tree state's cache (`TreeState.cache`), which every config, host and
pool-structure change empties, so they are never stale: the same values the checks would
compute from `effective_pool` on each call.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.tree.domain import paths
from services.tree.domain.effective import effective_pool, job_limits
from services.tree.domain.state import TreeState


@dataclass(frozen=True, slots=True)
class PoolFacts:
    """One pool of one tree, as the refusal checks of a new gang see it."""

    path: str
    leaf: bool
    children: tuple[str, ...]  # in path order (for the refusal of a gang naming a parent pool)
    kinds: frozenset[str]  # the tree's resource kinds
    kinds_text: str  # the tree's kinds as a refusal names them (`cpu, memory`), in declared order
    limit: dict[str, float]  # the effective limit, per kind of the tree
    max_jobs: tuple[tuple[str, int], ...]  # (pool, max_jobs) on its way up, nearest first, where set
    max_tasks: int  # the tree's `max_tasks_per_gang` (a pydantic read per gang, ~350 instructions, spared)


_NONE = object()


def pool_facts(config: TreeState, tree: str, path: str) -> PoolFacts | None:
    """The facts of pool `path` (a normalized path) of `tree`; None when there is no such pool."""
    key = ("admission_facts", tree, path)
    found = config.cache.get(key, _NONE)
    if found is _NONE:
        found = config.cache[key] = _facts(config, tree, path)
    return found  # type: ignore[return-value]


def _facts(config: TreeState, tree: str, path: str) -> PoolFacts | None:
    found = config.tree(tree)
    pool = found.pool(path)
    view = effective_pool(config, tree, path)
    if pool is None or view is None:
        return None
    max_jobs: list[tuple[str, int]] = []
    for step in [path, *paths.ancestors(path)]:
        if step == paths.ROOT:
            break
        above = effective_pool(config, tree, step)
        if above is not None and above.max_jobs is not None:
            max_jobs.append((step, above.max_jobs))
    kinds = found.kinds
    return PoolFacts(path=path, leaf=pool.is_leaf, children=tuple(sorted(pool.children)), kinds=frozenset(kinds),
                     kinds_text=", ".join(kinds), limit=view.limit, max_jobs=tuple(max_jobs),
                     max_tasks=found.options.max_tasks_per_gang)


def gang_timeouts(config: TreeState, tree: str) -> tuple[float, float, float]:
    """The tree's gang timeout options (`default`, `limit`, `jitter`), memoised like the facts:
    read once per configuration, not three pydantic reads per gang."""
    key = ("admission_gang_timeouts", tree)
    found = config.cache.get(key)
    if found is None:
        options = config.tree(tree).options.gang_timeout
        found = config.cache[key] = (options.default, options.limit, options.jitter)
    return found  # type: ignore[return-value]


def running_limit(config: TreeState, tree: str, path: str) -> int | None:
    """The running-job limit (`max_running_jobs`, else the tree's default) of pool `path`; None
    when it has none or there is no such pool. Memoised like the facts."""
    key = ("admission_running_limit", tree, path)
    found = config.cache.get(key, _NONE)
    if found is _NONE:
        found_tree = config.tree(tree)
        found = config.cache[key] = job_limits(found_tree, path)[0] if found_tree.pool(path) is not None else None
    return found  # type: ignore[return-value]
