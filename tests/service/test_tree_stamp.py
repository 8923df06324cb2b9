"""The time the tree service stamps on what it writes (issue 21): an accepted command's events
carry the log's time or, with a clock (`poolwise up`, `serve`), the clock's when it is later, so a
fresh cluster's configuration is not dated 1970; a refusal carries the log's time alone, which is
what `poolwise replay --verify` derives again."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from events import Envelope, HostRegistered, InputRejected, PoolConfig, at_seconds
from events.commands import PoolUpsert
from services.common.memlog import MemoryLog
from services.tools.replay import verify
from services.tree.service import TreeService
from tests.service.helpers import envelopes

pytestmark = pytest.mark.anyio


def upsert(path: str, require: str = "any", **config: object) -> PoolUpsert:
    return PoolUpsert(path=path, config=PoolConfig.model_validate(config), require=require)


def reading(times: list[float]) -> Callable[[], float]:
    """A clock that reads `times` one after another (the last one for good)."""
    def clock() -> float:
        return times.pop(0) if len(times) > 1 else times[0]
    return clock


async def stamped(log: MemoryLog) -> list[tuple[str, float]]:
    return [(env.event.type, env.time.timestamp()) for _, env in await envelopes(log)]


async def test_without_a_clock_the_log_time_is_stamped() -> None:
    log = MemoryLog()
    assert (await TreeService(log).handle(upsert("/a", "new"))).ok
    assert await stamped(log) == [("PoolConfigChanged", 0.0)]


async def test_a_clock_later_than_the_log_dates_what_is_accepted_and_never_a_refusal() -> None:
    log = MemoryLog()
    tree = TreeService(log, clock=reading([5000.0, 6000.0, 20000.0]))
    assert (await tree.handle(upsert("/a", "new", reservation={"cpu": 10}))).ok  # clock 5000, log 0
    # an input from elsewhere, later than the clock will read next
    await log.append([Envelope(id="host-1", time=at_seconds(9000.0), source="someone",
                               event=HostRegistered(host="h1", resources={"cpu": 100}))])
    assert (await tree.handle(upsert("/b", "new"))).ok  # clock 6000, log 9000: the log's
    refused = await tree.handle(upsert("/a", "new"))  # clock 20000: a refusal is the log's time
    assert not refused.ok and refused.error is not None and refused.error.rule == "exists"
    assert await stamped(log) == [("PoolConfigChanged", 5000.0), ("HostRegistered", 9000.0),
                                  ("PoolConfigChanged", 9000.0), ("InputRejected", 9000.0)]
    records = [env.event for _, env in await envelopes(log) if isinstance(env.event, InputRejected)]
    assert len(records) == 1
    report = verify(await log.read(1))  # the refusal is derived again, its time with it
    assert report.ok, report

