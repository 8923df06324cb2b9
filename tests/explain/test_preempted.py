"""`explain` on a preempted gang says why it was taken: the pool and the numbers."""

from __future__ import annotations

import anyio

from events import decode_all
from services.admission.domain.explain import explain
from services.admission.queries import ExplainingFolder
from services.common.memlog import MemoryLog
from services.tools.demo.story import scenario
from services.tools.scenario.runner import run_on


def _folded_after(steps: int) -> ExplainingFolder:
    story = scenario()
    story = story.model_copy(update={"steps": story.steps[:steps]})
    log = MemoryLog()
    report = anyio.run(run_on, log, story, "explain-preempted")
    assert report.passed
    folder = ExplainingFolder()
    for stored in anyio.run(log.read, 1):
        for envelope in decode_all(stored.data):  # one event, or a pack of decisions
            folder.step(envelope, stored.seq)
    return folder


def _preempted_gang(folder: ExplainingFolder) -> str:
    rt = folder.state.runtime("default")
    return min(g.id for g in rt.gangs.values() if any(t.preemption_requested for t in g.tasks))


def test_a_gang_with_a_preemption_request_is_explained_with_the_numbers() -> None:
    folder = _folded_after(2)  # t=60: RP2 and RP3 are 11.67 over; 12 gangs each asked to stop
    gang = _preempted_gang(folder)
    text = explain(folder.state, "default", gang, folder.history).text
    assert "preemption requested for 1 of its tasks" in text
    assert "taken by preemption" in text
    # preemption's reason says "since 60" (log seconds); explain says it as the time it shows elsewhere
    assert "over non-slack entitlement since 1970-01-01 00:01:00 UTC: cpu 45 held, 33.3333 entitled" in text


def test_a_requeued_preempted_gang_still_says_why_it_was_taken() -> None:
    folder = _folded_after(3)  # t=70: the tasks reported preempted; their gangs wait again
    rt = folder.state.runtime("default")
    gang = min(g.id for g in rt.gangs.values() if g.state == "pending" and g.attempt == 1)
    text = explain(folder.state, "default", gang, folder.history).text
    assert "requeued" in text and "taken by preemption" in text and "/RP" in text
