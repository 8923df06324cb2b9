"""`Derivation`: admission's and preemption's decisions re-derived from the log, a piece at a time,
apart from the comparison: the fold of a replay in a process of its own (`worker.py`).

A replay of the whole log from the start folds admission's state once for both services
(`SharedFolds`, shared.py): about two thirds of the verifier's CPU on a long log, the rest
decoding, the tree's fold and the matching. In one process that is one core's work; split, the
fold runs in one process and `Verifier(derived_elsewhere=True)` (decoding every message, the
tree's fold, the refusals, the matching) in another, which takes each piece's decisions as they
come (`Verifier.add_made`: in any order with the records). The same decisions as
`Verifier(shared=True)` makes itself: the same fold over the same messages, decoded the same way
(`decoding.py`); only the messages admission's fold reads are decoded here.
"""

from __future__ import annotations

from collections.abc import Sequence

from services.admission.folder import SUBJECTS as ADMISSION_SUBJECTS
from services.common.folding import gc_paused
from services.common.log import Stored
from services.common.memlog import subject_filter
from services.replay.decoding import Decoded, fold_service
from services.replay.shared import SharedFolds
from services.replay.verify import Made

MadeRow = tuple[str, str, str, int | None, str | None, bytes]  # a `Made` as sent (plain values pickle fastest)


def made_row(made: Made) -> MadeRow:
    return made.id, made.type, made.source, made.basis, made.tree, made.data


class Derivation:
    """Fed the log in order (`feed`, each position once; a position fed again is skipped), returns
    the decisions each piece makes, in the order made."""

    def __init__(self) -> None:
        self.folds = SharedFolds()
        self.position = 0
        self._wants = subject_filter(tuple(ADMISSION_SUBJECTS))

    def feed(self, piece: Sequence[Stored]) -> list[MadeRow]:
        if piece and piece[0].seq <= self.position:
            piece = [s for s in piece if s.seq > self.position]
        if not piece:
            return []
        with gc_paused():
            decoded = Decoded()
            wants = self._wants
            for stored in piece:
                if wants(stored.subject):
                    decoded.put(stored)
            made = fold_service(self.folds, piece, decoded, self.position, wants)
            made += self.folds.take()
            self.position = piece[-1].seq
            return [made_row(Made.of(decision)) for decision in made]
