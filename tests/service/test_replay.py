"""`services.tools.replay.verify`: a log made by the real services verifies clean; a tampered one is
reported with the exact ids that differ."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from events import Envelope, GangAdmitted, decode, decode_all, encode, encode_pack
from services.common.log import Stored
from services.common.memlog import MemoryLog
from services.tools.replay import DECISION_TYPES, Report, verify
from services.tools.replay.verify import differences
from services.tools.scenario.format import load_scenario
from services.tools.scenario.runner import run_on

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "scenarios"
SHARED_FILES = sorted(SHARED.glob("*.yaml")) if SHARED.is_dir() else []

TIMEOUTS = """
name: replay-timeouts
resources: [cpu]
capacity: {cpu: 100}
trees:
  - name: default
    gang_timeout: {default: 30, limit: 100, jitter: 0}
pools:
  - {path: /p, reservation: {cpu: 50}, limit: {cpu: 100}}
  - {path: /q, reservation: {cpu: 50}}
steps:
  - at: 0
    do:
      - enqueue: {gang: g1, pool: /p, tasks: 2, size: 3, timeout: 10, resources: {cpu: 1}}
      - enqueue: {gang: g2, pool: /p, tasks: 2, size: 3, timeout: 10, resources: {cpu: 1}}
      - enqueue: {gang: g4, pool: /p, tasks: 2, timeout: 10, resources: {cpu: 1}}
      - enqueue: {gang: big, pool: /q, tasks: 4, resources: {cpu: 10}}
  - at: 5
    do:
      - enqueue: {gang: g1, pool: /p, tasks: 1, size: 3, timeout: 10, resources: {cpu: 1}}
      - task: {id: g4/0, state: placed}
  - at: 11
    do:
      - task: {gang: g1, state: running}
  - at: 20
    do:
      - task: {gang: g4, state: running}
      - enqueue: {gang: g2, pool: /p, tasks: 1, size: 3, resources: {cpu: 1}}
"""


def scenario_log(text: str, tmp_path: Path) -> list[Stored]:
    path = tmp_path / "scenario.yaml"
    path.write_text(text)

    async def run() -> list[Stored]:
        log = MemoryLog()
        await run_on(log, load_scenario(path), "replay-test")
        return await log.read(1)

    return anyio.run(run, backend="asyncio")


@pytest.fixture(scope="module")
def messages(tmp_path_factory: pytest.TempPathFactory) -> list[Stored]:
    return scenario_log(TIMEOUTS, tmp_path_factory.mktemp("replay"))


def decisions(messages: list[Stored]) -> list[tuple[int, Envelope]]:
    out = []
    for stored in messages:
        for envelope in decode_all(stored.data):  # one event, or a pack of decisions
            if envelope.type in DECISION_TYPES:
                out.append((stored.seq, envelope))
    return out


def renumbered(messages: list[Stored]) -> list[Stored]:
    """The messages as a log would hold them: sequences 1, 2, 3... (after one was taken out).
    Bases recorded in envelopes keep their values: a removed message leaves them pointing as before
    only when it came after them, which the tests below arrange."""
    return [Stored(i, m.subject, m.data, m.msg_id) for i, m in enumerate(messages, start=1)]


def test_a_scenario_log_verifies_clean(messages: list[Stored]) -> None:
    report = verify(messages)
    assert report.ok, [f.line() for f in report.findings]
    kinds = {t for t, c in report.counts.items() if c.recorded}
    assert {"GangAdmitted", "GangTimedOut", "GangRequeued", "EntitlementsComputed", "CycleCompleted",
            "GangFinished"} <= kinds
    assert all(c.recorded == c.derived == c.matched for c in report.counts.values())
    assert sum(c.recorded for c in report.counts.values()) == len(decisions(messages))


@pytest.mark.skipif(not SHARED_FILES, reason=f"no shared scenarios at {SHARED}")
@pytest.mark.parametrize("path", SHARED_FILES, ids=[p.stem for p in SHARED_FILES])
def test_every_shared_scenario_log_verifies_clean(path: Path, tmp_path: Path) -> None:
    report = verify(scenario_log(path.read_text(), tmp_path))
    assert report.ok, [f.line() for f in report.findings]


def forged_admission(messages: list[Stored], gang: str) -> tuple[Envelope, Envelope]:
    """A recorded GangAdmitted, and a copy for another gang (as a forger would write it)."""
    real = next(e for _, e in decisions(messages) if isinstance(e.event, GangAdmitted))
    event = real.event
    assert isinstance(event, GangAdmitted)
    fake = real.model_copy(update={"id": f"forged-{gang}", "event": event.model_copy(update={"gang": gang})})
    return real, fake


def test_an_appended_admission_of_the_wrong_gang_is_reported(messages: list[Stored]) -> None:
    _, fake = forged_admission(messages, "g2")
    tampered = [*messages, Stored(len(messages) + 1, "poolwise.decision.default.admission", encode(fake), fake.id)]
    report = verify(tampered)
    assert not report.ok
    assert [(f.kind, f.id, f.seq) for f in report.findings] == [("unexpected", fake.id, len(messages) + 1)]
    assert report.counts["GangAdmitted"].recorded == report.counts["GangAdmitted"].matched + 1


def test_an_appended_copy_with_a_recorded_id_is_reported(messages: list[Stored]) -> None:
    real, fake = forged_admission(messages, "g2")
    copy = fake.model_copy(update={"id": real.id})
    tampered = [*messages, Stored(len(messages) + 1, "poolwise.decision.default.admission", encode(copy), None)]
    report = verify(tampered)
    assert [(f.kind, f.id) for f in report.findings] == [("duplicate", real.id)]


def holding(messages: list[Stored], event_id: str) -> int:
    """The index of the message that holds the event `event_id` (alone, or in a pack)."""
    return next(i for i, m in enumerate(messages) if event_id in {e.id for e in decode_all(m.data)})


def rewritten(message: Stored, event_id: str, by: Envelope | None) -> Stored:
    """`message` with the event `event_id` replaced by `by` (or taken out), the rest as it was."""
    kept = [by if e.id == event_id else e for e in decode_all(message.data)]
    parts = [encode(e) for e in kept if e is not None]
    return Stored(message.seq, message.subject, encode_pack(parts), message.msg_id)


def test_a_rewritten_admission_is_reported_as_differing(messages: list[Stored]) -> None:
    real, fake = forged_admission(messages, "nobody")
    index = holding(messages, real.id)
    tampered = list(messages)
    tampered[index] = rewritten(messages[index], real.id, fake.model_copy(update={"id": real.id}))
    report = verify(tampered)
    first = min((f for f in report.findings if f.seq is not None), key=lambda f: f.seq or 0)
    assert (first.kind, first.id, first.seq) == ("differs", real.id, messages[index].seq)  # the first wrong one
    assert "event.gang" in first.detail and '"nobody" recorded' in first.detail
    assert first.recorded is not None and first.derived is not None


def test_a_removed_decision_is_reported_missing(messages: list[Stored]) -> None:
    index, last = max((i, m) for i, m in enumerate(messages)
                      if len(decode_all(m.data)) == 1 and decode(m.data).type in DECISION_TYPES)
    removed = decode(last.data)
    report = verify(renumbered(messages[:index] + messages[index + 1:]))
    assert [(f.kind, f.id, f.seq) for f in report.findings] == [("missing", removed.id, None)]
    assert report.counts[removed.type].derived == report.counts[removed.type].recorded + 1


def test_a_removed_admission_is_reported_with_its_id(messages: list[Stored]) -> None:
    real, _ = forged_admission(messages, "unused")
    index = holding(messages, real.id)
    alone = len(decode_all(messages[index].data)) == 1
    tampered = list(messages)
    if alone:  # sequences kept: a gap, as if the message had been deleted from the stream
        del tampered[index]
    else:  # taken out of its pack
        tampered[index] = rewritten(messages[index], real.id, None)
    report = verify(tampered)
    assert real.id in report.ids("missing")
    assert not report.ok


def test_a_decision_of_a_source_that_decides_nothing_is_unexpected(messages: list[Stored]) -> None:
    real, _ = forged_admission(messages, "unused")
    impostor = real.model_copy(update={"id": "impostor", "source": "mallory"})
    report = verify([*messages, Stored(len(messages) + 1, "poolwise.decision.default.mallory", encode(impostor))])
    assert [(f.kind, f.id) for f in report.findings] == [("unexpected", "impostor")]


def test_an_ignored_field_changes_nothing(messages: list[Stored]) -> None:
    real, _ = forged_admission(messages, "unused")
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    traced = real.model_copy(update={"trace": {"traceparent": parent}})
    tampered = [Stored(m.seq, m.subject, encode(traced) if m.msg_id == real.id else m.data, m.msg_id)
                for m in messages]
    assert verify(tampered).ok


def test_differences_name_paths() -> None:
    assert differences({"a": {"b": 1, "c": [1, 2]}}, {"a": {"b": 2, "c": [1, 3]}}) == [
        "a.b: 1 recorded != 2 re-derived", "a.c[1]: 2 recorded != 3 re-derived"]
    assert differences({"a": 1}, {"b": 1}) == ["a: 1 recorded, absent re-derived", "b: absent recorded, 1 re-derived"]


def test_report_as_json(messages: list[Stored]) -> None:
    report: Report = verify(messages)
    data = json.loads(json.dumps(report.to_dict()))
    assert data["ok"] is True and data["messages"] == len(messages) and data["findings"] == []
