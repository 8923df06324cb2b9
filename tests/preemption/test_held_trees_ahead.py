"""A per-tree preemption instance (`HeldTreesPreemption`) and what it reads out of its place: a
pass's close read before the fold reaches that pass (its holder's earlier pass kept back, then
published after it: a lease in doubt, a publish batch cut by a reconnect), and a pass's refusal
read after its close (late). A pass whose close was read is read, whoever holds its tree by the
time the fold gets there; a late refusal is not kept for good."""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise
from typing import Any

import pytest

from events import CycleCompleted, InputRejected, decode_all
from services.admission.domain.runtime import TreeRuntime
from services.common.folding import fold_batch
from services.common.log import Stored
from services.common.memlog import subject_filter
from services.preemption.domain import lower_priority
from services.preemption.domain import passes as passes_module
from services.preemption.held_trees import HeldTreesPreemption
from tests.held_trees import recorded
from tests.preemption.test_held_trees import contended_log, folded, same, whole


def pass_closed(stored: Stored) -> tuple[str, int] | None:
    """The pass (tree, trigger) whose close `stored` holds, if it holds one."""
    if not stored.subject.endswith(".preemption"):
        return None
    for envelope in decode_all(stored.data):
        if isinstance(envelope.event, CycleCompleted) and envelope.source == "preemption":
            return envelope.event.tree, envelope.event.trigger_seq
    return None


def swapped(messages: list[Stored], first: int, second: int) -> list[Stored]:
    """`messages`, those at `first` and `second` in each other's place (each position's seq kept)."""
    log = list(messages)
    log[first], log[second] = (replace(messages[second], seq=messages[first].seq),
                               replace(messages[first], seq=messages[second].seq))
    return log


def test_a_pass_whose_close_was_read_is_read_when_its_tree_comes_here_before_the_fold_reaches_it() -> None:
    """Two passes of one trigger, of trees t and u held elsewhere; u's close lands before t's (the
    holder kept t's back). The fold parks at t's pass, reads u's close, and both trees come here:
    t's pass is decided here (its close not read), u's is read (its close was read: its decisions
    are in the log), not decided and published again."""
    cases = 0
    for seed in range(4):
        messages = contended_log(seed).messages
        passes = [(index, closed) for index, stored in enumerate(messages)
                  if (closed := pass_closed(stored)) is not None]
        for (first, t), (second, u) in pairwise(passes):
            if t[1] != u[1] or t[0] == u[0]:
                continue  # (two trees' passes of one trigger)
            log = swapped(messages, first, second)
            folder = HeldTreesPreemption()
            for stored in log[:first + 1]:  # up to u's close, read while the fold waits at t's pass
                fold_batch(folder, [stored], stored.seq - 1)
            assert folder.state.parked == t, seed
            read_before = folder.read[u[0]]
            folder.held = frozenset({t[0], u[0]})  # their holder died: both come here
            made = folder.take_over() + fold_batch(folder, log[first + 1:], first + 1).decisions
            in_the_log = {envelope.id for envelope in decode_all(messages[second].data)}
            assert not [d for d in made if d.id in in_the_log], (seed, u)  # u's pass: nothing again
            assert folder.read[u[0]] == read_before + 1, (seed, u)
            assert any(isinstance(d.event, CycleCompleted) and (d.event.tree, d.event.trigger_seq) == t
                       for d in made), (seed, t)  # t's pass: decided here
            found = recorded(messages)
            assert all(d.id in found and same(d, found[d.id]) for d in made), seed
            assert folder.settled() and folded(folder.state) == folded(whole(messages).state), seed
            cases += 1
            break
    assert cases >= 3


def failing_make_room(monkeypatch: pytest.MonkeyPatch) -> None:
    """`make_room` raises on some passes (a function of the state: the same passes everywhere)."""
    real = lower_priority.make_room

    def make_room(rt: TreeRuntime, pools: Any, holdings: Any) -> Any:
        if len(rt.gangs) % 3 == 1:
            raise RuntimeError("a bug in make_room")
        return real(rt, pools, holdings)

    monkeypatch.setattr(passes_module, "make_room", make_room)


def test_a_refusal_read_after_its_passes_close_is_not_kept_for_good(monkeypatch: pytest.MonkeyPatch) -> None:
    """A failed pass's refusal that lands after its close (late: here each is stored again at the
    end, as a copy sent again past the duplicate window would be) is of a pass the fold has run
    already: nothing keeps it (the folder's set of failed passes is empty at the end)."""
    failing_make_room(monkeypatch)
    late = 0
    for seed in range(6):
        messages = contended_log(seed).messages
        refusals = [stored for stored in messages if stored.subject.startswith("poolwise.rejected.")
                    and any(isinstance(e.event, InputRejected) and e.source == "preemption"
                            for e in decode_all(stored.data))]
        late += len(refusals)
        log = [*messages, *(replace(stored, seq=len(messages) + n) for n, stored in enumerate(refusals, 1))]
        folder = HeldTreesPreemption()
        read = subject_filter(folder.subjects)
        fold_batch(folder, [stored for stored in log if read(stored.subject)], 0)
        assert folder.settled(), seed
        assert not folder._failed, (seed, folder._failed)  # (white-box: the memory that would grow)
    assert late > 3
