"""`Derivation`: admission's and preemption's decisions re-derived from the log, a piece at a time,
as their shells decide live: in the verifier's process (`Verifier`, verify.py, on the pieces it
decodes), or in a process of its own (`worker.py`), where it decodes what it folds and says which
messages record decisions, so that the verifier's process decodes only what it compares and what
the tree folds.

Folded exactly as live: `fold_service` of each service's `Folder` (`AdmissionFolder`,
`PreemptionFolder`) over the messages of their subjects, each from its snapshot if it has one
(`--from`), or with admission's state folded once for both (`SharedFolds`, shared.py) where
`shares` says so.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from events import CYCLE_DECISION_TYPES, PACKABLE, DecodeError, Envelope, decode_all, read_pack
from events.codec import pack_parts
from events.subjects import PREFIX
from services.admission.domain.state import SERVICE as ADMISSION
from services.admission.domain.state import AdmissionState
from services.admission.folder import SUBJECTS as ADMISSION_SUBJECTS
from services.admission.folder import AdmissionFolder
from services.common.folding import Folder, rejection_of_fault, rejection_of_malformed
from services.common.log import Stored
from services.common.memlog import subject_filter
from services.common.snapshots import Snapshot
from services.preemption.domain.state import SERVICE as PREEMPTION
from services.preemption.folder import SUBJECTS as PREEMPTION_SUBJECTS
from services.preemption.folder import PreemptionFolder
from services.tools.replay.decoding import (
    DECISION_TYPES,
    Decoded,
    Made,
    fold_service,
    read_one,
    records_decisions,
    step_message,
)
from services.tools.replay.shared import SharedFolds

FOLDED = (ADMISSION, PREEMPTION)  # the services whose folds a `Derivation` runs
admission_wants = subject_filter(tuple(ADMISSION_SUBJECTS))  # (preemption's are the same)


def shares(*, tree: str | None, to_seq: int | None, snapshots: Iterable[Snapshot]) -> bool:
    """Whether a `Verifier(shared=True)` folds admission's state once for both services: from the
    start (no snapshot of either), the whole log, every tree. Otherwise (and when asked for
    `shared=False`) each service folds its own, as live."""
    return tree is None and to_seq is None and not any(s.service in FOLDED for s in snapshots)


@dataclass(frozen=True, slots=True)
class Derived:
    """What `Derivation.feed` made of a piece: the decisions, in the order made; the positions of
    the messages it decoded that record an event of a decision type; the events and the
    malformed messages among those it decoded (every message on admission's subjects)."""

    decisions: list[Envelope]
    recording: frozenset[int]
    events: int
    malformed: int
    made: list[Made] | None = None  # `Made` of each decision (`feed_rows`)


class Derivation:
    def __init__(self, *, tree: str | None = None, to_seq: int | None = None, snapshots: Iterable[Snapshot] = (),
                 shared: bool = False) -> None:
        self.admission: Folder = AdmissionFolder()
        self.preemption: Folder = PreemptionFolder()
        self.starts: dict[str, int] = {}  # service -> the position its fold starts after
        snapshots = list(snapshots)
        for snapshot in snapshots:
            self._start_from(snapshot)
        self.shared: SharedFolds | None = SharedFolds() if shared and shares(tree=tree, to_seq=to_seq,
                                                                            snapshots=snapshots) else None
        self.to_seq = to_seq
        self.position = 0  # the last position fed (`feed`)
        self._preemption_wants = subject_filter(tuple(PREEMPTION_SUBJECTS))
        self._kinds: dict[str, int] = {}  # subject -> what it is to `feed_rows` (a log has few subjects)
        self._known: dict[bytes, Envelope] = {}  # decisions made here by their bytes (`_recall`)
        self._known_before: dict[bytes, Envelope] = {}

    def _start_from(self, snapshot: Snapshot) -> None:
        """A service's fold from its snapshot (`services/common/snapshots.py`: what its folder's
        `export` returned); a snapshot of another service is not this one's."""
        state = snapshot.state
        if snapshot.service == ADMISSION:
            if isinstance(state, tuple):  # the live service's `ExplainingFolder`: explain's notes are not needed
                state = state[0]
            assert isinstance(state, AdmissionState), type(state)
            state.on_forget = None
            self.admission = AdmissionFolder(state)
        elif snapshot.service == PREEMPTION:
            folder = PreemptionFolder()
            folder.load(state)
            self.preemption = folder
        else:
            return
        self.starts[snapshot.service] = snapshot.seq

    def fold(self, piece: Sequence[Stored], decoded: Decoded, after: int) -> list[Envelope]:
        """The decisions the piece's messages after `after` make (`decoded` holds every message
        on admission's subjects)."""
        if self.shared is not None:
            out = fold_service(self.shared, piece, decoded, after, admission_wants)
            return out + self.shared.take()
        out = []
        for folder, wants in ((self.admission, admission_wants), (self.preemption, self._preemption_wants)):
            out += fold_service(folder, piece, decoded, max(after, self.starts.get(folder.service, 0)), wants)
        return out

    def feed(self, piece: Sequence[Stored]) -> Derived:
        """The next messages of the log, in order, decoded here (a position fed twice is skipped;
        past `to_seq` nothing is folded)."""
        if self.shared is not None and self.to_seq is None:
            return self.feed_rows([(s.seq, s.subject, s.data) for s in piece])
        piece = [s for s in piece if s.seq > self.position and (self.to_seq is None or s.seq <= self.to_seq)]
        if not piece:
            return Derived([], frozenset(), 0, 0)
        decoded = Decoded()
        recording: list[int] = []
        events = malformed = 0
        for stored in piece:
            if admission_wants(stored.subject):
                result = decoded.put(stored)
                if isinstance(result, DecodeError):
                    malformed += 1
                    continue
                events += len(result)
                if records_decisions(result):
                    recording.append(stored.seq)
        decisions = self.fold(piece, decoded, self.position)
        self.position = piece[-1].seq
        return Derived(decisions, frozenset(recording), events, malformed)

    def feed_rows(self, rows: Sequence[tuple[int, str, bytes]]) -> Derived:
        """`feed` of messages given as (seq, subject, data), for the shared fold of the whole log
        (`shared`, no `to_seq`): what `feed` and `fold_service` do over the piece, in one pass
        (each message decoded and folded in turn, its subject looked at once), for the work a
        replay's child process does on most of the log. The same decisions, in the same order
        (admission's as its steps make them, then preemption's), the same counts, and each
        decision's `Made` (`Derived.made`).

        A message recording decisions this fold made itself, byte for byte (`_recall`: admission's
        own decisions read back, most of them a cycle's, which its fold passes over, or a
        `GangFinished`), is not decoded: its events are the envelopes made, equal to what decoding
        its bytes gives."""
        shared = self.shared
        if shared is None or self.to_seq is not None:
            return self.feed([Stored(seq, subject, data, None) for seq, subject, data in rows])
        position = self.position
        kinds = self._kinds
        decisions = DECISION_TYPES
        recall, step = self._recall, shared.step
        out: list[Envelope] = []
        made: list[Made] = []
        recording: list[int] = []
        events = malformed = 0
        last = position
        for seq, subject, data in rows:
            if seq <= position:
                continue
            last = seq
            kind = kinds.get(subject)
            if kind is None:
                kind = kinds[subject] = _subject_kind(subject, shared)
            if not kind & _FOLDS:
                continue
            envelopes = recall(data) if kind & _DECIDED else None
            if envelopes is None:
                try:  # (`decode_all`, its calls spared for a message of one event: most of a log)
                    envelopes = [read_one(data)] if data[:1] == b"{" else decode_all(data, read_one, read_pack)
                except DecodeError as error:
                    malformed += 1
                    if kind & _OWNS:
                        out.append(rejection_of_malformed(ADMISSION, Stored(seq, subject, data, None), error,
                                                          shared.now))
                        self._made(out, len(out) - 1, made)
                    continue
            events += len(envelopes)
            for envelope in envelopes:
                if envelope.event.type in decisions:
                    recording.append(seq)
                    break
            before = len(out)
            if len(envelopes) == 1:  # (`step_message` of one event, without its call and loop)
                try:
                    found = step(envelopes[0], seq, 0, True)
                except Exception as error:
                    found = [rejection_of_fault(ADMISSION, envelopes[0], seq, 0, error, shared.now)]
                if found:
                    out += found
            else:
                step_message(shared, envelopes, seq, out)
            if len(out) > before:
                self._made(out, before, made)
        if last == position:
            return Derived([], frozenset(), 0, 0, [])
        self.position = last
        before = len(out)
        out += shared.take()
        self._made(out, before, made)
        return Derived(out, frozenset(recording), events, malformed, made)

    def _made(self, out: list[Envelope], start: int, made: list[Made]) -> None:
        """`Made` of the decisions `out[start:]`, added to `made`; those of `_RECALLED` types kept
        by their bytes for `_recall` (the last `_REMEMBERED` or more)."""
        known = self._known
        for envelope in out[start:]:
            decision = Made.of(envelope)
            made.append(decision)
            if decision.type in _RECALLED:
                known[decision.data] = envelope
        if len(known) >= _REMEMBERED:
            self._known_before, self._known = known, {}

    def _recall(self, data: bytes) -> list[Envelope] | None:
        """The events of a message whose every event this fold made, with these very bytes (a
        pack: as `encode_pack` joins them, of packable types): the envelopes made, as decoding
        would give them (the same values; only the fold reads them, and it reads a cycle's
        decisions for their type and source alone). None: to be decoded."""
        known, before = self._known, self._known_before
        if data[:1] != b"[":
            found = known.get(data)
            if found is None:
                found = before.get(data)
            return None if found is None else [found]
        out: list[Envelope] = []
        for part in pack_parts(data):
            found = known.get(part)
            if found is None:
                found = before.get(part)
            if found is None or found.event.type not in PACKABLE:
                return None
            out.append(found)
        return out


# What a subject is to `Derivation.feed_rows`: folded (one of admission's), owned (a malformed
# message there is refused), decided (admission's or preemption's decisions: maybe made here,
# `_recall`)
_FOLDS, _OWNS, _DECIDED = 1, 2, 4
_DECISION_SUBJECT = f"{PREFIX}.decision."

# The decisions `_recall` finds by their bytes: an admission cycle's (its fold passes over them),
# `GangFinished` (one per gang) and preemption's `CycleCompleted` (of strings and integers, which
# decoding gives back equal), all made by validating, or by `services/admission/domain/trusted.py`
# from valid values (decoding their bytes would not refuse them); kept for `_REMEMBERED` decisions
# or more (a decision lands soon after its basis)
_RECALLED = CYCLE_DECISION_TYPES | {"GangFinished"}
_REMEMBERED = 4096


def _subject_kind(subject: str, shared: SharedFolds) -> int:
    if not admission_wants(subject):
        return 0
    return _FOLDS | (_OWNS if shared.owns(subject) else 0) | (_DECIDED if subject.startswith(_DECISION_SUBJECT) else 0)
