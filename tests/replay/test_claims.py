"""The child's fold (`Derivation.feed_rows`) compares a record with its decision where both are
(services/tools/replay/unread.py): a message whose every event has the very bytes of a decision it
made and has not read is matched there and only counted back to the verifier; its other decisions
go to the verifier as before. Through the child's protocol (`worker.answer`, `worker.elsewhere`),
a clean log gives the report of the one-process verifier, and a tampered one a report with
findings (the reader then verifies it again without the shared fold: that report is the one
shown); a record that differs by a byte is not taken, nor is a pack of a type that may not be
packed, nor a decision made twice."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from events import decode, decode_all, derived_id, encode_pack
from events.codec import pack_parts
from services.common.log import Stored
from services.common.memlog import MemoryLog
from services.tools.replay import worker
from services.tools.replay.decoding import Made
from services.tools.replay.derive import Derivation, Derived
from services.tools.replay.verify import Report, Verifier, command_refusals, verify
from tests.replay import reference
from tests.replay import test_pre_v3 as pre_v3
from tests.replay.biglog import build
from tests.replay.test_streaming import cases, logs, refusals_log, streamed, summary  # noqa: F401  (`logs`: a fixture)

Rows = list[tuple[int, str, bytes]]


def _rows(messages: list[Stored]) -> Rows:
    return [(s.seq, s.subject, s.data) for s in messages]


def through_the_child(messages: list[Stored], chunk: int, *, claiming: bool = True) -> tuple[Report, int]:
    """`messages` verified as the reader's process path does (shared fold), without the process:
    the report, and the records the child took."""
    derivation = Derivation(shared=True)
    derivation.claiming = claiming
    verifier = Verifier(command_refusals(messages), shared=True, derived_elsewhere=True)
    taken = 0
    for start in range(0, len(messages), chunk):
        piece = messages[start:start + chunk]
        elsewhere = worker.elsewhere(worker.answer(derivation.feed_rows(_rows(piece))))
        taken += sum(elsewhere.matched.values())
        verifier.feed(piece, elsewhere)
    for made in worker.elsewhere(worker.answer(Derived(derivation.rest(), frozenset(), 0, 0))).made:
        verifier.add_made(made)
    return verifier.finish(), taken


@pytest.fixture(scope="module")
def pre_v3_logs() -> tuple[list[Stored], list[Stored]]:
    """test_pre_v3's logs: one written with v3, its twin as the code before v3 wrote it."""
    current = anyio.run(pre_v3._shared_log, backend="asyncio")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pre_v3.decide, "compute_cycle", pre_v3.AsBeforeV3())
        before = anyio.run(pre_v3._shared_log, backend="asyncio")
    return current, pre_v3.as_version_2(before)


@pytest.fixture(scope="module")
def lifecycle() -> list[Stored]:
    log = MemoryLog()
    anyio.run(lambda: build(log, 600, per_round=50, leaves=3), backend="asyncio")
    return anyio.run(log.read, 1, backend="asyncio")


@pytest.mark.parametrize("chunk", [7, 500, 10_000])
def test_the_child_takes_its_own_records(lifecycle: list[Stored], chunk: int) -> None:
    report, taken = through_the_child(lifecycle, chunk)
    plain, none = through_the_child(lifecycle, chunk, claiming=False)
    assert report.ok and none == 0
    assert summary(report) == summary(plain) == summary(verify(lifecycle))
    decisions = sum(c.recorded for c in report.counts.values())
    # (a GangAdmitted and a GangFinished per gang, the cycles; in pieces of a few messages many a
    # record comes after its decision went to the verifier, a piece later)
    assert taken > (0.9 if chunk >= 500 else 0.3) * decisions, (taken, decisions)


@pytest.mark.parametrize("chunk", [3, 50])
def test_a_tampered_log_has_findings_through_the_child(logs: dict[str, list[Stored]],  # noqa: F811
                                                       chunk: int) -> None:
    for name, variant, messages in cases(logs):
        whole = verify(messages)
        report, _ = through_the_child(messages, chunk)
        assert report.ok == whole.ok, (name, variant, [f.line() for f in report.findings])
        if whole.ok:
            assert summary(report) == summary(whole), (name, variant)


def test_a_log_written_before_v3_through_the_child(pre_v3_logs: tuple[list[Stored], list[Stored]]) -> None:
    for messages in pre_v3_logs:
        report, _ = through_the_child(messages, 40)
        assert report.ok and summary(report) == summary(verify(messages))


def _decided(messages: list[Stored], type_: str) -> Stored:
    return next(s for s in messages if f'"type":"{type_}"'.encode() in s.data and ".decision." in s.subject)


def test_only_the_very_bytes_are_taken(lifecycle: list[Stored]) -> None:
    finished = _decided(lifecycle, "GangFinished")
    before = [s for s in lifecycle if s.seq < finished.seq]
    for data, taken in [(finished.data, 1), (finished.data.replace(b'"done"', b'"rejected"'), 0),
                        (finished.data + b" ", 0), (encode_pack([finished.data, finished.data]), 0)]:
        derivation = Derivation(shared=True)
        derivation.feed_rows(_rows(before))
        derived = derivation.feed_rows([(finished.seq, finished.subject, data)])
        assert sum(derived.matched.values()) == taken, data
        assert (finished.seq in derived.recording) == (not taken and data[:1] == b"{"), data
        held = {m.id for m in [*derived.made, *derivation.rest()]}  # (to the verifier: a piece later, or at the end)
        assert (decode(finished.data).id in held) == (not taken), data


@pytest.mark.parametrize("pack", [b"[]", b"[x]", b"["])
def test_odd_packs_are_malformed_and_not_taken(pack: bytes) -> None:
    derived = Derivation(shared=True).feed_rows([(1, "poolwise.decision.t.admission", pack)])
    assert derived.malformed == 1 and not derived.matched and not derived.recording


def test_a_decision_made_twice_goes_to_the_verifier(lifecycle: list[Stored]) -> None:
    """Two decisions of one message with one id (a fold's bug): neither is kept to be taken here,
    so the verifier sees both and reports the repeat."""
    envelope = decode(_decided(lifecycle, "GangFinished").data)
    derivation = Derivation(shared=True)
    made: list[Made] = []
    derivation._keep([envelope, envelope], made)
    assert [m.id for m in made] == [envelope.id, envelope.id] and not len(derivation.unread)
    derivation._keep([envelope], made)
    assert len(made) == 2 and len(derivation.unread) == 1


# --- a forged pre-v3 computation on a subject the child does not read ----------------------------------------

_SPARE = "poolwise.decision.big.notes"  # (a subject no service folds: the verifier's process reads it)


class _Spaced(MemoryLog):
    """A log with two spare messages (on `_SPARE`) after each entitlement computation, for a
    forger to write over."""

    def _store(self, subject: str, data: bytes, msg_id: str | None, index: int = 0) -> Any:
        landed = super()._store(subject, data, msg_id, index)
        if b'"type":"EntitlementsComputed"' in data:
            for _ in range(2):
                super()._store(_SPARE, b"{}", None)
        return landed


@pytest.fixture(scope="module")
def spaced() -> list[Stored]:
    log = _Spaced()
    anyio.run(lambda: build(log, 200, per_round=50, leaves=3), backend="asyncio")
    return anyio.run(log.read, 1, backend="asyncio")


def _as_two_v2_parts(data: bytes) -> list[bytes]:
    """A (one-part, v3) computation's record as a computation written before v3 in two parts that
    fold to the same map: the cycle's `CycleCompleted.decisions` should then count one more."""
    envelope = json.loads(data)
    event = envelope["event"]
    assert event["replace"] and event.get("parts", 1) == 1 and len(event["pools"]) > 1, event
    out = []
    for part, pools in enumerate([event["pools"][:1], event["pools"][1:]], start=1):
        written = json.loads(data)
        written["event"].update(version=2, pools=pools, part=part, parts=2)
        if part > 1:
            written["event"].update(replace=False, alerts=[])
            written["id"] = derived_id(envelope["source"], envelope["basis"], event["tree"], f"entitlements.{part}")
        out.append(json.dumps(written, separators=(",", ":")).encode())
    return out


def _forged_pre_v3(messages: list[Stored], where: str) -> list[Stored]:
    """The tree's first computation taken off admission's subject and written back, before v3 and
    in two parts, where the child does not read it: in the spare messages after it ("before" its
    cycle's `CycleCompleted`, which still counts the one part re-derived), or at the end ("after")."""
    index = next(i for i, m in enumerate(messages) if b'"type":"EntitlementsComputed"' in m.data)
    record = messages[index]
    assert record.subject.endswith(".admission") and messages[index + 2].subject == _SPARE
    parts = _as_two_v2_parts(record.data)
    out = list(messages)
    out[index] = Stored(record.seq, _SPARE, b"{}", None)
    if where == "before":
        for n, part in enumerate(parts, start=1):
            out[index + n] = Stored(record.seq + n, _SPARE, part, None)
    else:
        out += [Stored(messages[-1].seq + n, _SPARE, part, None) for n, part in enumerate(parts, start=1)]
    return out


def test_the_spaced_log_is_clean(spaced: list[Stored]) -> None:
    assert verify(spaced).ok
    assert through_the_child(spaced, 50)[0].ok


@pytest.mark.parametrize("where", ["before", "after"])
@pytest.mark.parametrize("chunk", [1, 3, 50, 10_000])
def test_a_forged_pre_v3_computation_the_child_does_not_read_has_findings(spaced: list[Stored], where: str,
                                                                         chunk: int) -> None:
    """A computation recorded as before v3, in more parts than re-derived, on a subject the child
    does not read (so it goes on taking records by their bytes): the cycle's `CycleCompleted`
    counts the parts re-derived, not those recorded, a forgery whichever process compares it
    (and the computation is not on its subject, admission's: its first part says so)."""
    tampered = _forged_pre_v3(spaced, where)
    report, _ = through_the_child(tampered, chunk)
    assert not report.ok, (where, chunk)
    whole = verify(tampered)  # (the report shown: the reader verifies a log with findings again so)
    assert [(f.kind, f.type) for f in whole.findings] == [
        ("differs", "EntitlementsComputed"),
        ("differs", "CycleCompleted" if where == "before" else "EntitlementsComputed")], \
        [f.line() for f in whole.findings]
    assert f'subject: "{_SPARE}" recorded != "{_ADMISSION}" re-derived (part 2)' in whole.findings[0].detail
    assert "subject" not in whole.findings[1].detail


def test_a_pre_v3_computation_on_any_subject_stops_the_taking(spaced: list[Stored]) -> None:
    """Once a computation written before v3 is read, on a subject folded or not, every decision
    goes to the verifier (which follows the tree's maps from there on: entitlements.py)."""
    tampered = _forged_pre_v3(spaced, "before")
    at = next(i for i, m in enumerate(tampered) if m.subject == _SPARE and b"EntitlementsComputed" in m.data)
    derivation = Derivation(shared=True)
    derivation.feed_rows(_rows(tampered[:at]))
    assert derivation.claiming and len(derivation.unread)
    derived = derivation.feed_rows(_rows(tampered[at:at + 1]))
    assert not derivation.claiming and not len(derivation.unread) and derived.made


# --- other tampering the child's taking could miss: a record copied or moved where it reads it or not ---


def _cycle_admission(messages: list[Stored], after: int) -> tuple[int, bytes, bytes]:
    """The first admission after `messages[after]`: its message's index, its record, and what
    the message holds without it."""
    index = next(i for i, m in enumerate(messages)
                 if i > after and b'"GangAdmitted"' in m.data and m.subject.endswith(".admission"))
    parts = pack_parts(messages[index].data)
    rest = encode_pack(parts[1:]) if len(parts) > 2 else parts[1]
    return index, parts[0], rest


def _put(messages: list[Stored], at: int, subject: str, data: bytes) -> list[Stored]:
    out = list(messages)
    out[at] = Stored(messages[at].seq, subject, data, None)
    return out


def _tampered(messages: list[Stored], how: str) -> list[Stored]:
    """A cycle's first admission recorded again (copied) or instead (moved) in a spare message:
    after its basis and before its record (the second cycle's spare, where the child holds the
    decision unread), or before its basis (the first cycle's)."""
    spares = [i for i, m in enumerate(messages) if m.subject == _SPARE]
    index, record, rest = _cycle_admission(messages, spares[2])
    subject = messages[index].subject
    if how == "copied_unread_subject":  # (the verifier's process reads it, the child does not)
        return _put(messages, spares[2], _SPARE, record)
    if how == "copied_other_tree":  # (the child takes it: the record in its place is the verifier's)
        return _put(messages, spares[2], "poolwise.decision.other.admission", record)
    if how == "copied_same_subject":
        return _put(messages, spares[2], subject, record)
    if how == "changed_copy":  # (its id, other content)
        return _put(messages, spares[2], subject, record.replace(b'"cpu":1.0', b'"cpu":2.0', 1))
    assert how == "moved_before_basis"
    return _put(_put(messages, index, subject, rest), spares[0], subject, record)


@pytest.mark.parametrize("how", ["copied_unread_subject", "copied_other_tree", "copied_same_subject",
                                 "changed_copy", "moved_before_basis"])
def test_a_record_copied_or_moved_has_findings(spaced: list[Stored], how: str) -> None:
    tampered = _tampered(spaced, how)
    assert tampered != spaced and (how != "changed_copy" or tampered != _tampered(spaced, "copied_same_subject"))
    whole = verify(tampered)
    assert not whole.ok, how
    for chunk in (1, 3, 50, 10_000):
        report, _ = through_the_child(tampered, chunk)
        assert not report.ok, (how, chunk)
    if how == "moved_before_basis":  # (its bytes are the re-derived ones: only where it is gives it away)
        assert [(f.kind, f.detail) for f in whole.findings] == [("unexpected", "recorded at or before its basis")]


# --- a genuine decision moved, unchanged, onto a subject that is not its own ----------------------------------
#
# Each decision has one subject (`events.subjects.for_event` of its type, tree and source: where the
# services append it). Its record moved, bytes and position kept, to another subject is matched by
# id and bytes: only its subject gives it away, in one process and in the child's taking.

_OTHER_TREE = "poolwise.decision.other.admission"  # (folded by the child: a decision subject)
_PREEMPTION = "poolwise.decision.big.preemption"
_ADMISSION = "poolwise.decision.big.admission"


def _moved(messages: list[Stored], how: str) -> tuple[list[Stored], Stored, str]:
    """A genuine record taken off its subject and written, unchanged and where it was, on another:
    the log, the record's message as it was, and the subject it is moved to."""
    finished = [i for i, m in enumerate(messages) if b'"GangFinished"' in m.data]
    index = finished[len(finished) // 2]  # (a GangFinished, alone in its message, admission's)
    to = {"other_tree": _OTHER_TREE, "preemption": _PREEMPTION, "unread_subject": _SPARE}.get(how)
    if how == "pack":  # (a cycle's admissions, many in one message)
        index = [i for i, m in enumerate(messages) if m.data[:1] == b"[" and m.subject == _ADMISSION][1]
        to = _OTHER_TREE
    elif how == "preemption_onto_admission":
        index = [i for i, m in enumerate(messages) if m.subject == _PREEMPTION][1]
        to = _ADMISSION
    assert to is not None, how
    return _put(messages, index, to, messages[index].data), messages[index], to


def _on_the_wrong_subject(record: Stored, to: str) -> list[tuple[str, str, int, str]]:
    """The findings a record moved to `to` should give: one `differs` per event, naming the subject."""
    return [("differs", envelope.id, record.seq, f'subject: "{to}" recorded != "{record.subject}" re-derived')
            for envelope in decode_all(record.data)]


def _subject_findings(report: Report) -> list[tuple[str, str, int, str]]:
    return [(f.kind, f.id, f.seq or 0, f.detail) for f in report.findings if f.detail.startswith("subject:")]


_MOVES = ["other_tree", "preemption", "unread_subject", "pack", "preemption_onto_admission"]


@pytest.mark.parametrize("how", _MOVES)
def test_a_decision_moved_to_another_subject_is_found_in_one_process(spaced: list[Stored], how: str) -> None:
    tampered, record, to = _moved(spaced, how)
    expected = _on_the_wrong_subject(record, to)
    for chunk in (1, 3, 50, 10_000):
        report = streamed(tampered, chunk, shared=True)
        assert _subject_findings(report) == expected, (how, chunk, [f.line() for f in report.findings])
    whole = verify(tampered)
    assert _subject_findings(whole) == expected, [f.line() for f in whole.findings]
    assert (_subject_findings(reference.verify(tampered))) == expected  # (the whole-list oracle too)
    if how != "unread_subject":  # (where it lands, the services fold it as before: nothing else differs)
        assert [(f.kind, f.id, f.seq, f.detail) for f in whole.findings] == expected


@pytest.mark.parametrize("how", _MOVES)
@pytest.mark.parametrize("chunk", [1, 3, 50, 10_000])
def test_a_decision_moved_to_another_subject_is_found_through_the_child(spaced: list[Stored], how: str,
                                                                       chunk: int) -> None:
    tampered, record, to = _moved(spaced, how)
    report, _ = through_the_child(tampered, chunk)
    assert _subject_findings(report) == _on_the_wrong_subject(record, to), [f.line() for f in report.findings]


def test_the_child_does_not_take_a_record_on_another_subject(spaced: list[Stored]) -> None:
    """Its bytes are a decision's it made and has not read, but not on that decision's subject: the
    record is the verifier's to compare (`recording`), and the decision goes there too."""
    tampered, record, _ = _moved(spaced, "other_tree")
    at = tampered.index(next(m for m in tampered if m.seq == record.seq))
    derivation = Derivation(shared=True)
    derivation.feed_rows(_rows(tampered[:at]))
    derived = derivation.feed_rows(_rows(tampered[at:at + 1]))
    assert not derived.matched and derived.recording == {record.seq}
    assert decode(record.data).id in {m.id for m in [*derived.made, *derivation.rest()]}


def test_a_refusal_moved_to_another_trees_rejected_subject_is_found() -> None:
    messages = refusals_log()
    index = next(i for i, m in enumerate(messages) if m.subject == "poolwise.rejected.default")
    record = messages[index]
    tampered = _put(messages, index, "poolwise.rejected.other", record.data)
    expected = _on_the_wrong_subject(record, "poolwise.rejected.other")
    assert _subject_findings(verify(tampered)) == expected
    assert [(f.kind, f.id, f.seq, f.detail) for f in verify(tampered).findings] == expected
    assert _subject_findings(reference.verify(tampered)) == expected
    for chunk in (1, 10_000):
        assert _subject_findings(through_the_child(tampered, chunk)[0]) == expected


def test_every_genuine_record_is_on_its_subject(lifecycle: list[Stored], spaced: list[Stored]) -> None:
    """The services append each decision on `for_event`'s subject: no finding on a genuine log."""
    for messages in (lifecycle, spaced, refusals_log()):
        assert verify(messages).ok and reference.verify(messages).ok
        for chunk in (1, 10_000):
            assert through_the_child(messages, chunk)[0].ok
