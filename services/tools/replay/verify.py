"""`Verifier`: re-derive every decision of a log with the services' own pure code, a piece of the
log at a time, and compare it with what the log records (ARCHITECTURE invariant 3, `poolwise replay
--verify`). `verify(messages)` does it on a whole log held in a list.

Re-derived, for each deciding service, exactly as its shell decides live:

- admission and preemption: `fold_batch` of their `Folder` (`AdmissionFolder`, `PreemptionFolder`)
  over the messages of their subjects, from the start: every decision a `step` returns (and
  every rejection of a malformed message on a subject the service owns), with its derived id,
  its `basis` and its time. Folding the log as recorded puts every service in the state it
  decided from: a cycle's decisions take effect at its trigger (admission applies them as it
  makes them, preemption reads through `CycleOrder`), every other decision where it lands.
  Messages are decoded as the live services decode them (`events.read_envelope` / `read_pack`
  views; task reports as views too), once for all three folds and the comparison. With
  `shared=True` (what `verify` and the reader ask for first), a fold of the whole log from the
  start steps admission's state once for both (preemption keeps a copy of it live: `shared.py`
  says why that is the same on a log whose admission decisions match); a report with findings
  is then made again with each service's own fold (`verify`, `reader.verify_log`).
- tree: the rejections of malformed config and host messages (`TreeView.fold`), and every
  recorded refusal of a command: the command (in the record's `input`) is judged again
  (`parse_command`, `judge`) on the tree as folded through the record's `basis`. Commands are not
  on the log, so a refusal the log lacks cannot be found; accepted commands are inputs (config
  events), not decisions. A refusal lands after its basis, so the refusals to judge are given to
  the `Verifier` before the log (`command_refusals`: the shell reads them first, from the
  `poolwise.rejected.*` subjects only, which the server filters; a refusal recorded on another
  subject is not judged and is reported `unexpected`). They are held until judged: one record per
  refused operator command.

Compared: every event of a decision type (`DECISION_TYPES`, whoever published it) against the
re-derived decisions, by id, then by content: the envelope and the event as encoded on the wire
(the recorded bytes first: equal bytes are equal content; otherwise as decoded and encoded again),
and where it is recorded: a decision has one subject, the one its service appends it on
(`decoding.subject_of`: `events.subjects.for_event` of its type, tree and source), so a record on
another (moved there unchanged: another tree's, another service's, one no service reads) differs,
its detail naming the subject first (`describe.on_subject`). Ignored, and only this:

- the envelope's `trace` (telemetry context; absent unless tracing is on);
- for a refused request of `INPUT_LIMIT` characters or more (recorded truncated), its `rule`,
  `reason`, `field` and `ref`: the truncated text cannot be parsed again as it came (the id,
  basis, time and subject are still checked).

Matching a piece at a time: a decision lands after its basis, so a re-derived decision is usually
made before its record is read. Held, and only this: the re-derived decisions whose record has
not been read yet, the records read whose decision has not been re-derived yet (both by id:
decisions "in flight"), and each matched id in a `UsedIds` (to tell a second record of an id, or
a second derivation, from a first: a 64-bit digest, so a collision, about n²/2⁶⁵, can only make a
second record of a forged id read `duplicate` instead of `unexpected`; its runs in files during a
replay, `reader.runs_on_disk`). So what `feed` holds is the services' folded state, the decisions
in flight and the findings, never the log. With `derived_elsewhere` on the shared fold, the child
matches the records of its own decisions where it reads them (`unread.py`): those are only
counted here (`Elsewhere.matched`), their ids not kept; a second record of one is then held as
recorded and never re-derived here, so it is reported (`unexpected`), and the reader verifies the
log again without the shared fold, whose report says `duplicate` as before.

Scope (both optional; the fold is always of everything up to where it stops):

- `tree=T`: only decisions whose event names tree `T` (recorded or re-derived) are compared,
  counted and reported; decisions of no tree (a refusal whose tree could not be read) are not.
- `to_seq=S`: the services fold the log through position `S` and no further. Checked: every
  decision recorded at or before `S` (it must be re-derived from the log through `S`: it landed
  after its basis), and every decision re-derived from the log through `S` (it must be recorded:
  those not recorded by `S` are looked for by id in the messages after `S`, which are not
  folded; `done` tells the shell when all are found, and a missing one makes it read to the end).
  Not checked: decisions recorded after `S` that are not re-derived from the log through `S`
  (e.g. a preemption pass whose admission cycle, triggered at or before `S`, closes after it).
- `snapshots` (`--from F`: the newest usable snapshot of each of admission, preemption and the
  tree at or before `F`, found by the shell): each service's fold starts from its own snapshot
  (its state folded through the snapshot's position `s`; a service with none starts from
  position 1), and the log is fed from the earliest start on. Checked: every decision a fold
  re-derives (all made after its start: based after `s`, or for preemption on an admission cycle
  its `CycleOrder` held at `s`), the snapshot's `pending` decisions (made before `s`, not in the
  log then: they count as re-derived, so they must be recorded after), and every decision
  recorded after the earliest start whose basis is after its service's `s` (the tree's refusals
  of commands: at or after `s`, judged on the tree as of their basis). Not checked (counted in
  `Report.unchecked`, never reported): decisions recorded after the earliest start, based at or
  before their service's `s`, that the fold does not re-derive (decided before the snapshot;
  a decision is re-derived before any record of it is read, so this is known when it is read).
  Not read at all: what is recorded at or before the earliest start (so a second record of an
  id there is not seen).

Findings: `differs` (same id, other content), `unexpected` (recorded, not re-derived: a forged
or misplaced decision), `missing` (re-derived, not in the log: lost or removed), `duplicate`
(the same id recorded twice, or re-derived twice). Each names what the decision was about (the
key fields of its event: `about`), and a `differs` the fields that differ. Pure: no I/O, no clock;
`reader.py` reads a log and feeds this.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from events import DecodeError, EntitlementsComputed, Envelope, decode, decode_all, derived_id, read_envelope, read_pack
from events.codec import pack_parts
from services.admission.domain.state import SERVICE as ADMISSION
from services.common.folding import gc_paused
from services.common.log import Stored
from services.common.memlog import subject_filter
from services.common.snapshots import Snapshot
from services.preemption.domain.state import SERVICE as PREEMPTION
from services.tools.replay.decoding import DECISION_TYPES, Decoded, Made, subject_of
from services.tools.replay.derive import Derivation, admission_wants, shares
from services.tools.replay.describe import (
    BEFORE_BASIS,
    NOT_DECIDED,
    NOT_RECORDED,
    RECORDED_TWICE,
    about,
    derived_times,
    differences,
    on_subject,
    wire,
)
from services.tools.replay.entitlements import CURRENT, TreeMaps, version_of
from services.tools.replay.entitlements import differences as map_differences
from services.tools.replay.refusals import (
    REFUSAL_SUBJECTS,
    TREE,
    Refusal,
    command_refusals,
    is_command_refusal,
    judge_again,
)
from services.tools.replay.report import Finding, Kind, Report, TypeCount
from services.tree.domain.used_ids import UsedIds

__all__ = ["DECISION_TYPES", "REFUSAL_SUBJECTS", "TREE", "Elsewhere", "Finding", "Kind", "Made", "Refusal", "Report",
           "TypeCount", "Verifier", "about", "command_refusals", "differences", "verify", "wire"]


# --- matching -----------------------------------------------------------------------------------------


def _heads_differ(parts: list[_Record], made: Made) -> list[str]:
    """What a pre-v3 computation's recorded parts carry beside their event (time, causation,
    source, basis, ...) that the re-derived computation does not: the parts are compared by the
    map they fold to, so without this a forged envelope field of an old part went unreported."""
    def head(data: dict[str, Any]) -> dict[str, Any]:
        return {name: value for name, value in data.items() if name not in ("event", "id")}

    theirs = head(made.wire())
    found: list[str] = []
    expected = subject_of(made.type, made.tree, made.source)
    for record in parts:
        if record.subject != expected:
            found.append(f"{on_subject(record.subject, expected)} (part "
                         f"{cast(EntitlementsComputed, record.envelope.event).part})")
        mine = head(wire(record.envelope))
        found += [f"{name} (part {cast(EntitlementsComputed, record.envelope.event).part}): "
                  f"{mine.get(name)!r} recorded, {theirs.get(name)!r} re-derived"
                  for name in sorted(set(mine) | set(theirs)) if mine.get(name) != theirs.get(name)]
    return found


@dataclass(slots=True)
class _Record:
    """A decision as the log records it: where (its position, part and subject), and its bytes (a
    pack's part)."""

    seq: int
    part: int
    envelope: Envelope
    raw: bytes
    subject: str


_ADMISSION, _TREE = 1, 2  # a subject admission folds (the derivation decodes it), one the tree folds


@dataclass(frozen=True, slots=True)
class Elsewhere:
    """A piece's part a `Derivation` did in another process (`derive.Derived`, its decisions as
    `Made`): the verifier of `Verifier(derived_elsewhere=True)` takes them instead of folding."""

    made: list[Made]
    recording: frozenset[int]
    events: int
    malformed: int
    matched: dict[str, int] = field(default_factory=dict)  # records the derivation took as its decisions', by type


class Verifier:
    """Re-derive and compare, fed the log a piece at a time, in order (`feed`), then `finish`.

    `refusals`: the recorded refusals of commands (`command_refusals` of the log through `to_seq`),
    judged again as the fold reaches their basis. `tree`, `to_seq`: the scope (module docstring).
    `snapshots` (`--from`): a service's fold starts from its snapshot (at most one each of
    admission, preemption and tree), and the log is to be fed from `position + 1` (the earliest
    start); `from_seq` is only reported.

    `derived_elsewhere`: admission's and preemption's decisions are re-derived by a `Derivation`
    in another process (worker.py) and handed to `feed` with each piece (`Elsewhere`); this one
    decodes only what that one does not (the messages the tree folds, those recording decisions,
    those on no subject of admission's), folds the tree, judges the refusals and compares."""

    def __init__(self, refusals: Iterable[Refusal] = (), *, tree: str | None = None,
                 to_seq: int | None = None, snapshots: Iterable[Snapshot] = (),
                 from_seq: int | None = None, shared: bool = False, derived_elsewhere: bool = False) -> None:
        self.report = Report(tree=tree, to_seq=to_seq, from_seq=from_seq)
        self.tree = tree
        self.to_seq = to_seq
        from services.tree.service import SUBJECTS, TreeView

        self.view = TreeView()
        self.tree_wants = subject_filter(SUBJECTS)  # what the tree folds: decoded here whatever else is
        self.starts: dict[str, int] = {}  # service -> the position its fold starts after
        pending: list[Envelope] = []
        snapshots = list(snapshots)
        for snapshot in snapshots:
            self._start_from(snapshot)
            pending += snapshot.pending
        # `shared`: admission's state folded once for both services (`shared.py`), when the
        # whole log is folded from the start and every decision reported (else each its own)
        self.derivation = None if derived_elsewhere else Derivation(tree=tree, to_seq=to_seq, snapshots=snapshots,
                                                                     shared=shared)
        if from_seq is not None:
            self.report.starts = {name: self.starts.get(name, 0) for name in (ADMISSION, PREEMPTION, TREE)}
        self.report.shared = shared and shares(tree=tree, to_seq=to_seq, snapshots=snapshots)
        tree_start = self.starts.get(TREE, 0)
        self.refusals = sorted((r for r in refusals if (to_seq is None or r.seq <= to_seq)
                                and (r.envelope.basis or 0) >= tree_start),  # (before: not judged, `_unchecked`)
                               key=lambda r: (r.envelope.basis or 0, r.seq))
        self.judged = 0  # refusals judged so far (`refusals[:judged]`, dropped as judged)
        self.derived: dict[str, Made] = {}  # re-derived, record not read yet (in derivation order)
        self.recorded: dict[str, _Record] = {}  # recorded, not re-derived yet
        # ids recorded and re-derived (matched, or not): a grow-only set as the services keep
        # theirs (a Bloom filter and runs of digests in the store in use, files in a replay:
        # `reader.runs_on_disk`), the one thing held that grows with the log
        self.settled = UsedIds()
        self.repeats: dict[str, tuple[int, Made]] = {}  # re-derived more than once: (times, decision)
        self.found: list[tuple[int, int, Finding]] = []  # findings on records, with (seq, part)
        # computations recorded before `EntitlementsComputed` v3, compared by their maps (entitlements.py)
        self.maps: dict[str, TreeMaps] = {}  # the trees followed: from their first pre-v3 computation on
        self.computing: dict[tuple[str, str, int], list[_Record]] = {}  # (source, tree, basis) -> parts read
        # a cycle's parts recorded less re-derived, with the computation's first part (its
        # `CycleCompleted` is compared after it, or it is reported at the end: `finish`)
        self.shift: dict[tuple[str | None, int | None], tuple[int, _Record]] = {}
        self.position = min((self.starts.get(name, 0) for name in (ADMISSION, PREEMPTION, TREE)), default=0)
        self._kinds: dict[str, int] = {}  # subject -> whose it is (`_ADMISSION`, `_TREE`): a log has few subjects
        self._finished = False
        for decision in pending:  # decided before a snapshot, not in the log then: as if re-derived
            self._derive(decision)

    def _start_from(self, snapshot: Snapshot) -> None:
        """Where a service's fold starts (its snapshot's position); the tree's fold from its
        snapshot (the tree service's `TreeView`), admission's and preemption's in `Derivation`."""
        if snapshot.service == TREE:
            from services.tree.service import TreeView

            state = snapshot.state
            assert isinstance(state, TreeView), type(state)
            self.view = state
        elif snapshot.service not in (ADMISSION, PREEMPTION):
            raise ValueError(f"a snapshot of {snapshot.service!r}: not a service replay folds")
        self.starts[snapshot.service] = snapshot.seq

    def _unchecked(self, envelope: Envelope) -> bool:
        """Whether a recorded decision was made before its service's fold starts (`--from`): its
        basis is at or before the service's snapshot (a refusal of a command: before it, as it is
        judged on the tree as of its basis), so it cannot be re-derived and is not checked."""
        start = self.starts.get(envelope.source, 0)
        basis = envelope.basis
        if not start or basis is None:
            return False
        if envelope.source == TREE and is_command_refusal(envelope):
            return basis < start
        return basis <= start

    # -- the shell's questions

    @property
    def done(self) -> bool:
        """Whether nothing after this position can change the report (only with `to_seq`)."""
        return self.to_seq is not None and self.position >= self.to_seq and not self.derived

    @property
    def in_flight(self) -> int:
        """Decisions held: re-derived and not read yet, plus read and not re-derived yet."""
        return len(self.derived) + len(self.recorded)

    # -- feeding

    def feed(self, piece: Sequence[Stored], elsewhere: Elsewhere | None = None) -> None:
        """The next messages of the log, in order (any number; a position read twice is skipped).
        `elsewhere`: with `derived_elsewhere`, what the `Derivation` made of the same messages
        (through `to_seq`)."""
        if piece and piece[0].seq <= self.position:
            piece = [s for s in piece if s.seq > self.position]
        if not piece:
            return
        if self.to_seq is not None and piece[-1].seq > self.to_seq:
            cut = bisect_right([s.seq for s in piece], self.to_seq)
            head, tail = piece[:cut], piece[cut:]
            if head:
                self.feed(head, elsewhere)
            self.position = max(self.position, self.to_seq)
            self._look_past(tail)
            return
        with gc_paused():
            self._fold(piece, elsewhere)

    def _fold(self, piece: Sequence[Stored], elsewhere: Elsewhere | None) -> None:
        report = self.report
        decoded = Decoded()
        put = decoded.put
        compared: Sequence[Stored] = piece  # the messages whose records are compared here
        if elsewhere is None:
            for stored in piece:
                result = put(stored)
                if isinstance(result, DecodeError):
                    report.malformed += 1
                else:
                    report.events += len(result)
        else:  # the derivation decoded (and counted) every message on admission's subjects
            report.events += elsewhere.events
            report.malformed += elsewhere.malformed
            for name, times in elsewhere.matched.items():  # (recorded, re-derived and matched there)
                count = report.count(name)
                count.recorded += times
                count.derived += times
                count.matched += times
            recording, kinds = elsewhere.recording, self._kinds
            compared = []
            for stored in piece:
                subject = stored.subject
                kind = kinds.get(subject)
                if kind is None:
                    kind = kinds[subject] = (_ADMISSION if admission_wants(subject) else 0) | \
                        (_TREE if self.tree_wants(subject) else 0)
                if not kind & _ADMISSION:
                    result = put(stored)
                    if isinstance(result, DecodeError):
                        report.malformed += 1
                    else:
                        report.events += len(result)
                    compared.append(stored)
                elif stored.seq in recording:
                    put(stored)
                    compared.append(stored)
                elif kind & _TREE:
                    put(stored)
        report.messages += len(piece)
        after = self.position
        # 1. re-derive: each service folds the piece (decisions made before their records are read)
        if self.derivation is not None:
            for decision in self.derivation.fold(piece, decoded, after):
                self._derive(decision)
        elif elsewhere is not None:
            for made in elsewhere.made:
                self.add_made(made)
        self._fold_tree(piece, decoded)
        # 2. compare what the piece records
        found = decoded.found
        for stored in compared:
            envelopes = found.get(id(stored.data))
            if envelopes is None or isinstance(envelopes, DecodeError):
                continue
            parts: list[bytes] | None = None
            for part, envelope in enumerate(envelopes):
                if envelope.event.type not in DECISION_TYPES:  # (`Envelope.type`: a property)
                    continue
                if len(envelopes) == 1:
                    raw = stored.data
                else:
                    parts = parts or pack_parts(stored.data)
                    raw = parts[part]
                self._record(_Record(stored.seq, part, envelope, raw, stored.subject))
        self.position = piece[-1].seq
        report.last_seq = report.read_to = self.position

    def _fold_tree(self, piece: Sequence[Stored], decoded: Decoded) -> None:
        """The tree's view folded through the piece; each refusal judged before the first message
        beyond its basis is folded (on the tree as of its basis)."""
        view = self.view
        start = 0
        while start < len(piece):
            if self.judged < len(self.refusals):
                basis = self.refusals[self.judged].envelope.basis or 0
                end = start
                while end < len(piece) and piece[end].seq <= basis:
                    end += 1
            else:
                end = len(piece)
            if end > start:
                for decision in view.fold(piece[start:end], read=decoded.of):
                    self._derive(decision)
                start = end
            if start < len(piece):
                self._judge_until(piece[start].seq)

    def _judge_until(self, limit: int | None) -> None:
        """Judge the refusals based before `limit` (None: all that are left)."""
        refusals = self.refusals
        while self.judged < len(refusals) and (limit is None or (refusals[self.judged].envelope.basis or 0) < limit):
            again = judge_again(self.view, refusals[self.judged].envelope)
            self.judged += 1
            if again is not None:
                self._derive(again)
        if self.judged == len(refusals) and refusals:
            self.refusals, self.judged = [], 0

    def _look_past(self, piece: Sequence[Stored]) -> None:
        """Past `to_seq`: only the records of decisions re-derived and not read yet are compared."""
        for stored in piece:
            if not self.derived:
                break
            if stored.msg_id is not None and stored.data[:1] != b"[" and stored.msg_id not in self.derived:
                continue  # one event, by its message id: not one we wait for
            try:
                envelopes = decode_all(stored.data, read_envelope, read_pack)
            except DecodeError:
                continue
            parts = pack_parts(stored.data) if len(envelopes) > 1 else [stored.data]
            for part, envelope in enumerate(envelopes):
                if envelope.id in self.derived:
                    self._record(_Record(stored.seq, part, envelope, parts[part], stored.subject))
        if piece:
            self.report.read_to = max(self.report.read_to, piece[-1].seq)

    # -- matching

    def _in_scope(self, envelope: Envelope) -> bool:
        return self.tree is None or getattr(envelope.event, "tree", None) == self.tree

    def _made_in_scope(self, made: Made) -> bool:
        return self.tree is None or made.tree == self.tree

    def _derive(self, decision: Envelope) -> None:
        self.add_made(Made.of(decision))

    def add_made(self, decision: Made) -> None:
        """A decision re-derived (by a folder here, or in another process: in any order with the
        records, as long as every one is added before `finish`)."""
        key = decision.id
        if key in self.derived or key in self.settled or key in self.repeats:
            times, first = self.repeats.get(key, (1, decision))
            self.repeats[key] = (times + 1, first)
            return
        if self._made_in_scope(decision):
            self.report.count(decision.type).derived += 1
        record = self.recorded.pop(key, None)
        if record is None:
            self.derived[key] = decision
        else:
            self._compare(record, decision)

    def _record(self, record: _Record) -> None:
        envelope = record.envelope
        if record.seq <= (envelope.basis or 0) and self._in_scope(envelope):
            # (a service records a decision after the message it is based on: a record at or
            # before its basis was moved there; compared as well, it may match)
            mine = wire(envelope)
            self._found(record, Finding("unexpected", envelope.id, envelope.type, envelope.source, record.seq,
                                        envelope.basis, BEFORE_BASIS, mine, about=about(mine)))
        if envelope.event.type == "EntitlementsComputed" and self._old_entitlements(record):
            return
        self._record_as_any(record)

    def _old_entitlements(self, record: _Record) -> bool:
        """Whether `record` (an `EntitlementsComputed`) is taken as a part of a computation written
        before v3, compared once all its parts are read by the maps it folds to
        (`_judge_computation`); a v3 part of a tree followed is folded into the tree's recorded map
        and compared as any decision."""
        envelope = record.envelope
        event = cast(EntitlementsComputed, envelope.event)  # (the model or its view)
        tree = event.tree
        key = (envelope.source, tree, envelope.basis or 0)
        maps = self.maps.get(tree)
        old = version_of(record.raw) < CURRENT
        if not old and key not in self.computing:
            if maps is not None:
                maps.recorded.add(event)
            return False
        if old and maps is None and event.part == 1 and event.replace:  # (a tree's first computation replaces)
            maps = self.maps[tree] = TreeMaps()
        if maps is None:
            return False
        parts = self.computing.setdefault(key, [])
        parts.append(record)
        if event.part < event.parts:
            return True
        del self.computing[key]
        self._judge_computation(parts, maps)
        return True

    def _judge_computation(self, parts: list[_Record], maps: TreeMaps) -> None:
        """A computation recorded before v3 (`parts`, all read) against its re-derived parts: equal
        when the tree's maps folded from each side are (entitlements.py); its cycle's
        `CycleCompleted.decisions` then counts the re-derived parts (`shift`)."""
        first = parts[0].envelope
        event = cast(EntitlementsComputed, first.event)
        source, tree, basis = first.source, event.tree, first.basis or 0
        made: list[Made] = []
        mine: list[EntitlementsComputed] = []
        one = self.derived.pop(derived_id(source, basis, tree, "entitlements"), None)
        if one is not None:
            made.append(one)
            mine.append(decode(one.data).event)  # type: ignore[arg-type]
        for part in range(2, mine[0].parts + 1 if mine else 1):
            more = self.derived.pop(derived_id(source, basis, tree, f"entitlements.{part}"), None)
            if more is None:
                break
            made.append(more)
            mine.append(decode(more.data).event)  # type: ignore[arg-type]
        recorded: list[EntitlementsComputed] = [p.envelope.event for p in parts]  # type: ignore[misc]
        for computed in recorded:
            maps.recorded.add(computed)
        if not made:  # nothing re-derived for it: each part is what any record is (unexpected)
            for record in parts:
                self._record_as_any(record)
            return
        for computed in mine:
            maps.derived.add(computed)
        for decision in made:
            self.settled.add(decision.id)
        for record in parts:
            self.settled.add(record.envelope.id)
        if len(parts) != len(made):
            self.shift[(tree, basis)] = (len(parts) - len(made), parts[0])
        in_scope = self._in_scope(first)
        count = self.report.count(first.type)
        if in_scope:
            count.recorded += len(parts)
        found = map_differences(recorded, mine, maps.recorded.map(), maps.derived.map(), differences)
        found += _heads_differ(parts, made[0])
        if not found:
            if in_scope:
                count.matched += len(parts)
            return
        if in_scope:
            wired, theirs = wire(first), made[0].wire()
            version = version_of(parts[0].raw)
            self._found(parts[0], Finding("differs", first.id, first.type, source, parts[0].seq, basis,
                                          f"v{version} computation ({len(parts)} parts recorded, {len(made)} "
                                          f"re-derived) folds to other numbers: " + "; ".join(found),
                                          wired, theirs, about=about(wired)))

    def _record_as_any(self, record: _Record) -> None:
        envelope = record.envelope
        key = envelope.id
        in_scope = self._in_scope(envelope)
        decision = self.derived.pop(key, None)
        if decision is None and self.starts and self._unchecked(envelope):
            # (a decision is re-derived before any record of it is read: it is made at a position
            # before its record, and each piece is folded before its records are compared)
            if in_scope:
                self.report.unchecked += 1
            return
        if in_scope:
            self.report.count(envelope.type).recorded += 1
        if decision is not None:
            self._compare(record, decision)
        elif key in self.recorded or key in self.settled:
            if in_scope:
                mine = wire(envelope)
                self._found(record, Finding("duplicate", key, envelope.type, envelope.source, record.seq,
                                            envelope.basis, RECORDED_TWICE, mine,
                                            about=about(mine)))
        else:
            self.recorded[key] = record

    def _compare(self, record: _Record, decision: Made) -> None:
        self.settled.add(decision.id)
        shift = 0
        if self.maps:  # (after a computation recorded before v3: see `_judge_computation`)
            if decision.type == "EntitlementsComputed" and decision.tree in self.maps:
                self.maps[decision.tree].derived.add(decode(decision.data).event)  # type: ignore[arg-type]
            elif decision.type == "CycleCompleted" and decision.source == ADMISSION:
                shift = self.shift.pop((decision.tree, decision.basis), (0, record))[0]
        envelope = record.envelope
        in_scope = self._in_scope(envelope)
        if not in_scope and not self._made_in_scope(decision):
            return
        # (the subject the service records it on: a record moved, unchanged, onto another differs)
        expected = subject_of(decision.type, decision.tree, decision.source)
        elsewhere = record.subject != expected
        if record.raw == decision.data and not shift and not elsewhere:  # the bytes the service would write
            if in_scope:
                self.report.count(envelope.type).matched += 1
            return
        mine, theirs = wire(envelope), decision.wire()
        if shift and isinstance(mine.get("event"), dict):  # the cycle's decisions as the re-derived parts count
            mine["event"]["decisions"] = mine["event"].get("decisions", 0) - shift
        if mine == theirs and not elsewhere:
            if in_scope:
                self.report.count(envelope.type).matched += 1
            return
        found = [on_subject(record.subject, expected)] if elsewhere else []
        self._found(record, Finding("differs", envelope.id, envelope.type, envelope.source, record.seq, envelope.basis,
                                    "; ".join(found + differences(mine, theirs)), mine, theirs, about=about(mine)))

    def _found(self, record: _Record, finding: Finding) -> None:
        self.found.append((record.seq, record.part, finding))

    # -- the end

    def finish(self) -> Report:
        """The report: what is still held is judged (records never re-derived are unexpected,
        re-derived decisions never read are missing). Call once, after the last piece."""
        report = self.report
        if self._finished:
            return report
        self._finished = True
        with gc_paused():
            self._judge_until(None)  # refusals based at or after the last position folded
            for parts in self.computing.values():  # pre-v3 computations whose last part never came
                for record in parts:
                    self._record_as_any(record)
            self.computing.clear()
            # pre-v3 computations in other parts than re-derived whose cycle's `CycleCompleted` was
            # not compared after them (compared before its parts were all read, here or by the
            # derivation's process, which takes a record with the re-derived bytes: a count of
            # the re-derived parts, not of those recorded)
            for shift, first in self.shift.values():
                envelope = first.envelope
                if self._in_scope(envelope):
                    mine = wire(envelope)
                    self._found(first, Finding(
                        "differs", envelope.id, envelope.type, envelope.source, first.seq, envelope.basis,
                        f"v{version_of(first.raw)} computation in {shift:+d} parts against the re-derived, "
                        "but its cycle's CycleCompleted, compared before all of them were read, does not "
                        "count them", mine, about=about(mine)))
            self.shift.clear()
        findings: list[Finding] = []
        for key, (times, decision) in self.repeats.items():
            if self._made_in_scope(decision):
                theirs = decision.wire()
                findings.append(Finding("duplicate", key, decision.type, decision.source, None, decision.basis,
                                        derived_times(times), None, theirs, about=about(theirs)))
        for record in self.recorded.values():
            envelope = record.envelope
            if self._in_scope(envelope):
                mine = wire(envelope)
                self._found(record, Finding("unexpected", envelope.id, envelope.type, envelope.source, record.seq,
                                            envelope.basis, NOT_DECIDED, mine, about=about(mine)))
        findings.extend(f for _, _, f in sorted(self.found, key=lambda found: (found[0], found[1])))
        for key, decision in self.derived.items():
            if self._made_in_scope(decision):
                theirs = decision.wire()
                findings.append(Finding("missing", key, decision.type, decision.source, None, decision.basis,
                                        NOT_RECORDED, None, theirs, about=about(theirs)))
        report.findings = findings
        self.recorded.clear()
        self.derived.clear()
        return report


def verify(messages: Sequence[Stored], *, tree: str | None = None, to_seq: int | None = None) -> Report:
    """Re-derive every decision from `messages` (a whole log, in order) and compare: with
    admission's state folded once (`shared`), and when that finds anything, again with each
    service's own fold (the report of a log with findings is always the latter's)."""
    report = Report()
    for shared in (True, False):
        verifier = Verifier(command_refusals(messages), tree=tree, to_seq=to_seq, shared=shared)
        verifier.feed(messages)
        report = verifier.finish()
        if report.ok or not report.shared:
            break
    return report
