"""`dry_run.clone`: the what-if's copy of admission's state shares the finished gangs (nothing
changes them) and copies everything else, so that what the what-if does on the copy (a change, a
cycle, preemption's requests) leaves the live fold as it was. In memory, on biglog's history
stopped half-way (gangs finished, admitted and pending in the state)."""

from __future__ import annotations

import anyio
import pytest

from events import read_envelope
from services.admission.domain.model import FINISHED
from services.admission.domain.state import AdmissionState
from services.admission.folder import SUBJECTS
from services.admission.queries import ExplainingFolder
from services.common.folding import fold_batch
from services.common.memlog import MemoryLog, subject_filter
from services.tools.cli.dry_run import clone, entitlements, outlook
from tests.replay.biglog import TREE, build


@pytest.fixture(scope="module")
def state() -> AdmissionState:
    """Admission's fold of the history, built once for the module (the tests change nothing in it)."""

    async def made() -> AdmissionState:
        log = MemoryLog()
        await build(log, 1500)
        messages = await log.read(1)
        wanted = subject_filter(SUBJECTS)
        # stopped before the last round's tick: its gangs pending, the round before's admitted
        enqueued = max(m.seq for m in messages if m.subject.startswith("poolwise.gang"))
        cut = min(m.seq for m in messages if m.subject.startswith("poolwise.clock") and m.seq > enqueued) - 1
        folder = ExplainingFolder()
        fold_batch(folder, [m for m in messages if m.seq <= cut and wanted(m.subject)], 0, read_envelope)
        folder.state.on_forget = None
        return folder.state

    return anyio.run(made)


def test_the_copy_shares_the_finished_gangs_and_copies_the_rest(state: AdmissionState) -> None:
    rt = state.trees[TREE]
    states = {g.state for g in rt.gangs.values()}
    assert {"done", "pending"} <= states, states
    copied = clone(state)
    other = copied.trees[TREE]
    assert list(other.gangs) == list(rt.gangs) and list(other.tasks) == list(rt.tasks)
    for name, gang in rt.gangs.items():
        if gang.state in FINISHED:
            assert other.gangs[name] is gang
        else:
            assert other.gangs[name] is not gang and other.gangs[name].tasks[0] is not gang.tasks[0]
            assert other.live[name] is other.gangs[name]  # one object per gang in the copy
            assert other.tasks[gang.tasks[0].id] is other.gangs[name].tasks[0]
    assert other.ledgers is not rt.ledgers and other.queues is not rt.queues


def test_what_the_what_if_does_on_the_copy_leaves_the_state_as_it_was(state: AdmissionState) -> None:
    rt = state.trees[TREE]
    before = ({n: g.state for n, g in rt.gangs.items()}, {p: dict(held.allocation) for p, held in rt.ledgers.items()},
              state.last_seq, entitlements(state))
    found = outlook(clone(state))
    assert len(found.admitted) == 500  # the last round's gangs, admitted on the copy
    after = ({n: g.state for n, g in rt.gangs.items()}, {p: dict(held.allocation) for p, held in rt.ledgers.items()},
             state.last_seq, entitlements(state))
    assert after == before


def test_the_copy_has_heaps_of_its_own_with_the_same_deadlines(state: AdmissionState) -> None:
    """The timers and the forgetting are copied (a cycle on the copy pushes and pops them) and
    read through the state's public accessors."""
    assert state.timer_heap and state.forget_heap  # pending gangs time out, finished ones are forgotten
    copied = clone(state)
    assert copied.timer_heap == state.timer_heap and copied.timer_heap is not state.timer_heap
    assert copied.forget_heap == state.forget_heap and copied.forget_heap is not state.forget_heap
    timers, forgets = list(state.timer_heap), list(state.forget_heap)
    copied.timer_heap.clear()
    copied.forget_heap.clear()
    assert (state.timer_heap, state.forget_heap) == (timers, forgets)
