"""What a per-tree preemption instance (`HeldTreesPreemption`) does when the close it waits for does
not come: a close that does not decode (corrupt, or a newer version's), one that never lands, a
pass that raises where it runs; what a per-tree instance reads (the refusals too); and the trace
its takeovers' decisions carry. Whatever it gives up on, its fold ends where a service-wide
instance's fold of the same log ends, and what it decides is what the log records."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from typing import Any

import anyio
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from events import CycleCompleted, Envelope, InputRejected, PreemptionRequested, decode_all, encode, read_envelope
from services.common import metrics, tracing
from services.common.folding import fold_batch
from services.common.log import Stored
from services.common.memlog import MemoryLog, subject_filter
from services.preemption import service
from services.preemption.domain.state import PreemptionState
from services.preemption.folder import SUBJECTS, PreemptionFolder
from services.preemption.held_trees import HeldTreesPreemption
from tests.admission.test_interleavings import TREES
from tests.held_trees import closes, recorded
from tests.observability import test_tracing_parts
from tests.preemption.test_held_trees import contended_log, folded, same

SAMPLED = test_tracing_parts.SAMPLED
spans = test_tracing_parts.spans  # (the fixture: the spans made, kept in memory)


def first_close(messages: list[Stored]) -> tuple[int, str]:
    """The index of the first message holding a preemption pass's close, and its tree."""
    for index, stored in enumerate(messages):
        if stored.subject.endswith(".preemption"):
            for envelope in decode_all(stored.data, read_envelope):
                if isinstance(envelope.event, CycleCompleted):
                    return index, envelope.event.tree
    raise AssertionError("no pass closed")


def service_wide(messages: list[Stored]) -> PreemptionFolder:
    folder = PreemptionFolder()
    read = subject_filter(SUBJECTS)
    fold_batch(folder, [m for m in messages if read(m.subject)], 0)
    return folder


def per_tree(folder: HeldTreesPreemption, messages: list[Stored]) -> tuple[list[Envelope], int]:
    """Fold what the service reads, a message at a time: the decisions, and the most events it
    held back at once."""
    read = subject_filter(folder.subjects)
    decisions: list[Envelope] = []
    most = 0
    for stored in messages:
        if read(stored.subject):
            decisions += fold_batch(folder, [stored], stored.seq - 1).decisions
            most = max(most, folder.waited()[1])
    return decisions, most


def passes(decisions: list[Envelope]) -> Counter[str]:
    return Counter(d.event.tree for d in decisions if d.source == "preemption" and isinstance(d.event, CycleCompleted))


def test_an_unreadable_close_is_given_up_on_and_every_other_tree_still_gets_its_passes() -> None:
    """One close in the log does not decode: the instances that do not hold its tree would wait
    for it for good (every later message held, their own trees' passes undecided, no snapshot).
    They take it for the close it may be: its pass is decided there (kept by the tree gate) and
    the fold goes on, through the states of a service-wide fold of the same log."""
    for seed in range(3):
        messages = contended_log(seed).messages
        index, tree = first_close(messages)
        broken = list(messages)
        broken[index] = replace(messages[index], data=b'{"broken"')
        expected = service_wide(broken)
        folder = HeldTreesPreemption()
        folder.held = frozenset(TREES) - {tree}
        decisions, _ = per_tree(folder, broken)
        assert folder.settled() and folder.waited() == (0.0, 0), seed
        assert folder.given_up == Counter({tree: 1}), seed
        assert folded(folder.state) == folded(expected.state), seed
        for other in folder.held:  # every pass a service-wide fold of this log runs, decided here
            assert folder.decided[other] == passes(fold_batch(PreemptionFolder(), broken, 0).decisions)[other] > 1
        found = recorded(messages)
        for decision in decisions:  # (the given-up pass's are dropped: the next test)
            assert decision.id in found and same(decision, found[decision.id]), seed


def test_the_decisions_of_a_pass_given_up_on_for_a_message_that_does_not_decode_are_dropped(
        caplog: pytest.LogCaptureFixture) -> None:
    """That message may be the holder's copy of them (a newer version's pack): the tree gate
    could never see it and would keep them for good, and send them again, maybe past the
    duplicate window, if the tree came here. They are dropped, counted, and said once."""
    for seed in range(3):
        messages = contended_log(seed).messages
        index, tree = first_close(messages)
        broken = list(messages)
        broken[index] = replace(messages[index], data=b'{"broken"')
        folder = HeldTreesPreemption()
        folder.held = frozenset(TREES) - {tree}
        caplog.clear()
        with caplog.at_level("ERROR", logger="services.preemption.held_trees"):
            decisions, _ = per_tree(folder, broken)
        assert folder.given_up == Counter({tree: 1}), seed
        assert not [d for d in decisions if getattr(d.event, "tree", None) == tree], seed  # (nothing of it)
        closing = decode_all(messages[index].data, read_envelope)  # (what the holder published of it)
        assert folder.dropped == Counter({tree: len(closing)}), seed
        said = [r.getMessage() for r in caplog.records if "given up on" in r.getMessage()]
        assert len(said) == 1 and f"its {len(closing)} decisions dropped" in said[0], (seed, said)


@pytest.mark.parametrize("bound", ["events", "seconds"])
def test_a_close_that_never_lands_is_given_up_on_within_the_bound(bound: str) -> None:
    """A close that never lands (a holder alive that does not publish it) is given up on after
    `give_up_events` events or `give_up_seconds` of log time read since the pass parked: what the
    fold holds back meanwhile is bounded. With no bound it would hold back the rest of the log."""
    given_up = 0
    for seed in range(3):
        messages = contended_log(seed).messages
        index, tree = first_close(messages)
        lost = list(messages)
        lost[index] = replace(messages[index], subject=f"poolwise.decision.{tree}.elsewhere")  # read by no one
        expected = service_wide(lost)

        waiting = HeldTreesPreemption()
        waiting.give_up_events, waiting.give_up_seconds = 10**9, float("inf")
        _, most = per_tree(waiting, lost)
        assert not waiting.settled() and waiting.waited()[1] > 60, seed  # (the rest of the log)

        folder = HeldTreesPreemption()
        if bound == "events":
            folder.give_up_events, folder.give_up_seconds = 20, float("inf")
        else:
            folder.give_up_events, folder.give_up_seconds = 10**9, 5.0
        folder.held = frozenset(TREES) - {tree}
        decisions, most = per_tree(folder, lost)
        assert folder.settled(), seed
        assert most < 40, (seed, most)
        assert folded(folder.state) == folded(expected.state), seed
        found = recorded(messages)
        for decision in decisions:
            assert decision.id in found and same(decision, found[decision.id]), seed
        given_up += folder.given_up[tree]
    assert given_up >= 3


def test_a_parked_fold_reports_how_long_it_waits_and_what_it_holds_back() -> None:
    """The gauges `poolwise_fold_parked_seconds` and `poolwise_fold_parked_events` read `waited()`."""
    messages = contended_log(1).messages
    folder = HeldTreesPreemption()
    watched = metrics.ServiceStatus("preemption", folder=folder)
    seen: list[tuple[float | None, float | None]] = []
    for stored in messages:
        fold_batch(folder, [stored], stored.seq - 1)
        seen.append((metrics._parked(watched, 0), metrics._parked(watched, 1)))
    assert any(seconds and seconds > 0 for seconds, _ in seen) and any(held and held > 0 for _, held in seen)
    assert seen[-1] == (0.0, 0.0) and folder.settled()
    assert metrics._parked(metrics.ServiceStatus("preemption", folder=PreemptionFolder()), 0) is None


def test_a_pass_that_raises_where_it_runs_leaves_nothing_held(monkeypatch: pytest.MonkeyPatch) -> None:
    """A parked pass that raises when it is run (a bug) must not leave the fold standing at it:
    a pass read from the log goes on without its memory's update; a pass taken over is refused as
    a service-wide fold refuses it (the same refusal, id and content), and the fold goes on."""
    messages = contended_log(2).messages
    probe = HeldTreesPreemption()
    parks: list[tuple[str, int]] = []
    for stored in messages:
        fold_batch(probe, [stored], stored.seq - 1)
        if probe.state.parked is not None and probe.state.parked not in parks:
            parks.append(probe.state.parked)
    target = parks[1]
    real = PreemptionState.run_pass

    def run_pass(state: PreemptionState, tree: str, seq: int, picks: bool = True) -> Any:
        if (tree, seq) == target:
            raise RuntimeError("a bug in the pass")
        return real(state, tree, seq, picks)

    monkeypatch.setattr(PreemptionState, "run_pass", run_pass)
    read = HeldTreesPreemption()  # holding nothing: the pass is read from the log
    result = fold_batch(read, messages, 0)
    assert read.settled() and read.order.holding == 0 and read.waited() == (0.0, 0)
    assert read.read == closes(messages, "preemption")  # (the one that raised counted: it ran)
    assert not result.decisions

    taking = HeldTreesPreemption()  # taking the tree over while that pass is parked
    made: list[Envelope] = []
    for stored in messages:
        made += fold_batch(taking, [stored], stored.seq - 1).decisions
        if taking.state.parked == target:
            taking.held = frozenset({target[0]})
            made += taking.take_over()
            taking.held = frozenset()
    assert taking.settled() and taking.order.holding == 0
    refused = [d for d in made if isinstance(d.event, InputRejected)]
    expected = [d for d in fold_batch(PreemptionFolder(), messages, 0).decisions
                if isinstance(d.event, InputRejected)]
    assert len(refused) == 1 and len(expected) == 1
    assert refused[0].id == expected[0].id and same(refused[0], expected[0])


def traced_log(seed: int) -> list[Stored]:
    """A contended log whose gangs were enqueued with a sampled trace context."""
    out: list[Stored] = []
    for stored in contended_log(seed).messages:
        if stored.subject.startswith("poolwise.gang."):
            (envelope,) = decode_all(stored.data)
            stored = replace(stored, data=encode(tracing.with_trace(envelope, {"traceparent": SAMPLED})))
        out.append(stored)
    return out


def test_the_decisions_of_a_takeover_carry_their_gangs_trace(spans: InMemorySpanExporter) -> None:
    """A preemption decided at a takeover (`take_over`: at the next message, or by the shell on a
    quiet log) carries its gang's trace as one decided in a batch does; apart from it, its bytes
    are what the log records (a trace is no part of what `replay --verify` compares)."""
    taken = 0
    for seed in range(4):
        messages = traced_log(seed)
        found = recorded(messages)
        folder = HeldTreesPreemption()
        for stored in messages:
            with tracing.live("preemption"):
                fold_batch(folder, [stored], stored.seq - 1)
                parked = folder.state.parked
                if parked is None:
                    continue
                folder.held = frozenset({parked[0]})
                made = folder.take_over()
                folder.held = frozenset()
            for decision in made:
                if isinstance(decision.event, PreemptionRequested):
                    taken += 1
                    assert decision.trace is not None, seed
                    untraced = decision.model_copy(update={"trace": None})
                    assert encode(untraced) == encode(found[decision.id].model_copy(update={"trace": None}))
    assert taken > 3
    assert sum(span.name == "preemption requested" for span in spans.get_finished_spans()) == taken


class Trees:
    """The leases as `FollowHeld` and `serve_preemption` ask them: `trees` held."""

    def __init__(self, trees: frozenset[str]) -> None:
        self.trees = trees

    def held(self) -> frozenset[str]:
        return self.trees

    def learn(self, trees: object) -> None:
        pass

    async def changed(self) -> None:
        await anyio.sleep_forever()


class Appended(MemoryLog):
    def __init__(self, done: anyio.Event) -> None:
        super().__init__()
        self.done = done
        self.made: list[Envelope] = []

    async def append(self, envelopes: Sequence[Envelope]) -> Any:
        self.made += envelopes
        self.done.set()


@pytest.mark.anyio
async def test_the_shells_takeover_of_a_parked_pass_carries_the_trace(spans: InMemorySpanExporter) -> None:
    """`FollowHeld` decides a pass parked on a tree that comes to it at once (a quiet log): those
    decisions carry their gangs' trace too."""
    for seed in range(4):
        messages = traced_log(seed)
        requests = {(d.event.tree, d.basis) for d in recorded(messages).values()
                    if isinstance(d.event, PreemptionRequested)}
        folder = HeldTreesPreemption()
        for stored in messages:  # up to a parked pass that asks for preemptions
            fold_batch(folder, [stored], stored.seq - 1)
            if folder.state.parked in requests:
                break
        else:
            continue
        done = anyio.Event()
        log = Appended(done)
        follow = service.FollowHeld(Trees(frozenset({folder.state.parked[0]})), folder, log)  # type: ignore[arg-type]
        async with anyio.create_task_group() as tg:
            tg.start_soon(follow.run)
            await done.wait()
            tg.cancel_scope.cancel()
        preempted = [d for d in log.made if isinstance(d.event, PreemptionRequested)]
        assert preempted and all(d.trace is not None for d in preempted)
        return
    raise AssertionError("no parked pass asked for a preemption")


@pytest.mark.anyio
async def test_a_per_tree_instance_reads_the_refusals_and_a_service_wide_one_does_not(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A failed pass's refusal is on `poolwise.rejected.<tree>`: the per-tree instance's fold is
    given those subjects (`HeldTreesPreemption.subjects`), a service-wide one's only `SUBJECTS`."""
    asked: list[tuple[type, tuple[str, ...]]] = []

    async def run_folder(log: Any, folder: Any, subjects: Any, **options: Any) -> None:
        asked.append((type(folder), tuple(subjects)))
        options["task_status"].started(0)

    monkeypatch.setattr(service, "run_folder", run_folder)
    for trees in (Trees(frozenset()), None):
        async with anyio.create_task_group() as tg:
            await tg.start(partial(service.serve_preemption, MemoryLog(), None, trees=trees))  # type: ignore[arg-type]
            tg.cancel_scope.cancel()
    assert asked == [(HeldTreesPreemption, (*SUBJECTS, "poolwise.rejected.*")), (PreemptionFolder, SUBJECTS)]
