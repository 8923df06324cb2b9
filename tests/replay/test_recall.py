"""The child's fold (`Derivation.feed_rows`) takes a message recording decisions it made itself,
byte for byte, as the envelopes it made instead of decoding it (`_recall`): the same decisions,
bytes, flags and counts as decoding every message, on a whole-lifecycle log; a record that
differs by a byte, or a pack holding a type that may not be packed, is decoded."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from events import encode_pack
from services.common.memlog import MemoryLog
from services.tools.replay.decoding import Made
from services.tools.replay.derive import Derivation, Derived
from tests.replay.biglog import build


def _rows() -> list[tuple[int, str, bytes]]:
    log = MemoryLog()
    anyio.run(lambda: build(log, 600, per_round=50, leaves=3), backend="asyncio")
    return [(s.seq, s.subject, s.data) for s in anyio.run(log.read, 1, backend="asyncio")]


def _fold(rows: list[tuple[int, str, bytes]], recall: bool) -> tuple[list[Derived], int]:
    derivation = Derivation(shared=True)
    recalled = 0
    found = derivation._recall

    def counting(data: bytes) -> Any:
        nonlocal recalled
        envelopes = found(data) if recall else None
        recalled += envelopes is not None
        return envelopes

    derivation._recall = counting  # type: ignore[method-assign]
    return [derivation.feed_rows(rows[at:at + 500]) for at in range(0, len(rows), 500)], recalled


def test_recalled_records_fold_as_decoded_ones() -> None:
    rows = _rows()
    recalling, recalled = _fold(rows, True)
    decoding, none = _fold(rows, False)
    assert recalled > 600 and none == 0  # (a GangFinished per gang, and the cycles' records)
    assert [(d.made, d.recording, d.events, d.malformed) for d in recalling] == \
        [(d.made, d.recording, d.events, d.malformed) for d in decoding]
    for derived in recalling:
        assert derived.made == [Made.of(e) for e in derived.decisions]


def test_only_the_very_bytes_are_recalled() -> None:
    rows = _rows()
    derivation = Derivation(shared=True)
    derivation.feed_rows(rows)
    known = derivation._known_before | derivation._known
    data, finished = next((d, e) for d, e in known.items() if e.event.type == "GangFinished")
    assert b'"done"' in data
    assert derivation._recall(data) == [finished]
    assert derivation._recall(data.replace(b'"done"', b'"rejected"')) is None
    assert derivation._recall(data + b" ") is None
    assert derivation._recall(encode_pack([data, data])) is None  # GangFinished may not be packed


@pytest.mark.parametrize("pack", [b"[]", b"[x]", b"["])
def test_odd_packs_are_decoded(pack: bytes) -> None:
    assert Derivation(shared=True)._recall(pack) is None
