"""Gang timeouts (PFN gang plugin): resolution, and the jitter derived from the gang id."""

from __future__ import annotations

import hashlib

from events.config import GangTimeoutOptions


def jitter_fraction(gang_id: str) -> float:
    """A number in [0, 1) derived from the gang id alone: replay gives the same instant."""
    digest = hashlib.sha256(gang_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def gang_timeout(own: float | None, options: GangTimeoutOptions, gang_id: str) -> float:
    """Its own timeout, else the tree default, capped at the tree limit, plus jitter in [0, jitter)."""
    return resolved_timeout(own, (options.default, options.limit, options.jitter), gang_id)


def resolved_timeout(own: float | None, timeouts: tuple[float, float, float], gang_id: str) -> float:
    """`gang_timeout` of the options' (default, limit, jitter) (`facts.gang_timeouts`: the fold
    makes one per gang)."""
    default, limit, jitter = timeouts
    base = default if own is None else own
    if limit < base:  # (`min(base, limit)`, without the call)
        base = limit
    return base + (jitter * jitter_fraction(gang_id) if jitter > 0 else 0.0)
