"""The raw speeds every other benchmark is compared with, measured in the same run:
JetStream from Python (`bench.raw_nats.measure_raw`, on a private embedded nats-server unless a
URL is given) and DuckDB Arrow inserts (`bench.projection_speed.measure`). Nothing runs at import.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from typing import Any

import anyio

from bench.projection_speed import measure
from bench.raw_nats import measure_raw
from services.common.natsserver import EmbeddedNats


@dataclass(frozen=True)
class Baseline:
    """`nats`: events/s as `measure_raw` reports them (its keys); `duckdb_arrow_rows_per_s`: the
    Arrow insert ceiling for event-log rows; `decode_per_s`: `events.decode` alone."""

    n: int
    payload_size: int
    nats: dict[str, float] = field(default_factory=dict)
    duckdb_arrow_rows_per_s: float = 0.0
    decode_per_s: float = 0.0

    @property
    def publish(self) -> float:
        """Pipelined JetStream publishes, acks counted in one callback."""
        return self.nats.get("raw_publish_pipelined", 0.0)

    @property
    def consume(self) -> float:
        """Pull consumer, messages received by one subscription callback."""
        return self.nats.get("raw_consume_pull_callback", 0.0)

    @property
    def publish_consume(self) -> float:
        """N messages published then consumed by one Python process: N / (t_publish + t_consume)."""
        return harmonic(self.publish, self.consume)


def harmonic(*rates: float) -> float:
    """The rate of doing each step in turn for every item: 1 / sum(1 / rate)."""
    if any(r <= 0 for r in rates):
        return 0.0
    return 1.0 / sum(1.0 / r for r in rates)


async def measure_nats(url: str | None, n: int, payload_size: int) -> dict[str, Any]:
    """`measure_raw` on `url`, or on a private embedded server started (and removed) here."""
    if url is not None:
        return await measure_raw(url, n, payload_size)
    with tempfile.TemporaryDirectory(prefix="poolwise-bench-") as tmp:
        async with EmbeddedNats(tmp) as server:
            return await measure_raw(server.url, n, payload_size)


async def measure_baseline(url: str | None = None, *, n: int = 50_000, payload_size: int = 430,
                           duck_n: int = 50_000) -> Baseline:
    nats_rates = await measure_nats(url, n, payload_size)
    speed = await anyio.to_thread.run_sync(lambda: measure(duck_n))
    return Baseline(n=n, payload_size=payload_size, nats={k: float(v) for k, v in nats_rates.items()},
                    duckdb_arrow_rows_per_s=float(speed.arrow_insert_rows_per_s),
                    decode_per_s=float(speed.decode_per_s))
