"""The read models of gangs, tasks, pools and decisions, for a store that receives the whole log.

    ProjectionStore(path, [PoolTreeProjection(), EventLogProjection(), *read_models()])

| projection | tables | module |
| --- | --- | --- |
| gangs | gangs, tasks (internal: gangs_held, gangs_answered) | projections/gangs.py |
| pool_status | pool_entitlements, entitlement_history, pool_starvation | projections/pool_status.py |
| preemptions | preemptions (internal: preemption_wants) | projections/records.py |
| rejections | rejections | projections/records.py |
"""

from __future__ import annotations

from projections.base import Projection
from projections.gangs import GangsProjection
from projections.pool_status import PoolStatusProjection
from projections.records import PreemptionsProjection, RejectionsProjection

TABLES: tuple[str, ...] = (
    "gangs",
    "tasks",
    "pool_entitlements",
    "entitlement_history",
    "pool_starvation",
    "preemptions",
    "rejections",
)


def read_models() -> list[Projection]:
    """A fresh instance of each read model (a projection instance belongs to one store)."""
    return [GangsProjection(), PoolStatusProjection(), PreemptionsProjection(), RejectionsProjection()]


__all__ = [
    "TABLES",
    "GangsProjection",
    "PoolStatusProjection",
    "PreemptionsProjection",
    "RejectionsProjection",
    "read_models",
]
