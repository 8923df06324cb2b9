"""The child's fold (`Derivation.feed_rows`) compares a record with its decision where both are
(services/tools/replay/unread.py): a message whose every event has the very bytes of a decision it
made and has not read is matched there and only counted back to the verifier; its other decisions
go to the verifier as before. Through the child's protocol (`worker.answer`, `worker.elsewhere`),
a clean log gives the report of the one-process verifier, and a tampered one a report with
findings (the reader then verifies it again without the shared fold: that report is the one
shown); a record that differs by a byte is not taken, nor is a pack of a type that may not be
packed, nor a decision made twice."""

from __future__ import annotations

import anyio
import pytest

from events import decode, encode_pack
from services.common.log import Stored
from services.common.memlog import MemoryLog
from services.tools.replay import worker
from services.tools.replay.decoding import Made
from services.tools.replay.derive import Derivation, Derived
from services.tools.replay.verify import Report, Verifier, command_refusals, verify
from tests.replay import test_pre_v3 as pre_v3
from tests.replay.biglog import build
from tests.replay.test_streaming import cases, logs, summary  # noqa: F401  (`logs`: a fixture)

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
