"""`pool_chain(pool)`: a pool and its ancestors, nearest first, the root left out; memoised (a pure
function of the path, asked for several times per gang by admission's fold and cycle and by
preemption's starvation pass)."""

from __future__ import annotations

from services.tree.domain import paths

_CHAINS: dict[str, tuple[str, ...]] = {}
_CHAINS_KEPT = 65_536  # many ephemeral paths over time: start afresh past this many


def pool_chain(pool: str) -> tuple[str, ...]:
    found = _CHAINS.get(pool)
    if found is None:
        if len(_CHAINS) >= _CHAINS_KEPT:
            _CHAINS.clear()
        found = _CHAINS[pool] = (pool, *[p for p in paths.ancestors(pool) if p != paths.ROOT])
    return found
