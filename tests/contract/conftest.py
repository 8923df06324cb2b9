"""The contract suites run every test on both log adapters: `MemoryLog` and `JetStreamLog` on a
real nats-server (a fresh stream per test)."""

from __future__ import annotations

import pytest

from services.common.log import EventLog
from services.common.memlog import MemoryLog


@pytest.fixture(params=["memory", pytest.param("jetstream", marks=pytest.mark.nats)])
def log(request: pytest.FixtureRequest) -> EventLog:
    if request.param == "memory":
        return MemoryLog()
    result: EventLog = request.getfixturevalue("jetstream_log")
    return result
