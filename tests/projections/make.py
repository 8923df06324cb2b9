"""Builders of log messages for projection tests: real event models, encoded, as `Stored`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from events import Envelope, Event, GangEnqueued, TaskSpec, encode
from events.subjects import for_event
from services.common.log import Stored

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def stored(
    seq: int,
    event: Event,
    *,
    source: str = "test",
    basis: int | None = None,
    causation: str | None = None,
    event_id: str | None = None,
) -> Stored:
    """`event` as the log would hold it at `seq` (time: T0 + seq seconds)."""
    envelope = Envelope(
        id=event_id or f"ev-{seq}",
        time=T0 + timedelta(seconds=seq),
        source=source,
        basis=basis,
        causation=causation,
        event=event,  # type: ignore[arg-type]
    )
    subject = for_event(event.type, getattr(event, "tree", None), source)
    return Stored(seq, subject, encode(envelope), envelope.id)


def gang(n: int, tree: str = "default") -> GangEnqueued:
    return GangEnqueued(
        tree=tree,
        gang=f"g{n}",
        pool="/ATG/AV",
        job=f"j{n % 7}",
        user="alice",
        size=2,
        priority=n % 3,
        tasks=[
            TaskSpec(id=f"g{n}-t0", resources={"cpu": 1.5, "memory": 4096.0}),
            TaskSpec(id=f"g{n}-t1", resources={"cpu": 2.0, "gpu": 1.0}),
        ],
    )


def gangs(first: int, last: int) -> list[Stored]:
    """GangEnqueued events at sequences first..last (inclusive)."""
    return [stored(seq, gang(seq)) for seq in range(first, last + 1)]
