"""`services.common.decodes.SharedDecodes`: one decode per message per process, and a service's
own decisions read back without decoding them, which is only right if what it hands back is
what decoding the bytes would give."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from events import Envelope, GangEnqueued, TaskSpec, as_model, at_seconds, decode, encode
from services.common import decodes
from services.common.decodes import SharedDecodes
from services.tools.scenario.format import load_scenario
from services.tools.scenario.runner import run_file

SCENARIOS = Path(__file__).resolve().parents[2].parent / "shared" / "scenarios"
FILES = sorted(SCENARIOS.glob("*.yaml")) if SCENARIOS.is_dir() else []


def _gang(n: int) -> Envelope:
    event = GangEnqueued(tree="t", gang=f"g{n}", pool="/a", job=f"j{n}", user="u", size=1,
                         tasks=[TaskSpec(id=f"g{n}.0", resources={"cpu": 1.5})])
    return Envelope(id=f"e{n}", time=at_seconds(1_767_225_600 + n), source="sdk", event=event)


def test_without_folders_nothing_is_kept() -> None:
    shared = SharedDecodes()
    data = shared.encode(_gang(1))
    assert data == encode(_gang(1))
    first, second = shared.decode(data), shared.decode(data)
    assert as_model(first) == as_model(second) == _gang(1)  # read as views (events.views)
    assert first is not second  # decoded twice: nobody to share with


def test_own_encode_is_taken_back_once_per_folder_then_forgotten() -> None:
    shared = SharedDecodes()
    envelope = _gang(2)
    with shared.user(), shared.user():
        data = shared.encode(envelope)
        assert shared.decode(data) is envelope
        assert shared.decode(data) is envelope
        again = shared.decode(data)  # both folders took it: decoded anew
        assert as_model(again) == envelope and again is not envelope


def test_a_decode_is_shared_by_the_other_folders_only() -> None:
    shared = SharedDecodes()
    data = encode(_gang(3))
    with shared.user(), shared.user(), shared.user():
        first = shared.decode(data)
        assert shared.decode(data) is first
        assert shared.decode(data) is first
        assert shared.decode(data) is not first


def test_the_oldest_entries_are_pushed_out_at_the_limit() -> None:
    shared = SharedDecodes(limit=2)
    with shared.user():
        datas = [shared.encode(_gang(n)) for n in range(3)]
        assert shared.decode(datas[0]) is not None  # pushed out: decoded again, still right
        assert as_model(shared.decode(datas[0])) == _gang(0)
        assert shared._found.keys() == {datas[1], datas[2]}
    assert not shared._found  # the last folder stopped: everything dropped


@pytest.mark.skipif(not FILES, reason="../shared/scenarios is not beside this checkout")
@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_every_decision_handed_back_equals_the_decode_of_its_bytes(path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The services fold the envelope they encoded instead of decoding the bytes they read back; a
    replay decodes the bytes. Both must be the same value, or live and replayed folds differ."""
    kept: list[tuple[bytes, Envelope]] = []
    original = decodes.SharedDecodes.encode

    def spy(self: SharedDecodes, envelope: Envelope) -> bytes:
        data = original(self, envelope)
        if self.users:
            kept.append((data, envelope))
        return data

    monkeypatch.setattr(decodes.SharedDecodes, "encode", spy)
    report = anyio.run(run_file, load_scenario(path), "memory", None, 0)
    assert report.passed
    assert kept, "the services encoded no decision"
    for data, envelope in kept:
        decoded = decode(data)
        assert decoded == envelope, data.decode()
        assert encode(decoded) == data
