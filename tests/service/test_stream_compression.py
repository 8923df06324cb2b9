"""The log's stream on a file store is compressed (S2): the JSON events take a fraction of the disk.
A stream made before, uncompressed, is changed to it; a memory stream (tests) is left as it is."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from nats.js.api import StorageType, StoreCompression, StreamConfig

from events import Envelope, GangEnqueued, TaskSpec
from services.common.jetstream import JetStreamLog
from services.common.natsserver import EmbeddedNats

pytestmark = [pytest.mark.anyio, pytest.mark.nats]

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def gang(i: int) -> Envelope:
    event = GangEnqueued(gang=f"g{i}", pool="/a", job=f"j{i % 5}", size=2, tasks=[
        TaskSpec(id=f"g{i}/{k}", resources={"cpu": 1.0, "memory": 4096.0}) for k in range(2)])
    return Envelope(id=f"e{i}", time=T0, source="sdk:test", event=event)


async def test_a_file_stream_is_compressed_and_takes_a_fraction_of_the_disk(tmp_path: Path) -> None:
    with EmbeddedNats(tmp_path) as server:
        log = await JetStreamLog.connect(server.url)
        try:
            await log.ensure_stream()
            assert (await log.jsm.stream_info(log.stream)).config.compression == StoreCompression.S2
            for first in range(0, 40_000, 1_000):  # about 16 MB of JSON: two full blocks of the file store
                await log.append([gang(i) for i in range(first, first + 1_000)])
            state = (await log.jsm.stream_info(log.stream)).state
        finally:
            await log.close()
    blocks = sorted(tmp_path.rglob("*.blk"), key=lambda p: int(p.stem))
    sealed = sum(block.stat().st_size for block in blocks[:-1])  # the last block is compressed once full
    assert len(blocks) >= 2 and state.messages == 40
    assert sealed < state.bytes / 4  # JSON: about a tenth with S2


async def test_an_uncompressed_file_stream_is_changed_and_a_memory_stream_kept(tmp_path: Path) -> None:
    with EmbeddedNats(tmp_path) as server:
        log = await JetStreamLog.connect(server.url)
        memory = JetStreamLog(log.nc, stream="POOLWISE_MEMORY", prefix="pwmemory")
        try:
            await log.jsm.add_stream(StreamConfig(name=log.stream, subjects=list(log.subjects),
                                                  storage=StorageType.FILE, duplicate_window=600.0))
            await log.ensure_stream()
            assert (await log.jsm.stream_info(log.stream)).config.compression == StoreCompression.S2
            await memory.ensure_stream(memory=True)
            assert (await log.jsm.stream_info(memory.stream)).config.compression == StoreCompression.NONE
        finally:
            await log.close()
