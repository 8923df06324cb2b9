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
from dataclasses import dataclass, field

from events import CYCLE_DECISION_TYPES, PACKABLE, DecodeError, Envelope, decode_all, encode, read_envelope, read_pack
from events.codec import pack_parts
from events.fastencode import encode_envelope
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
    subject_of,
)
from services.tools.replay.entitlements import CURRENT, version_of
from services.tools.replay.shared import SharedFolds
from services.tools.replay.unread import Unread

FOLDED = (ADMISSION, PREEMPTION)  # the services whose folds a `Derivation` runs
admission_wants = subject_filter(tuple(ADMISSION_SUBJECTS))  # (preemption's are the same)


def shares(*, tree: str | None, to_seq: int | None, snapshots: Iterable[Snapshot]) -> bool:
    """Whether a `Verifier(shared=True)` folds admission's state once for both services: from the
    start (no snapshot of either), the whole log, every tree. Otherwise (and when asked for
    `shared=False`) each service folds its own, as live."""
    return tree is None and to_seq is None and not any(s.service in FOLDED for s in snapshots)


@dataclass(frozen=True, slots=True)
class Derived:
    """What `Derivation.feed` (or `feed_rows`) made of a piece: `made`, the decisions for the
    verifier to compare, in the order made (with `feed_rows`, those whose record it did not take:
    `unread.py`); `recording`, the positions of the messages it decoded that record an event of a
    decision type and that it did not take as its decisions' records; the events and the malformed
    messages among those it read (every message on admission's subjects); `matched`, the records
    it took as its decisions', by type (each one recorded, re-derived and matched)."""

    made: list[Made]
    recording: frozenset[int]
    events: int
    malformed: int
    matched: dict[str, int] = field(default_factory=dict)


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
        self.unread = Unread()  # `feed_rows`: its decisions whose record it has not read yet
        # `feed_rows` takes a record as its decision's when the bytes are the same (`unread.py`),
        # until it reads an entitlement computation written before v3, on any subject (one it
        # does not fold is still the verifier's to compare): those are compared by the maps they
        # fold to, which the verifier follows from there on (verify.py, entitlements.py), and
        # their cycle's `CycleCompleted` by the parts recorded (the verifier reports a cycle
        # whose `CycleCompleted` was compared, here or there, before its parts were all read)
        self.claiming = True

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
        return Derived(list(map(Made.of, decisions)), frozenset(recording), events, malformed)

    def feed_rows(self, rows: Sequence[tuple[int, str, bytes]]) -> Derived:
        """`feed` of messages given as (seq, subject, data), for the shared fold of the whole log
        (`shared`, no `to_seq`): what `feed` and `fold_service` do over the piece, in one pass
        (each message decoded and folded in turn, its subject looked at once), for the work a
        replay's child process does on most of the log: the same decisions, counts and flags,
        except what it compares itself.

        A decision's record is compared here (`unread.py`): a message whose every event is a
        decision this fold made and has not read yet, byte for byte and on its subject (the one
        it is recorded on, `subject_of`; on another, the verifier compares it), records them as re-derived
        (`matched`; neither goes to the verifier). Of the types in `_RECALLED` such a message is
        not even decoded: its events are the envelopes made, equal to what decoding its bytes
        gives. The decisions still unread a piece after the one they were made in go to the
        verifier (`made`), and the rest at the end (`rest`)."""
        shared = self.shared
        if shared is None or self.to_seq is not None:
            return self.feed([Stored(seq, subject, data, None) for seq, subject, data in rows])
        position = self.position
        kinds = self._kinds
        decisions = DECISION_TYPES
        unread = self.unread
        current, before = unread.current, unread.before
        step = shared.step
        out: list[Envelope] = []  # one message's decisions
        made: list[Made] = []
        matched: dict[str, int] = {}
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
                if self.claiming and _OLD_COMPUTATION in data and version_of(data) < CURRENT:
                    self._stop_claiming(made)  # (the verifier's process compares it: see `claiming`)
                continue
            envelopes: list[Envelope] | None = None
            taken: list[Envelope] | None = None  # the decisions made here that it records, every one
            keys: list[bytes]  # (with `taken`: their bytes, and their types, `names`)
            names: list[str]
            if kind & _DECIDED and self.claiming:
                if data[:1] != b"[":
                    found = current.get(data)
                    if found is None:
                        found = before.get(data)
                    if found is not None and _on_its_subject(found, subject):  # (`_all_found`)
                        keys, taken, names = [data], [found], [found.event.type]
                        if names[0] in _RECALLED:
                            envelopes = taken
                else:
                    keys = pack_parts(data)
                    found_all = _all_found(unread, keys, subject)
                    if found_all is not None:
                        taken, names, cycle = found_all
                        if cycle:
                            envelopes = taken  # (admission's cycle decisions: `step` passes over each)
            if envelopes is None:
                try:  # (`decode_all`, its calls spared for a message of one event: most of a log)
                    if data[:1] != b"{":
                        envelopes = decode_all(data, read_one, read_pack)
                    elif kind & _REPORTS:  # (`read_one`, without its look for a type that has no view: see `_REPORTS`)
                        envelopes = [read_envelope(data)]
                    else:
                        envelopes = [read_one(data)]
                except DecodeError as error:
                    malformed += 1
                    if kind & _OWNS:
                        out.append(rejection_of_malformed(ADMISSION, Stored(seq, subject, data, None), error,
                                                          shared.now))
                        self._keep(out, made)
                    continue
            events += len(envelopes)
            if taken is not None:  # (decoded, when it had to be: its bytes read as they do elsewhere)
                unread.take(keys)
                if len(names) == 1:
                    matched[names[0]] = matched.get(names[0], 0) + 1
                else:  # (a cycle's pack: one type or two, counted at once)
                    for name in set(names):
                        matched[name] = matched.get(name, 0) + names.count(name)
            else:
                for envelope in envelopes:
                    if envelope.event.type in decisions:
                        recording.append(seq)
                        if self.claiming and _OLD_COMPUTATION in data and version_of(data) < CURRENT:
                            self._stop_claiming(made)
                        break
            if len(envelopes) == 1:  # (`step_message` of one event, without its call and loop)
                envelope = envelopes[0]
                if envelope.source != ADMISSION or envelope.event.type not in CYCLE_DECISION_TYPES:  # (`step`: [])
                    try:
                        found_ = step(envelope, seq, 0, True)
                    except Exception as error:
                        found_ = [rejection_of_fault(ADMISSION, envelope, seq, 0, error, shared.now)]
                    if found_:
                        out += found_
            elif envelopes is not taken:  # (a pack taken as its decisions: admission's cycle's, `step` gives [])
                step_message(shared, envelopes, seq, out)
            if shared.preempted:
                out += shared.take()
            if out:
                self._keep(out, made)
        if last == position:
            return Derived([], frozenset(), 0, 0)
        self.position = last
        made += map(Made.of, unread.stale())
        return Derived(made, frozenset(recording), events, malformed, matched)

    def _stop_claiming(self, made: list[Made]) -> None:
        """From here on, nothing taken here: every decision unread goes to the verifier (`made`)."""
        self.claiming = False
        made += map(Made.of, self.unread.all())

    def _keep(self, out: list[Envelope], made: list[Made]) -> None:
        """One message's decisions (`out`, emptied) kept unread by their bytes (`unread.py`); to
        the verifier at once (`made`) those it cannot take a record of here: a refusal (recorded
        on `poolwise.rejected.*`, which this fold does not read), and every decision of a message
        that made an id twice (the verifier reports the repeat)."""
        if not self.claiming or (len(out) > 1 and len({e.id for e in out}) < len(out)):
            made += map(Made.of, out)
        else:
            current = self.unread.current
            for envelope in out:
                if envelope.event.type == "InputRejected":
                    made.append(Made.of(envelope))
                else:  # (`encode`, its call spared where the fast path writes it: every decision, nearly)
                    data = encode_envelope(envelope)
                    current[data if data is not None else encode(envelope)] = envelope
        out.clear()

    def rest(self) -> list[Made]:
        """The decisions still unread at the end (`feed_rows`): the verifier compares them."""
        return list(map(Made.of, self.unread.all()))


def _on_its_subject(decision: Envelope, subject: str) -> bool:
    """Whether `subject` is the one `decision` is recorded on (`subject_of`)."""
    event = decision.event
    return subject_of(event.type, getattr(event, "tree", None), decision.source) == subject


def _all_found(unread: Unread, parts: list[bytes], subject: str) -> tuple[list[Envelope], list[str], bool] | None:
    """The decisions made here whose bytes the parts of a pack on `subject` are, every one (each
    once), their types, and whether they are all admission's of the types `feed_rows` recalls in
    a pack (a cycle's); or None. Each on its own subject (`subject_of`): a record moved unchanged
    onto another is the verifier's to compare (it reports the subject), as any record not taken
    here. (A pack's decisions are mostly of one type, tree and source: its subject is asked once
    per change of them, not per part.)"""
    out: list[Envelope] = []
    names: list[str] = []
    current, before = unread.current, unread.before
    checked = None  # the (type, tree, source) last found to be recorded on `subject`
    cycle = True
    for part in parts:
        found = current.get(part)
        if found is None:
            found = before.get(part)
            if found is None:
                return None
        event = found.event
        name = event.type
        key = (name, getattr(event, "tree", None), found.source)
        if key != checked:
            if subject_of(*key) != subject:
                return None
            checked = key
            cycle = cycle and name in _PACK_RECALLED and key[2] == ADMISSION
        out.append(found)
        names.append(name)
    return (out, names, cycle) if len(set(parts)) == len(parts) else None


# What a subject is to `Derivation.feed_rows`: folded (one of admission's), owned (a malformed
# message there is refused), decided (admission's or preemption's decisions: maybe made here),
# reports (task reports, half of a log's events, all of a type with a view: a message is read by
# `read_envelope` at once, which gives what `read_one` gives, as `read_one` only spares it a
# failed attempt at a view for a type that has none; ~0.6 us a message)
_FOLDS, _OWNS, _DECIDED, _REPORTS = 1, 2, 4, 8
_DECISION_SUBJECT = f"{PREFIX}.decision."
_TASK_SUBJECT = f"{PREFIX}.task."

# The decisions whose record `feed_rows` folds as the envelope it made rather than decoded: an
# admission cycle's (its fold passes over them), `GangFinished` (one per gang) and preemption's
# `CycleCompleted` (of strings and integers, which decoding gives back equal), all made by
# validating, or by `services/admission/domain/trusted.py` from valid values (decoding their bytes
# would not refuse them); in a pack, only those that may be packed (else the pack is malformed)
_RECALLED = CYCLE_DECISION_TYPES | {"GangFinished"}
_PACK_RECALLED = _RECALLED & PACKABLE
assert _PACK_RECALLED <= CYCLE_DECISION_TYPES  # (`feed_rows` steps none of a pack of them that is admission's)
_OLD_COMPUTATION = b'"type":"EntitlementsComputed","version":'  # (`version_of` then says which)


def _subject_kind(subject: str, shared: SharedFolds) -> int:
    if not admission_wants(subject):
        return 0
    return (_FOLDS | (_OWNS if shared.owns(subject) else 0) | (_DECIDED if subject.startswith(_DECISION_SUBJECT) else 0)
            | (_REPORTS if subject.startswith(_TASK_SUBJECT) else 0))
