"""The parts of tracing and metrics that need no server: what a carried context is taken for, that
unsampled gangs cost no span, that the gang contexts a fold keeps are bounded, that a message
header never carries a line break, and that a deleted pool's counts go with it (admission's fold,
the tallies of the decisions it published)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from bench.workload import envelope
from events import (
    ClockTicked,
    Envelope,
    GangEnqueued,
    HostRegistered,
    PoolConfig,
    PoolConfigChanged,
    PoolDeleted,
    TaskSpec,
    TreeConfigured,
    TreeOptions,
    encode,
    subjects,
)
from events.config import GangTimeoutOptions
from services.admission.folder import AdmissionFolder
from services.admission.queries import ExplainingFolder
from services.common import metrics, tracing
from services.common.folding import fold_batch
from services.common.jetstream import trace_headers
from services.common.log import Stored
from services.common.memlog import MemoryLog
from services.common.trace_recovery import ranges, recover
from services.preemption.folder import PreemptionFolder
from services.sdk.build import enqueue_event
from services.sdk.build import envelope as sdk_envelope
from services.tree.service import TreeService

T0 = 1_767_225_600.0
T0_AT = datetime.fromtimestamp(T0, UTC)
TREE = "t"
SAMPLED = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
UNSAMPLED = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(provider)
    yield exporter
    tracing.uninstall()


@pytest.fixture
def recording() -> Iterator[None]:
    metrics.reset()
    metrics.RECORDING = True
    yield
    metrics.reset()
    metrics.RECORDING = False


def test_a_context_is_taken_only_when_well_formed_and_sampled() -> None:
    found = tracing.context_of({"traceparent": SAMPLED})
    assert found is not None and (found.trace_id, found.span_id) == (0x0af7651916cd43dd8448eb211c80319c,
                                                                     0xb7ad6b7169203331)
    assert found.is_remote
    assert tracing.context_of({"traceparent": SAMPLED[:-2] + "03"}) is not None  # (sampled and random)
    for text in (UNSAMPLED, SAMPLED[:-2] + "02", "00-" + "0" * 32 + "-b7ad6b7169203331-01",
                 "00-0af7651916cd43dd8448eb211c80319c-" + "0" * 16 + "-01", "ff" + SAMPLED[2:],
                 "00-0af7651916cd43dd8448eb211c80319g-b7ad6b7169203331-01", SAMPLED + "x", "", "garbage"):
        assert tracing.context_of({"traceparent": text}) is None, text
    assert tracing.context_of(None) is None
    assert tracing.context_of({"other": SAMPLED}) is None


def _fold(folder: AdmissionFolder, *events: Any, trace: dict[str, str] | None = None) -> list[Any]:
    out = []
    for event in events:
        _fold.seq += 1  # type: ignore[attr-defined]
        sent = envelope(event, f"e{_fold.seq}", T0 + _fold.seq)  # type: ignore[attr-defined]
        if trace is not None and event.type == "GangEnqueued":
            sent = tracing.with_trace(sent, trace)
        out += folder.step(sent, _fold.seq)  # type: ignore[attr-defined]
    return out


_fold.seq = 0  # type: ignore[attr-defined]


def _tree() -> list[Any]:
    return [TreeConfigured(tree=TREE, options=TreeOptions(
                gang_timeout=GangTimeoutOptions(default=3600.0, limit=3600.0, jitter=0.0))),
            PoolConfigChanged(tree=TREE, path="/a", created=True, config=PoolConfig()),
            PoolConfigChanged(tree=TREE, path="/b", created=True, config=PoolConfig()),
            HostRegistered(host="h1", resources={"cpu": 100.0})]


def _gang(name: str, pool: str) -> GangEnqueued:
    return GangEnqueued(tree=TREE, gang=name, pool=pool, job=name, size=1,
                        tasks=[TaskSpec(id=f"{name}/0", resources={"cpu": 1.0})])


def test_a_cycle_makes_spans_only_for_sampled_gangs_and_only_live(spans: InMemorySpanExporter) -> None:
    folder = AdmissionFolder()
    _fold(folder, *_tree())
    _fold(folder, _gang("sampled", "/a"), trace={"traceparent": SAMPLED})
    _fold(folder, _gang("unsampled", "/a"), trace={"traceparent": UNSAMPLED})
    _fold(folder, _gang("bare", "/a"))
    assert set(folder.traces.found) == {(TREE, "sampled")}  # (an unsampled gang is never looked up again)
    with tracing.live():
        decided = _fold(folder, ClockTicked())
    admitted = {e.event.gang: e for e in decided if e.type == "GangAdmitted"}
    assert set(admitted) == {"sampled", "unsampled", "bare"}
    names = sorted(s.name for s in spans.get_finished_spans())
    assert names == ["admission GangAdmitted", "admission cycle"]  # one gang span: the sampled one's
    cycle = next(s for s in spans.get_finished_spans() if s.name == "admission cycle")
    assert [link.context.span_id for link in cycle.links] == [0xb7ad6b7169203331]
    assert cycle.attributes is not None and cycle.attributes["poolwise.gangs_decided"] == 3
    assert admitted["sampled"].trace is not None and admitted["unsampled"].trace is None
    assert admitted["bare"].trace is None
    # not live (a rebuild, a standby): no span, nothing carried
    spans.clear()
    _fold(folder, _gang("later", "/b"), trace={"traceparent": SAMPLED})
    decided = _fold(folder, ClockTicked())
    assert [e.trace for e in decided if e.type == "GangAdmitted"] == [None]
    assert spans.get_finished_spans() == ()


def test_a_batch_that_decides_nothing_makes_no_span(spans: InMemorySpanExporter) -> None:
    folder = AdmissionFolder()
    _fold(folder, *_tree())
    with tracing.live("admission", 1) as batch:
        assert batch is not None
        batch.decisions = len(_fold(folder, _gang("g", "/a")))  # (folded: nothing decided yet)
    assert spans.get_finished_spans() == ()
    with tracing.live("admission", 1) as batch:
        assert batch is not None
        batch.decisions = len(_fold(folder, ClockTicked()))
    made = {s.name: s for s in spans.get_finished_spans()}
    assert set(made) == {"fold batch", "admission cycle"}
    assert made["fold batch"].attributes == {"service": "admission", "events": 1, "decisions": batch.decisions}
    assert made["admission cycle"].parent is not None
    assert made["admission cycle"].parent.span_id == made["fold batch"].context.span_id


def test_an_unsampled_batch_makes_a_cycle_span_only_for_a_sampled_gang() -> None:
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased

    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=ParentBased(ALWAYS_OFF))  # batches (roots) left out, sampled parents followed
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(provider)
    try:
        folder = AdmissionFolder()
        _fold(folder, *_tree())
        _fold(folder, _gang("bare", "/a"))
        with tracing.live("admission", 1) as batch:
            assert batch is not None and not batch.span().is_recording()
            _fold(folder, ClockTicked())
        assert exporter.get_finished_spans() == ()  # no cycle span: it would not be recorded
        _fold(folder, _gang("sampled", "/b"), trace={"traceparent": SAMPLED})
        with tracing.live("admission", 1):
            decided = _fold(folder, ClockTicked())
        spans = {s.name: s for s in exporter.get_finished_spans()}
        assert set(spans) == {"admission cycle", "admission GangAdmitted"}
        cycle, gang = spans["admission cycle"], spans["admission GangAdmitted"]
        assert cycle.parent is not None and cycle.parent.span_id == 0xb7ad6b7169203331  # in the gang's trace
        assert cycle.attributes is not None and cycle.attributes["poolwise.gangs_traced"] == 1
        assert [link.context.span_id for link in gang.links] == [cycle.context.span_id]
        assert [e.trace is not None for e in decided if e.type == "GangAdmitted"] == [True]
    finally:
        tracing.uninstall()


def test_a_task_report_and_a_cancel_are_joined_to_their_gangs_trace(spans: InMemorySpanExporter) -> None:
    from events import GangCancelled, TaskStateChanged

    folder = AdmissionFolder()
    _fold(folder, *_tree())
    _fold(folder, _gang("g", "/a"), trace={"traceparent": SAMPLED})
    with tracing.live():
        [admitted] = [e for e in _fold(folder, ClockTicked()) if e.type == "GangAdmitted"]
    decision = tracing.context_of(admitted.trace)
    assert decision is not None
    spans.clear()
    report = "00-11111111111111111111111111111111-2222222222222222-01"
    inputs = [TaskStateChanged(tree=TREE, gang="g", task="g/0", state="running"), GangCancelled(tree=TREE, gang="g")]
    for index, event in enumerate(inputs):
        _fold.seq += 1  # type: ignore[attr-defined]
        sent = tracing.with_trace(envelope(event, f"r{index}", T0 + _fold.seq), {"traceparent": report})  # type: ignore[attr-defined]
        with tracing.live():
            folder.step(sent, _fold.seq)  # type: ignore[attr-defined]
    made = spans.get_finished_spans()
    assert [s.name for s in made] == ["admission TaskStateChanged", "admission GangCancelled"]
    for span in made:
        assert span.parent is not None and span.parent.span_id == 0x2222222222222222  # in the sender's trace
        assert [link.context.span_id for link in span.links] == [decision.span_id]  # and to the gang's
    assert made[0].attributes is not None and made[0].attributes["poolwise.state"] == "running"


def test_nothing_is_remembered_or_carried_with_tracing_off() -> None:
    assert not tracing.ON
    folder = AdmissionFolder()
    _fold(folder, *_tree())
    _fold(folder, _gang("g", "/a"), trace={"traceparent": SAMPLED})
    with tracing.live():
        decided = _fold(folder, ClockTicked())
    assert folder.traces.found == {}
    assert [e.trace for e in decided if e.type == "GangAdmitted"] == [None]
    # and the SDK carries nothing when no provider records
    with tracing.producing("enqueue") as carried:
        made = sdk_envelope(enqueue_event(gang="g", pool="/a", count=1, resources={"cpu": 1.0}), trace=carried)
    assert carried is None and made.trace is None


def test_the_gang_contexts_kept_are_bounded_and_dropped_when_gangs_end(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tracing.GangTraces, "LIMIT", 3)
    kept = tracing.GangTraces()
    for i in range(5):
        kept.see(tracing.with_trace(envelope(_gang(f"g{i}", "/a"), f"e{i}", T0), {"traceparent": SAMPLED}))
    assert list(kept.found) == [(TREE, "g2"), (TREE, "g3"), (TREE, "g4")]  # the oldest went first
    from events import GangTimedOut

    kept.see(envelope(GangTimedOut(tree=TREE, gang="g3", pool="/a", members=0, size=1, deadline=T0), "t", T0))
    assert list(kept.found) == [(TREE, "g2"), (TREE, "g4")]


def test_a_header_never_carries_a_line_break() -> None:
    assert trace_headers("id", {"traceparent": SAMPLED, "tracestate": "a=1", "baggage": "x"}) == \
        {"Nats-Msg-Id": "id", "traceparent": SAMPLED, "tracestate": "a=1"}
    assert trace_headers("id", {"traceparent": SAMPLED + "\r\nNats-Msg-Id: other"}) == {"Nats-Msg-Id": "id"}
    assert trace_headers("id", None) == {"Nats-Msg-Id": "id"}


def test_a_bad_trace_ratio_is_said_and_ignored(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
                                              ) -> None:
    monkeypatch.setenv("POOLWISE_TRACE_RATIO", "2")
    assert tracing._sampler() is None
    assert "POOLWISE_TRACE_RATIO: a fraction from 0 to 1, got '2'" in capsys.readouterr().err
    monkeypatch.setenv("POOLWISE_TRACE_RATIO", "0.25")
    assert "0.25" in tracing._sampler().get_description()


def test_a_deleted_pools_counts_go_with_it(recording: None) -> None:
    folder = AdmissionFolder()
    _fold(folder, *_tree(), PoolConfigChanged(tree=TREE, path="/ab", created=True, config=PoolConfig()))
    _fold(folder, _gang("a", "/a"), _gang("b", "/b"), _gang("ab", "/ab"))
    decided = _fold(folder, ClockTicked())
    metrics.published("admission", decided, folder)
    keys = {(TREE, "/a"), (TREE, "/b"), (TREE, "/ab")}
    assert set(metrics.TALLIES.admitted) == keys and set(metrics.TALLIES.waits) == keys
    _fold(folder, PoolDeleted(tree=TREE, path="/a"))
    assert metrics.TALLIES.admitted == {(TREE, "/b"): 1, (TREE, "/ab"): 1}  # (/ab is not below /a)
    assert set(metrics.TALLIES.waits) == {(TREE, "/b"), (TREE, "/ab")}
    # below a deleted pool too, in every table keyed by pool; other trees keep theirs
    tallies = metrics.TALLIES
    tallies.preempted[(TREE, "/b/x", "over_entitlement")] = 2
    tallies.requeued[(TREE, "/b", "preempted")] = 1
    tallies.timed_out[("other", "/b")] = 1
    tallies.pool_deleted(TREE, "/b")
    assert (tallies.admitted, tallies.preempted, tallies.requeued, tallies.timed_out) == \
        ({(TREE, "/ab"): 1}, {}, {}, {("other", "/b"): 1})


def test_the_sdk_carries_a_context_only_when_its_span_is_sampled() -> None:
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON

    event = enqueue_event(gang="g", pool="/a", count=1, resources={"cpu": 1.0})
    for sampler, carries in ((ALWAYS_ON, True), (ALWAYS_OFF, False)):
        tracing.install(TracerProvider(sampler=sampler))
        try:
            with tracing.producing("enqueue") as carried:
                made = sdk_envelope(event, trace=carried)
        finally:
            tracing.uninstall()
        assert (made.trace is not None) is carries
        assert made.id == sdk_envelope(event).id  # the id never depends on it
    assert tracing.context_of(made.trace) is None


def _traced(seq: int, gang: str, trace: str | None) -> Stored:
    sent = Envelope(id=f"ev-{seq}", time=T0_AT, source="sdk:test",
                    event=enqueue_event(tree=TREE, gang=gang, pool="/a", count=1, resources={"cpu": 1.0}),
                    trace={"traceparent": trace} if trace else None)
    return Stored(seq, subjects.for_event("GangEnqueued", TREE, "sdk:test"), encode(sent), sent.id)


@pytest.mark.anyio
async def test_the_tree_services_batch_is_a_span_in_its_sampled_gangs_traces(spans: InMemorySpanExporter) -> None:
    other = "00-1af7651916cd43dd8448eb211c80319c-c7ad6b7169203331-01"
    service = TreeService(MemoryLog())
    config = Envelope(id="ev-1", time=T0_AT, source="tree", event=TreeConfigured(tree=TREE, options=TreeOptions()))
    first = [Stored(1, subjects.for_event("TreeConfigured", TREE, "tree"), encode(config), "ev-1"),
             _traced(2, "g1", SAMPLED), _traced(3, "g2", UNSAMPLED), _traced(4, "g3", other), _traced(5, "g4", None)]
    await service.fold_consumed(first)
    [made] = spans.get_finished_spans()
    assert made.name == "fold batch" and made.parent is not None
    assert (made.context.trace_id, made.parent.span_id) == (0x0af7651916cd43dd8448eb211c80319c, 0xb7ad6b7169203331)
    assert dict(made.attributes or {}) == {"service": "tree", "events": 5, "poolwise.traced": 2, "poolwise.tree": TREE,
                                           "poolwise.gang": "g1", "poolwise.event": "GangEnqueued"}
    assert [(link.context.trace_id, link.context.span_id, dict(link.attributes or {})) for link in made.links] == [
        (0x1af7651916cd43dd8448eb211c80319c, 0xc7ad6b7169203331,
         {"poolwise.gang": "g3", "poolwise.event": "GangEnqueued"})]
    assert service.position == 5
    # nothing sampled in a batch, or a batch folded already (a restart's consumer starts below the
    # position): no span
    await service.fold_consumed([_traced(6, "g5", UNSAMPLED), _traced(7, "g6", None)])
    await service.fold_consumed([_traced(2, "g1", SAMPLED)])
    assert len(spans.get_finished_spans()) == 1
    tracing.uninstall()
    await service.fold_consumed([_traced(8, "g7", SAMPLED)])
    assert len(spans.get_finished_spans()) == 1 and service.position == 8


@pytest.mark.anyio
async def test_a_start_from_a_snapshot_reads_its_held_gangs_contexts_back_from_the_log() -> None:
    """The state a snapshot would hold (a fold made with tracing off: it remembers nothing), loaded
    into admission's folder behind explain's wrapper, and into preemption's: `recover` finds the
    sampled contexts of the unfinished gangs completed by the snapshot's position, from the log."""
    log = MemoryLog()
    other = "00-1af7651916cd43dd8448eb211c80319c-c7ad6b7169203331-01"
    await log.append([envelope(e, f"c{i}", T0, source="tree") for i, e in enumerate(_tree())])
    for i, (gang, trace) in enumerate((("g1", SAMPLED), ("g2", UNSAMPLED), ("g3", None), ("g4", other))):
        sent = envelope(_gang(gang, "/a"), f"e{i}", T0 + i)
        await log.append([tracing.with_trace(sent, {"traceparent": trace}) if trace else sent])  # (a message each)
    stored = await log.read()
    upto = stored[-2].seq  # the snapshot's position: before g4's enqueue
    made = AdmissionFolder()
    fold_batch(made, [s for s in stored if s.seq <= upto], 0)
    assert not made.traces.found and set(made.state.trees[TREE].gangs) == {"g1", "g2", "g3"}

    wrapped = ExplainingFolder(AdmissionFolder(made.state))
    assert await recover(log, wrapped, upto) == 0  # tracing off: nothing read
    provider = TracerProvider()
    tracing.install(provider)
    try:
        assert await recover(log, wrapped, upto) == 1
        assert wrapped.inner.traces.found == {(TREE, "g1"): {"traceparent": SAMPLED}}
        preemption = PreemptionFolder()
        preemption.state.admission = made.state
        assert await recover(log, preemption, stored[-1].seq) == 1  # (g4 is not held: not folded)
        assert preemption.traces.found == {(TREE, "g1"): {"traceparent": SAMPLED}}
        # a finished gang is not looked for
        made.state.trees[TREE].gangs["g1"].state = "done"
        again = AdmissionFolder(made.state)
        assert await recover(log, again, upto) == 0 and not again.traces.found
    finally:
        tracing.uninstall()


def test_positions_are_read_in_ranges() -> None:
    assert ranges([]) == []
    assert ranges([900, 5, 10, 300, 6000, 6100], gap=256, span=4096) == [(5, 10), (300, 300), (900, 900),
                                                                         (6000, 6100)]
    assert ranges([1, 200, 400], gap=256, span=4096) == [(1, 400)]
    assert ranges([1, 200, 400], gap=256, span=300) == [(1, 200), (400, 400)]
