"""`verify(messages)`: re-derive every decision of a log with the services' own pure code, and
compare it with what the log records (ARCHITECTURE invariant 3, `poolwise replay --verify`).

Re-derived, for each deciding service, exactly as its shell decides live:

- admission and preemption: `fold_batch` of their `Folder` (`AdmissionFolder`, `PreemptionFolder`)
  over the messages of their subjects, from the start: every decision a `step` returns (and
  every rejection of a malformed message on a subject the service owns), with its derived id,
  its `basis` and its time. Folding the log as recorded puts every service in the state it
  decided from: a cycle's decisions take effect at its trigger (admission applies them as it
  makes them, preemption reads through `CycleOrder`), every other decision where it lands.
- tree: the rejections of malformed config and host messages (`TreeView.fold`), and every
  recorded refusal of a command: the command (in the record's `input`) is judged again
  (`parse_command`, `judge`) on the tree as folded through the record's `basis`. Commands are not
  on the log, so a refusal the log lacks cannot be found; accepted commands are inputs (config
  events), not decisions.

Compared: every event of a decision type (`DECISION_TYPES`, whoever published it) against the
re-derived decisions, by id, then by content: the envelope and the event as encoded on the wire.
Ignored, and only this:

- the envelope's `trace` (telemetry context; absent unless tracing is on);
- for a refused request of `INPUT_LIMIT` characters or more (recorded truncated), its `rule`,
  `reason`, `field` and `ref`: the truncated text cannot be parsed again as it came (the id,
  basis, time and subject are still checked).

Findings: `differs` (same id, other content), `unexpected` (recorded, not re-derived: a forged
or misplaced decision), `missing` (re-derived, not in the log: lost or removed), `duplicate`
(the same id recorded twice); a record on another subject than its decision's
(`events.subjects.for_event`, where the services append it) `differs` too. Pure: no I/O, no clock.

Kept as the oracle of the streaming verifier (services/tools/replay/verify.py), with its own loop
over the whole list: what it shares with the product is what a finding says (`Finding`, `Report`:
report.py; the wording of each kind and of what differs: describe.py) and how a refusal of a
command is judged again (refusals.py), so that a finding's wording is written once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from events import DecodeError, Envelope, decode_all
from events.subjects import for_event
from services.admission.folder import SUBJECTS as ADMISSION_SUBJECTS
from services.admission.folder import AdmissionFolder
from services.common.folding import Folder, fold_batch
from services.common.log import Stored
from services.common.memlog import subject_filter
from services.preemption.folder import SUBJECTS as PREEMPTION_SUBJECTS
from services.preemption.folder import PreemptionFolder
from services.tools.replay import describe as words
from services.tools.replay.decoding import DECISION_TYPES
from services.tools.replay.describe import about, differences, wire
from services.tools.replay.refusals import Refusal, is_command_refusal, judge_again
from services.tools.replay.report import Finding, Report
from services.tree.service import TreeView

# --- re-deriving ------------------------------------------------------------------------------------


def _folded(folder: Folder, subjects: Sequence[str], messages: Sequence[Stored]) -> list[Envelope]:
    wanted = subject_filter(tuple(subjects))
    return fold_batch(folder, [m for m in messages if wanted(m.subject)], 0).decisions


def _tree_decisions(messages: Sequence[Stored], refusals: Sequence[Refusal]) -> list[Envelope]:
    """The tree's malformed-message rejections, and each recorded refusal judged again at its basis."""
    view = TreeView()
    derived: list[Envelope] = []
    pending = sorted(refusals, key=lambda r: (r.envelope.basis or 0, r.seq))
    i = 0
    for stored in [*messages, None]:
        limit = stored.seq if stored is not None else None
        while i < len(pending) and (limit is None or (pending[i].envelope.basis or 0) < limit):
            again = judge_again(view, pending[i].envelope)
            if again is not None:
                derived.append(again)
            i += 1
        if stored is not None:
            derived.extend(view.fold([stored]))
    return derived


# --- comparing ------------------------------------------------------------------------------------


def verify(messages: Sequence[Stored]) -> Report:
    """Re-derive every decision from `messages` (a whole log, in order) and compare."""
    report = Report(messages=len(messages))
    recorded: list[tuple[Stored, Envelope]] = []
    refusals: list[Refusal] = []
    for stored in messages:
        try:
            envelopes = decode_all(stored.data)  # one event, or a pack of decisions
        except DecodeError:
            report.malformed += 1
            continue
        for envelope in envelopes:
            if envelope.type in DECISION_TYPES:
                recorded.append((stored, envelope))
                if is_command_refusal(envelope):
                    refusals.append(Refusal(stored.seq, envelope))

    derived: dict[str, Envelope] = {}
    produced = [
        *_folded(AdmissionFolder(), ADMISSION_SUBJECTS, messages),
        *_folded(PreemptionFolder(), PREEMPTION_SUBJECTS, messages),
        *_tree_decisions(messages, refusals),
    ]
    repeated = Counter(d.id for d in produced)
    for decision in produced:
        if decision.id not in derived:
            derived[decision.id] = decision
            report.count(decision.type).derived += 1
    for decision_id, n in repeated.items():
        if n > 1:  # a service would publish it once (de-duplicated): the re-derivation is suspect
            d = derived[decision_id]
            report.findings.append(Finding("duplicate", decision_id, d.type, d.source, None, d.basis,
                                           words.derived_times(n), None, wire(d), about=about(wire(d))))

    seen: set[str] = set()
    for stored, envelope in recorded:
        count = report.count(envelope.type)
        count.recorded += 1
        mine = wire(envelope)
        if envelope.id in seen:
            report.findings.append(Finding("duplicate", envelope.id, envelope.type, envelope.source, stored.seq,
                                           envelope.basis, words.RECORDED_TWICE, mine, about=about(mine)))
            continue
        seen.add(envelope.id)
        rederived = derived.get(envelope.id)
        if rederived is None:
            report.findings.append(Finding("unexpected", envelope.id, envelope.type, envelope.source, stored.seq,
                                           envelope.basis, words.NOT_DECIDED, mine, about=about(mine)))
            continue
        theirs = wire(rederived)
        subject = for_event(rederived.type, getattr(rederived.event, "tree", None), rederived.source)
        if mine != theirs or stored.subject != subject:
            elsewhere = [words.on_subject(stored.subject, subject)] if stored.subject != subject else []
            report.findings.append(Finding("differs", envelope.id, envelope.type, envelope.source, stored.seq,
                                           envelope.basis, "; ".join(elsewhere + differences(mine, theirs)), mine,
                                           theirs, about=about(mine)))
            continue
        count.matched += 1
    for decision_id, decision in derived.items():
        if decision_id not in seen:
            report.findings.append(Finding("missing", decision_id, decision.type, decision.source, None,
                                           decision.basis, words.NOT_RECORDED, None, wire(decision),
                                           about=about(wire(decision))))
    return report
