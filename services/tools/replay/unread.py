"""`Unread`: the decisions a replay's child re-derived whose record it has not read yet, by the bytes
the service would write, so that it compares a record with its decision where both already are
(`Derivation.feed_rows`, derive.py).

The child reads every message on admission's subjects, where admission and preemption record
their decisions. A record whose bytes are those of a decision it made and has not read yet, on
that decision's subject (`decoding.subject_of`: a record moved unchanged onto another tree's or
service's subject is not taken, and the verifier reports the subject), is that decision, recorded
as re-derived: the child counts it matched, and neither the decision nor
the record goes to the verifier's process (which then neither decodes a `Made` nor compares the
record). A decision whose record does not come within a piece or two (recorded elsewhere, late,
otherwise, or not at all) goes to the verifier as a `Made`, the record as any, and the verifier
compares them as it compares everything else: what differs is reported as before.

Why bytes are enough: a decision's id is in its bytes, derived from its service, its basis (the
position the fold was at) and its key; the child folds each position once, so it makes an id
twice only among one message's decisions, which `keep` checks (a decision made twice is never
kept here: both go to the verifier, which reports the repeat). A record is taken once, so a
second record of a decision taken here is the verifier's to judge: it holds it as recorded and
nothing re-derives it, so it reports it (`unexpected`), and the reader then verifies the log again
without the shared fold (reader.py), whose report names it as before (`duplicate`).
"""

from __future__ import annotations

from events import Envelope


class Unread:
    """Made and not read back: the decisions of the current piece (`current`) and of the piece
    before (`before`); what is still unread a piece later is `stale` (to be compared elsewhere)."""

    __slots__ = ("before", "current")

    def __init__(self) -> None:
        self.current: dict[bytes, Envelope] = {}
        self.before: dict[bytes, Envelope] = {}

    def __len__(self) -> int:
        return len(self.current) + len(self.before)

    def take(self, keys: list[bytes]) -> None:
        """The decisions of these bytes read (a record's, or a pack's parts: in one call)."""
        current, before = self.current, self.before
        for data in keys:
            if current.pop(data, None) is None:
                del before[data]

    def stale(self) -> list[Envelope]:
        """The decisions kept for two pieces and not read (the piece before's), let go."""
        out = list(self.before.values())
        self.before, self.current = self.current, {}
        return out

    def all(self) -> list[Envelope]:
        """Every decision kept, let go (in the order made)."""
        out = [*self.before.values(), *self.current.values()]
        self.before, self.current = {}, {}
        return out
