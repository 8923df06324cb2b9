"""Read models: the log projected into DuckDB tables, with checkpoints (no NATS here).

`ProjectionStore` owns one DuckDB file per service and applies batches of log messages to its
projections; `EventLogProjection` and `PoolTreeProjection` are the shared read models.
"""

from projections.base import Item, Malformed, Projection, delete_keys, insert_arrow
from projections.event_log import MALFORMED, EventLogProjection
from projections.pool_tree import PoolTreeProjection
from projections.store import NotReadOnly, ProjectionStore, StoreBusy, StoredMessage

__all__ = [
    "MALFORMED",
    "EventLogProjection",
    "Item",
    "Malformed",
    "NotReadOnly",
    "PoolTreeProjection",
    "Projection",
    "ProjectionStore",
    "StoreBusy",
    "StoredMessage",
    "delete_keys",
    "insert_arrow",
]
