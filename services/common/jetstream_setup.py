"""The JetStream objects the log makes on the server: its stream (`ensure_stream`,
`delete_stream`) and its consumers (a service's durable one, positioned where its fold stands:
`durable_at`; a read's ephemeral one: `reader_config`)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    ConsumerInfo,
    DeliverPolicy,
    StorageType,
    StoreCompression,
    StreamConfig,
)
from nats.js.errors import NotFoundError, ServerError
from nats.js.manager import JetStreamManager

DELETE_SETTLE = 0.25  # seconds after deleting a stream before it may be created again (see delete_stream)
COMPRESSION = StoreCompression.S2  # of a file-stored stream's blocks (see ensure_stream)


async def ensure_stream(
    jsm: JetStreamManager, stream: str, subjects: Sequence[str], *, replicas: int = 1,
    duplicate_window: float = 600.0, memory: bool = False,
) -> None:  # fmt: skip
    """Create the stream (file storage, compressed; `memory` for tests), or bring its subjects,
    duplicate window, compression and atomic batches up to date (idempotent; storage and
    replicas of an existing stream are kept).

    A file-stored stream is compressed with S2 (`COMPRESSION`): nats-server compresses each
    block of the log once it is full (the events are JSON, which compresses to a fraction of its
    size for little of the server's CPU: docs/performance.md). A stream made without it is
    changed to it; nats-server compresses the blocks it seals from its next start on."""
    try:
        info = await jsm.stream_info(stream)
    except NotFoundError:
        config = StreamConfig(
            name=stream, subjects=list(subjects), num_replicas=replicas,
            storage=StorageType.MEMORY if memory else StorageType.FILE, duplicate_window=duplicate_window,
            compression=StoreCompression.NONE if memory else COMPRESSION, allow_atomic=True,
        )  # fmt: skip
        for attempt in range(3):
            try:
                await jsm.add_stream(config)
                return
            except ServerError:  # the server still tidying a stream deleted a moment ago
                if attempt == 2:
                    raise
                await asyncio.sleep(DELETE_SETTLE)
        return
    config = info.config
    compression = COMPRESSION if config.storage == StorageType.FILE else config.compression
    if (set(config.subjects or ()) != set(subjects) or config.duplicate_window != duplicate_window
            or config.compression != compression or not config.allow_atomic):
        config = config.evolve(subjects=list(subjects), duplicate_window=duplicate_window,
                               compression=compression, allow_atomic=True)
        await jsm.update_stream(config)


async def delete_stream(jsm: JetStreamManager, stream: str) -> None:
    """Remove the stream and everything in it (tests, `poolwise reset`).

    nats-server (2.15) may still write a deleted file-backed stream's files for a moment after
    answering; a stream created again under the same name at once can come up holding the old
    messages. So for those this returns only after a short settle time."""
    try:
        info = await jsm.stream_info(stream)
        await jsm.delete_stream(stream)
    except NotFoundError:
        return
    if info.config.storage != StorageType.MEMORY:
        await asyncio.sleep(DELETE_SETTLE)


def reader_config(name: str, after: int, subjects: Sequence[str]) -> ConsumerConfig:
    """An ephemeral consumer for one read, from `after + 1`, acknowledging nothing. It is named in
    the request's subject (CONSUMER.CREATE.<stream>.<name>): a reader allowed only such names (the
    auditor, deploy/nats/teams.conf) cannot name a service's durable in the body of an unnamed
    create, which updates that durable (its filter, ...)."""
    return ConsumerConfig(
        name=name,
        ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
        opt_start_seq=after + 1, filter_subjects=list(subjects) or None, mem_storage=True,
        inactive_threshold=30.0, num_replicas=1,
    )  # fmt: skip


async def durable_at(jsm: JetStreamManager, stream: str, durable: str, subjects: Sequence[str],
                     after_seq: int) -> ConsumerInfo:
    """The durable consumer, positioned right after `after_seq` (recreated when it is not)."""
    try:
        info: ConsumerInfo | None = await jsm.consumer_info(stream, durable)
    except NotFoundError:
        info = None
    if info is not None:
        config = info.config
        filters = config.filter_subjects or ([config.filter_subject] if config.filter_subject else [])
        if (
            config.ack_policy == AckPolicy.ALL
            and not config.deliver_subject
            and sorted(filters) == sorted(subjects)
            and info.num_ack_pending == 0
            and not info.num_waiting
            and info.delivered is not None and info.delivered.stream_seq == after_seq
            and info.ack_floor is not None and info.ack_floor.stream_seq == after_seq
        ):
            return info
        await jsm.delete_consumer(stream, durable)
    created: ConsumerInfo = await jsm.add_consumer(stream, ConsumerConfig(
        name=durable, durable_name=durable, ack_policy=AckPolicy.ALL,
        deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=after_seq + 1,
        filter_subjects=list(subjects) or None, ack_wait=300.0, max_ack_pending=-1,
    ))  # fmt: skip
    return created
