"""How fast the projections are here: the event log projection on N events, next to raw DuckDB
Arrow inserts of the same rows measured in the same run, in rows per second.

`measure(n)` returns a `ProjectionSpeed` (it prints nothing); run it directly for a quick look:
`python -m bench.projection_speed [n] [batch]`.

- `store_rows_per_s`: `ProjectionStore.apply` over encoded log messages in batches of `batch`
  (what a service does when it replays the log): decode, build Arrow rows, insert, advance the
  checkpoint, commit; on a database file unless `path` is ":memory:".
- `projection_rows_per_s`: `EventLogProjection.apply` alone on events decoded beforehand (Arrow
  rows built and inserted, one transaction).
- `decode_per_s`: `events.decode` alone over the same messages.
- `arrow_insert_rows_per_s`: `INSERT INTO ... SELECT * FROM arrow_table` of the finished rows
  into a table without constraints: DuckDB's ceiling for this row shape.
"""

from __future__ import annotations

import gc
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb

from events import (
    ClockTicked,
    Envelope,
    GangAdmitted,
    GangEnqueued,
    TaskSpec,
    TaskStateChanged,
    decode,
    encode,
)
from events.subjects import for_event
from projections.base import Item, registered
from projections.event_log import EventLogProjection, rows
from projections.store import ProjectionStore, StoredMessage

T0 = datetime(2024, 5, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Message:
    """A log message as `ProjectionStore.apply` takes it (the shape of `services.common.log.Stored`)."""

    seq: int
    subject: str
    data: bytes
    msg_id: str | None = None


@dataclass(frozen=True)
class ProjectionSpeed:
    events: int
    batch: int
    store_rows_per_s: float
    projection_rows_per_s: float
    decode_per_s: float
    arrow_insert_rows_per_s: float


def synthetic_log(n: int) -> list[Message]:
    """`n` encoded events of a busy tree: gangs enqueued and admitted, task updates, ticks."""
    messages: list[Message] = []
    for seq in range(1, n + 1):
        g = f"g{seq // 4}"
        kind = seq % 4
        if kind == 0:
            tasks = [TaskSpec(id=f"{g}-t{i}", resources={"cpu": 2.0, "memory": 8192.0}) for i in range(2)]
            event: object = GangEnqueued(gang=g, pool="/ATG/AV", job=f"j{seq % 97}", size=2, tasks=tasks)
        elif kind == 1:
            tasks = [TaskSpec(id=f"{g}-t0", resources={"cpu": 2.0, "memory": 8192.0})]
            event = GangAdmitted(tree="default", gang=g, pool="/ATG/AV", queue="pending", tasks=tasks)
        elif kind == 2:
            event = TaskStateChanged(gang=g, task=f"{g}-t0", state="running")
        else:
            event = ClockTicked(tree="default")
        envelope = Envelope.model_validate(
            {"id": f"e{seq}", "time": T0 + timedelta(milliseconds=seq), "source": "bench", "event": event}
        )
        subject = for_event(envelope.type, getattr(envelope.event, "tree", None), "bench")
        messages.append(Message(seq, subject, encode(envelope), envelope.id))
    return messages


def _rate(n: int, work: Callable[[], object]) -> float:
    start = time.perf_counter()
    work()
    return round(n / (time.perf_counter() - start))


@contextmanager
def _store_path(path: str | None) -> Iterator[str]:
    if path is not None:
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="poolwise-bench-") as tmp:
        yield str(Path(tmp) / "bench.duckdb")


def measure(n: int = 100_000, *, batch: int = 1000, path: str | None = None) -> ProjectionSpeed:
    """Rows per second of the event log projection on `n` events, and of raw Arrow inserts.

    `path`: the store's database (default: a file in a temporary directory, removed after)."""
    log = synthetic_log(n)

    def apply_all(store: ProjectionStore, messages: list[Message]) -> None:
        for start in range(0, len(messages), batch):
            chunk: list[StoredMessage] = list(messages[start : start + batch])
            store.apply(chunk)

    with _store_path(path) as db, ProjectionStore(db, [EventLogProjection()]) as store:
        store_rate = _rate(n, lambda: apply_all(store, log))

    gc.disable()  # as the store does while it applies: decoded events are many small objects
    try:
        decoded: list[Envelope] = []
        decode_rate = _rate(n, lambda: decoded.extend(decode(m.data) for m in log))
        items = [Item(m.seq, m.subject, envelope) for m, envelope in zip(log, decoded, strict=True)]
        conn = duckdb.connect(":memory:")
        projection = EventLogProjection()
        projection.create(conn)

        def project() -> None:
            conn.begin()
            projection.apply(conn, items)
            conn.commit()

        projection_rate = _rate(n, project)
        table = rows(items)
    finally:
        gc.enable()
    with registered(conn, table) as view:
        conn.execute(f"CREATE TABLE raw_insert AS SELECT * FROM {view} LIMIT 0")
        arrow_rate = _rate(n, lambda: conn.execute(f"INSERT INTO raw_insert SELECT * FROM {view}"))
    conn.close()
    return ProjectionSpeed(n, batch, store_rate, projection_rate, decode_rate, arrow_rate)


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    size = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    print(measure(count, batch=size))
