"""Shared fixtures: one private nats-server for the session, a fresh stream per test.

- `nats_url`: the session's server (started in a tmp dir; `NATS_URL`, if set, is used instead).
- `fresh_stream`: that URL, after the `POOLWISE` stream was deleted and created again, empty, with
  sequences from 1. Tests run one at a time, so no test sees another's events. On a server given
  by `NATS_URL` (not ours), a `POOLWISE` stream the tests did not create is never deleted: the test
  is skipped instead.
- `jetstream_log`: a `JetStreamLog` connected to `fresh_stream`.

Async tests use anyio's plugin: `@pytest.mark.anyio` (backend: asyncio, which nats-py needs).
Tests that use `nats_url` (directly or through the fixtures above) are marked `nats`.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator

import pytest
from nats.js.api import StorageType, StreamConfig
from nats.js.errors import NotFoundError

from services.common.jetstream import JetStreamLog
from services.common.natsserver import EmbeddedNats

TEST_STREAM_MARK = "poolwise test stream: the test suite deletes and recreates it"


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def nats_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if _external_server():
        yield os.environ["NATS_URL"].strip()
        return
    with EmbeddedNats(tmp_path_factory.mktemp("nats")) as server:
        yield server.url


def _external_server() -> bool:
    return bool(os.environ.get("NATS_URL", "").strip())


async def reset_stream(log: JetStreamLog) -> None:
    """Delete the log's stream and create it again, empty. On a server that is not the session's
    own, only a stream the tests created is deleted."""
    try:
        info = await log.jsm.stream_info(log.stream)
    except NotFoundError:
        info = None
    if info is not None:
        if _external_server() and info.config.description != TEST_STREAM_MARK:
            pytest.skip(f"stream {log.stream} on this server was not created by the tests; not touching it")
        await log.delete_stream()
    await log.jsm.add_stream(StreamConfig(
        name=log.stream, subjects=list(log.subjects), storage=StorageType.FILE, duplicate_window=600.0,
        description=TEST_STREAM_MARK,
    ))  # fmt: skip
    await log.ensure_stream()


@pytest.fixture
async def fresh_stream(nats_url: str) -> str:
    log = await JetStreamLog.connect(nats_url)
    try:
        await reset_stream(log)
    finally:
        await log.close()
    return nats_url


@pytest.fixture
async def jetstream_log(fresh_stream: str) -> AsyncIterator[JetStreamLog]:
    log = await JetStreamLog.connect(fresh_stream)
    try:
        yield log
    finally:
        await log.close()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "nats_url" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.nats)
