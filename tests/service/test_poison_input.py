"""No input crashes a service: an event whose fold or decision raises is refused (`InputRejected`,
rule `internal_error`, with the exception's type and message) and the services go on deciding
the rest of the log; a cycle or a pass that raises is refused and closed all the same. The
handlers are made to raise on one input in these tests (a test build of the bug), on the
in-memory log and on JetStream, and `replay --verify` derives the same refusals."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from events import CycleCompleted, GangEnqueued, InputRejected, decode_all
from services.admission.domain import decide as admission_decide
from services.admission.domain import fold_config, fold_gangs
from services.admission.domain import state as admission_state
from services.common.jetstream import JetStreamLog
from services.common.log import EventLog, Stored
from services.common.memlog import MemoryLog
from services.preemption.domain import state as preemption_state
from services.tools.replay import verify
from services.tools.scenario.format import load_scenario
from services.tools.scenario.report import ScenarioReport
from services.tools.scenario.runner import run_on

SCENARIO = """
name: poison
resources: [cpu]
capacity: {cpu: 100}
pools:
  - {path: /a, reservation: {cpu: 50}}
  - {path: /b, reservation: {cpu: 50}}
steps:
  - at: 0
    do:
      - enqueue: {gang: g1, pool: /a, tasks: 2, resources: {cpu: 1}}
      - enqueue: {gang: poison, pool: /a, tasks: 2, resources: {cpu: 1}}
      - enqueue: {gang: g3, pool: /b, tasks: 2, resources: {cpu: 1}}
  - at: 5
    do:
      - enqueue: {gang: g4, pool: /b, tasks: 1, resources: {cpu: 1}}
    expect:
      gangs:
        g1: admitted
        g3: admitted
        g4: admitted
"""


@pytest.fixture
def poisoned_enqueue(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Admission's (and preemption's copy of its) fold raises on gang `poison`'s enqueue."""
    real = fold_gangs.on_enqueued

    def raising(state: Any, event: Any, seq: int, out: Any) -> None:
        if event.gang == "poison":
            raise RuntimeError(f"poisoned gang {event.gang}")
        real(state, event, seq, out)

    table = dict(admission_state.HANDLERS)
    for kind, handler in table.items():
        if handler is real:
            table[kind] = raising
    monkeypatch.setattr(admission_state, "HANDLERS", table)
    yield


async def run_async(log: EventLog, tmp_path: Path) -> tuple[ScenarioReport, list[Stored]]:
    path = tmp_path / "poison.yaml"
    path.write_text(SCENARIO)
    report = await run_on(log, load_scenario(path), "poison")
    return report, await log.read(1)


def run(log: EventLog, tmp_path: Path) -> tuple[ScenarioReport, list[Stored]]:
    return anyio.run(run_async, log, tmp_path, backend="asyncio")


def refusals(messages: list[Stored], rule: str) -> list[tuple[str, InputRejected]]:
    out = []
    for stored in messages:
        for envelope in decode_all(stored.data):
            if isinstance(envelope.event, InputRejected) and envelope.event.rule == rule:
                out.append((envelope.source, envelope.event))
    return out


def check_poisoned(report: ScenarioReport, messages: list[Stored]) -> None:
    assert report.passed, report.to_dict()
    found = refusals(messages, "internal_error")
    # preemption's copy of admission's fold raises on it too: each service says so of itself
    assert sorted(source for source, _ in found) == ["admission", "preemption"]
    event = next(e for source, e in found if source == "admission")
    assert event.input_type == "GangEnqueued"
    assert "RuntimeError: poisoned gang poison" in event.reason
    assert '"gang":"poison"' in event.input
    result = verify(messages)
    assert result.ok, [f.line() for f in result.findings]


def test_a_poison_enqueue_is_refused_and_the_rest_decided_in_memory(poisoned_enqueue: None, tmp_path: Path) -> None:
    check_poisoned(*run(MemoryLog(), tmp_path))


@pytest.mark.nats
@pytest.mark.anyio
async def test_a_poison_enqueue_is_refused_and_the_rest_decided_on_jetstream(poisoned_enqueue: None,
                                                                             fresh_stream: str,
                                                                             tmp_path: Path) -> None:
    log = await JetStreamLog.connect(fresh_stream)
    try:
        check_poisoned(*await run_async(log, tmp_path))
    finally:
        await log.close()


def test_a_cycle_that_raises_is_refused_and_closed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The first cycle raises: it is refused and closed (preemption and the runner go on), the
    next one decides the gangs."""
    real = admission_decide.decide_cycle
    calls = {"n": 0}

    def raising_once(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise KeyError("a broken cycle")
        return real(*args, **kwargs)

    monkeypatch.setattr(admission_decide, "decide_cycle", raising_once)
    report, messages = run(MemoryLog(), tmp_path)
    found = refusals(messages, "internal_error")
    assert len(found) == 1 and found[0][0] == "admission"
    assert "KeyError: 'a broken cycle'" in found[0][1].reason
    completed = [e.event for s in messages for e in decode_all(s.data) if isinstance(e.event, CycleCompleted)]
    assert completed[0].service == "admission" and completed[0].decisions == 0
    assert report.passed, report.to_dict()  # g1, g3 (and g4) admitted by the cycles after


def test_a_pass_that_raises_is_refused_and_closed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    real = preemption_state.preemption_pass
    calls = {"n": 0}
    failed: set[int] = set()  # each fold's first pass fails (the service's, and the runner's own view's)

    def raising_once(admission: Any, *args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if id(admission) not in failed:
            failed.add(id(admission))
            raise ZeroDivisionError("a broken pass")
        return real(admission, *args, **kwargs)

    monkeypatch.setattr(preemption_state, "preemption_pass", raising_once)
    report, messages = run(MemoryLog(), tmp_path)
    found = refusals(messages, "internal_error")
    assert [(s, e.input_type) for s, e in found] == [("preemption", "CycleCompleted")]
    assert report.passed, report.to_dict()  # the next passes ran: the runner waits for each
    assert calls["n"] >= 2


def test_an_enqueue_refusal_quotes_at_most_the_limit(tmp_path: Path) -> None:
    """A refused input of nearly a whole message is quoted shortened, so that its refusal fits one
    message too."""
    from events import INPUT_QUOTE_LIMIT, TaskSpec

    state = admission_state.AdmissionState()
    event = GangEnqueued(gang="huge", pool="/nowhere", job="j", size=20000,
                         tasks=[TaskSpec(id=f"task-{i:06d}", resources={"cpu": 1.0}) for i in range(20000)])
    assert len(event.model_dump_json()) > 500_000
    (refusal, _finished) = state.apply(event, 1, 1.0)
    assert isinstance(refusal.event, InputRejected)
    assert len(refusal.event.input) == INPUT_QUOTE_LIMIT


BIG_GANG = """
name: big-gang
resources: [cpu]
capacity: {cpu: 1000}
trees:
  - name: default
    max_tasks_per_gang: MOST
    gang_timeout: {default: 30, limit: 100, jitter: 0}
pools:
  - {path: /a, reservation: {cpu: 500}}
steps:
  - at: 0
    do:
      - enqueue: {gang: huge, pool: /a, tasks: FIRST, size: 40000, resources: {cpu: 0.001}}
      - enqueue: {gang: small, pool: /a, tasks: 2, resources: {cpu: 1}}
  - at: 1
    do:
      - enqueue: {gang: huge, pool: /a, tasks: SECOND, size: 40000, resources: {cpu: 0.001}}
      - enqueue: {gang: after, pool: /a, tasks: 2, resources: {cpu: 1}}
    expect:
      gangs:
        small: admitted
        after: admitted
        huge: STATE
"""


def big_gang(most: int, first: int, second: int, state: str) -> str:
    text = BIG_GANG
    for name, value in (("MOST", most), ("FIRST", first), ("SECOND", second), ("STATE", state)):
        text = text.replace(name, str(value))
    return text


@pytest.mark.nats
@pytest.mark.anyio
@pytest.mark.parametrize(("most", "first", "second", "state", "rule_text"), [
    # a declared size above max_tasks_per_gang: refused whole at its first members (its id used up)
    (10_000, 20_000, 20_000, "rejected", "size 40000 is above the tree's max_tasks_per_gang 10000"),
    # allowed that many, but the members would not fit one GangAdmitted: the second message is
    # refused and the gang waits for members that never come (it times out later)
    (40_000, 8_000, 8_000, "waiting", "bytes on the wire, above the 786432 one admission message can hold"),
])
async def test_a_gang_too_large_for_one_message_is_refused(fresh_stream: str, tmp_path: Path, most: int, first: int,
                                                           second: int, state: str, rule_text: str) -> None:
    """The 40,000-member gang sent as two messages, each under NATS's 1 MiB: before, its
    `GangAdmitted` was over the server's payload limit and admission crashed on every start."""
    path = tmp_path / "big.yaml"
    path.write_text(big_gang(most, first, second, state))
    log = await JetStreamLog.connect(fresh_stream)
    try:
        report = await run_on(log, load_scenario(path), "big")
        messages = await log.read(1)
    finally:
        await log.close()
    assert report.passed, report.to_dict()
    found = refusals(messages, "gang_too_large")
    assert len(found) >= 1 and rule_text in found[0][1].reason
    assert max(len(m.data) for m in messages) < 1024 * 1024
    result = verify(messages)
    assert result.ok, [f.line() for f in result.findings]


def test_a_poison_input_that_made_a_cycle_due_still_has_its_cycle_there(monkeypatch: pytest.MonkeyPatch,
                                                                        tmp_path: Path) -> None:
    """A tick whose fold raises after it made the tree's cycle due: admission runs that cycle at
    the tick's own message, where preemption's copy of the fold (`CycleOrder`) opens it too. Run
    one message later, preemption held the rest of the log for a cycle that never came."""
    real = fold_config.on_tick
    raised: set[int] = set()  # once per fold (admission's, preemption's, the runner's views)

    def raising_after(state: Any, event: Any, seq: int, out: Any) -> None:
        real(state, event, seq, out)
        if state.now >= 5.0 and id(state) not in raised and state.due:
            raised.add(id(state))
            raise RuntimeError("a tick that breaks after making the cycle due")

    table = dict(admission_state.HANDLERS)
    for kind, handler in table.items():
        if handler is real:
            table[kind] = raising_after
    monkeypatch.setattr(admission_state, "HANDLERS", table)
    report, messages = run(MemoryLog(), tmp_path)
    found = refusals(messages, "internal_error")
    assert sorted(source for source, _ in found) == ["admission", "preemption"], found
    tick_seq = found[0][1].input_seq
    cycles = [(e.source, e.event.trigger_seq) for s in messages for e in decode_all(s.data)
              if isinstance(e.event, CycleCompleted)]
    assert ("admission", tick_seq) in cycles and ("preemption", tick_seq) in cycles, (tick_seq, cycles)
    assert report.passed, report.to_dict()
    result = verify(messages)
    assert result.ok, [f.line() for f in result.findings]
    assert result.shared  # the replay's one fold for both services agrees too (not only the separate folds)
