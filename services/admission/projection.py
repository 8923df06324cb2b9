"""The admission service's read models (one DuckDB file): the whole event history and the trees."""

from __future__ import annotations

from projections.base import Projection
from projections.event_log import EventLogProjection
from projections.pool_tree import PoolTreeProjection


def projections_for() -> list[Projection]:
    return [EventLogProjection(), PoolTreeProjection()]
