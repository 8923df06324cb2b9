"""`--from` loads only admission's fold from its snapshot: the live service's snapshot is (its fold,
explain's notes), stored part by part, and a replay never explains. Here the notes part cannot be
unpickled at all: loaded, the snapshot would be corrupt and passed over (the fold from position 1).
"""

from __future__ import annotations

from typing import Any

import anyio

from services.common.folding import anchor_of
from services.common.log import Stored
from services.common.memlog import MemoryLog
from services.common.snapshots import MemorySnapshots, Snapshot, code_fingerprint
from services.tools.replay.reader import snapshots_at, verify_log
from services.tools.replay.verify import Verifier, command_refusals
from tests.replay.biglog import build


class Unloadable:
    """Explain's notes as a replay must never load them: unpickling raises."""

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        return (_refuse, ())


def _refuse() -> None:
    raise RuntimeError("explain's notes were loaded")


def _admission_state(messages: list[Stored], cut: int) -> Any:
    verifier = Verifier(command_refusals(messages))
    verifier.feed([m for m in messages if m.seq <= cut])
    assert verifier.derivation is not None
    return verifier.derivation.admission.state  # type: ignore[attr-defined]  # (an `AdmissionFolder`)


def test_from_loads_admission_s_fold_without_explain_s_notes() -> None:
    async def run() -> tuple[list[Snapshot], list[str], int, bool, dict[str, int]]:
        log = MemoryLog()
        await build(log, 24, per_round=8, leaves=2)
        messages = await log.read(1)
        cut = messages[len(messages) // 2].seq
        store = MemorySnapshots()
        state = (_admission_state(messages, cut), Unloadable())  # as `ExplainingFolder.export` makes it
        data = Snapshot("admission", cut, code_fingerprint(), state, [], await anchor_of(log, cut)).encode()
        await store.save("admission", cut, data)
        found, passed_over = await snapshots_at(log, store, cut)
        report = await verify_log(log, from_seq=cut, snapshots=store, process_from=10**9)
        return found, passed_over, cut, report.ok, report.starts

    found, passed_over, cut, ok, starts = anyio.run(run)
    assert [(s.service, s.seq) for s in found] == [("admission", cut)], passed_over
    assert type(found[0].state).__name__ == "AdmissionState"
    assert ok and starts["admission"] == cut
