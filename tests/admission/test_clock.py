"""The admission service's clock: when it ticks. A tick goes once the fold has read the previous
one (that tick's cycle then covers whatever was folded before it), without waiting for the
previous cycle's decisions to be published or read back: they took effect at their tick."""

from __future__ import annotations

import anyio
import pytest

from events import Envelope, Event, at_seconds
from services.admission.folder import AdmissionFolder
from services.admission.service import Clock
from services.common.folding import fold_batch
from services.common.memlog import MemoryLog
from tests.admission.builders import gang, host, pool, tree

pytestmark = pytest.mark.anyio


async def _append(log: MemoryLog, *events: Event) -> None:
    await log.append([Envelope(id=f"{e.type}-{i}-{id(e)}", time=at_seconds(1.0), source="test", event=e)
                      for i, e in enumerate(events)])


async def test_the_next_tick_waits_until_the_fold_has_read_the_previous_one() -> None:
    log = MemoryLog()
    folder = AdmissionFolder()
    folded = 0

    async def fold() -> list[str]:
        nonlocal folded
        result = fold_batch(folder, await log.read(folded + 1), folded)
        folded = result.last_seq
        return [d.event.type for d in result.decisions]

    await _append(log, tree(), host(cpu=10), pool("/a"), gang("g1", "/a"))
    await fold()
    clock = Clock(log, folder)
    rt = folder.state.runtime("default")
    assert rt.dirty  # inputs arrived
    assert clock._wanted()
    await clock.tick()
    await _append(log, gang("g2", "/a"))  # lands after the tick
    assert not rt.dirty and clock.tick_seq == 5
    await _append(log, gang("g0", "/a"))
    assert not clock._wanted()
    decided = await fold()  # g2, g0 are behind the tick: its cycle covers g1 only
    assert decided.count("GangAdmitted") == 1
    assert rt.dirty and folder.state.last_seq > clock.tick_seq
    assert clock._wanted()  # although that cycle's decisions are not published


async def test_a_due_timer_does_not_tick_while_the_last_tick_is_ahead_of_the_fold() -> None:
    log = MemoryLog()
    folder = AdmissionFolder()
    await _append(log, tree(), host(cpu=10), pool("/a"), gang("w", "/a", tasks=1, size=2, timeout=0.0))
    fold_batch(folder, await log.read(1), 0)
    assert folder.state.next_deadline() is not None  # the waiting gang's deadline: due at once
    clock = Clock(log, folder)
    await clock.tick()  # ahead of the fold from now on: it will fire the timer when it is read
    with anyio.move_on_after(0.2):
        await clock.run()
    assert clock.count == 1  # the due timer made no second tick
    fold_batch(folder, await log.read(5), 4)  # the fold reads the tick (the timer fires there)
    assert not clock._ahead()
