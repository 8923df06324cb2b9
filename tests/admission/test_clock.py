"""The admission service's clock: when it ticks. A tick may go as soon as the previous tick's
cycle is published (its decisions acknowledged), before the service has read them back: the new
tick lands after them in the log, so the fold has applied them by the time it reads the tick."""

from __future__ import annotations

import anyio
import pytest

from services.admission.folder import AdmissionFolder
from services.admission.service import Clock
from services.common.memlog import MemoryLog

pytestmark = pytest.mark.anyio


async def test_the_next_tick_waits_for_the_previous_cycle_to_be_published_not_read_back() -> None:
    log = MemoryLog()
    folder = AdmissionFolder()
    clock = Clock(log, folder)
    rt = folder.state.runtime("t")
    rt.dirty = True  # inputs arrived
    assert clock._wanted()
    await clock.tick()
    (tick,) = await log.read(1)
    assert clock.unpublished == tick.seq and not rt.dirty
    rt.dirty = True  # more inputs, while the tick is on its way
    assert not clock._wanted()  # its cycle is not published yet
    rt.in_flight = tick.seq  # the fold read the tick and started the cycle
    await clock.on_batch(tick.seq - 1)  # a batch before the tick: nothing changes
    assert not clock._wanted()
    await clock.on_batch(tick.seq)  # the batch with the tick: its cycle's decisions are in the log
    assert clock.unpublished is None
    assert clock._wanted()  # although the cycle is still in flight (its CycleCompleted not read back)


async def test_a_cycle_in_flight_from_before_the_last_publication_still_blocks() -> None:
    folder = AdmissionFolder()
    clock = Clock(MemoryLog(), folder)
    rt = folder.state.runtime("t")
    rt.dirty, rt.in_flight = True, 10
    await clock.on_batch(9)
    assert not clock._wanted()
    with anyio.fail_after(1):
        await clock.on_batch(10)
    assert clock._wanted()
