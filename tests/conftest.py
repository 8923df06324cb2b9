"""Shared fixtures: one private nats-server for the session, a fresh stream per test.

- `nats_url`: the session's server (started in a tmp dir; `NATS_URL`, if set, is used instead).
- `fresh_stream`: that URL, after the `POOLWISE` stream was deleted and created again, empty, with
  sequences from 1: for tests that run services on the real stream name.
- `jetstream_log`: a `JetStreamLog` on a stream of its own (`POOLWISE_T<n>`, the usual subjects,
  empty): what the log contract runs on.

Test streams are memory-backed: nats-server 2.15 races when a file-backed stream is deleted and
another created right after (the new one may come up holding the old messages, or fail to create
its directory); memory streams have no files. The adapter does not care which storage it is on.

Within a pytest process tests run one at a time and each starts by deleting the streams before
it, so no test sees another's events. The README's command runs two such processes (pytest-xdist,
`-n 2 --dist loadfile`: a file's tests stay together, in order, on one worker, as some modules
share one running system): each worker's session starts a server of its own, so workers never
share a stream. On a
server given by `NATS_URL` (not ours) only streams the tests created are deleted, and if another
stream holds the subjects the test is skipped; there workers would delete each other's streams,
so `NATS_URL` with more than one worker is refused at start (`-n 0` runs one process).

Property tests (hypothesis) are derandomized: every run of the suite tries the same examples, so
a red run is a real change, not a new draw (a draw that fails is kept as an explicit example), and
they have no deadline: a case's time is not what they assert (hypothesis's default of 200 ms per
case failed tests/tree/test_used_ids.py's seals on a loaded machine: DeadlineExceeded, 227 ms).
`HYPOTHESIS_PROFILE=deep` draws new examples each run (`just fuzz`): for looking, not for CI.

Async tests use anyio's plugin: `@pytest.mark.anyio` (backend: asyncio, which nats-py needs).
Tests that use `nats_url` (directly or through the fixtures above) are marked `nats`.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from itertools import count

import pytest
from hypothesis import settings
from nats.js.api import StorageType, StreamConfig

from events.subjects import STREAM
from services.common import metrics
from services.common.jetstream import JetStreamLog
from services.common.natsserver import EmbeddedNats
from services.tree.domain import used_ids

settings.register_profile("ci", derandomize=True, database=None, deadline=None)
settings.register_profile("deep", derandomize=False, max_examples=1000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

TEST_STREAM_MARK = "poolwise test stream: the test suite deletes and recreates it"
_names = count(1)


def _external_server() -> bool:
    return bool(os.environ.get("NATS_URL", "").strip())


@pytest.fixture(scope="module", autouse=True)
def no_process_state_left_by_the_module() -> Iterator[None]:
    """Each test module ends with the id record's runs kept in memory again, and with no service's
    status: a module on the same worker (`-n 2 --dist loadfile`) starts with neither.

    - `start_services` with a data dir leaves the process's store pointing at files of that data
      dir (as a service's process should; `run_system`, a demo's, puts the store back when it
      stops);
    - every service run in this process (a scenario, `start_services`) leaves its status in
      `metrics.STATUS` (its role, position, and its folder: the whole fold, its id records alive,
      which `used_ids.freeze_filters` then writes to the store of whatever snapshot comes next)."""
    yield
    used_ids.use_store(used_ids.MemoryRuns())
    metrics.reset()


def pytest_configure(config: pytest.Config) -> None:
    workers = getattr(config.option, "numprocesses", None) or 0
    if _external_server() and workers not in (0, "0"):
        raise pytest.UsageError(
            f"NATS_URL is set, so every worker would use that one server and delete the others' "
            f"streams: run with -n 0 (one process), not -n {workers}"
        )


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


async def reset_stream(log: JetStreamLog) -> None:
    """Delete the streams earlier tests left (only those the tests created, on a server that is
    not the session's own) and create the log's stream, empty."""
    for info in await log.jsm.streams_info():
        config = info.config
        if _external_server() and config.description != TEST_STREAM_MARK:
            if set(config.subjects or ()) & set(log.subjects):
                pytest.skip(f"stream {config.name} on {log.nc.connected_url} holds the subjects; not touching it")
            continue
        await JetStreamLog(log.nc, stream=str(config.name)).delete_stream()  # waits out a file store
    await log.jsm.add_stream(StreamConfig(
        name=log.stream, subjects=list(log.subjects), storage=StorageType.MEMORY, duplicate_window=600.0,
        description=TEST_STREAM_MARK,
    ))  # fmt: skip
    await log.ensure_stream()


@pytest.fixture
async def fresh_stream(nats_url: str) -> str:
    log = await JetStreamLog.connect(nats_url, stream=STREAM)
    try:
        await reset_stream(log)
    finally:
        await log.close()
    return nats_url


@pytest.fixture
async def jetstream_log(nats_url: str) -> AsyncIterator[JetStreamLog]:
    log = await JetStreamLog.connect(nats_url, stream=f"{STREAM}_T{next(_names)}")
    try:
        await reset_stream(log)
        yield log
    finally:
        await log.close()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "nats_url" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.nats)
