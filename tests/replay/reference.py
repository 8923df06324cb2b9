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
(the same id recorded twice). Pure: no I/O, no clock; `reader.py` reads a log and calls this.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from events import DecodeError, Envelope, InputRejected, decode_all, encode
from events.envelope import DecisionEvent
from services.admission.folder import SUBJECTS as ADMISSION_SUBJECTS
from services.admission.folder import AdmissionFolder
from services.common.folding import Folder, fold_batch
from services.common.log import Stored
from services.common.memlog import subject_filter
from services.preemption.folder import SUBJECTS as PREEMPTION_SUBJECTS
from services.preemption.folder import PreemptionFolder
from services.tree.domain.decide import Refused
from services.tree.service import COMMANDS, INPUT_LIMIT, MODELS, TreeView, judge, parse_command, rejection
from services.tree.service import SERVICE as TREE

DECISION_TYPES: frozenset[str] = frozenset(cls.model_fields["type"].default for cls in get_args(DecisionEvent))
IGNORED_ENVELOPE_FIELDS: frozenset[str] = frozenset({"trace"})

Kind = Literal["differs", "unexpected", "missing", "duplicate"]


@dataclass(frozen=True, slots=True)
class Finding:
    """One decision where the log and the re-derivation disagree."""

    kind: Kind
    id: str
    type: str
    source: str
    seq: int | None  # where the log has it (None: missing)
    basis: int | None
    detail: str = ""
    recorded: dict[str, Any] | None = None
    derived: dict[str, Any] | None = None

    def line(self) -> str:
        where = f"seq {self.seq}" if self.seq is not None else "not in the log"
        text = f"{self.kind:<10} {self.id}  {self.type} by {self.source}, {where}, basis {self.basis}"
        return f"{text}: {self.detail}" if self.detail else text


@dataclass(slots=True)
class TypeCount:
    recorded: int = 0
    derived: int = 0
    matched: int = 0


@dataclass(slots=True)
class Report:
    messages: int = 0
    malformed: int = 0
    counts: dict[str, TypeCount] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.findings

    def count(self, event_type: str) -> TypeCount:
        return self.counts.setdefault(event_type, TypeCount())

    def ids(self, kind: Kind | None = None) -> set[str]:
        return {f.id for f in self.findings if kind is None or f.kind == kind}

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "messages": self.messages,
            "malformed": self.malformed,
            "counts": {t: {"recorded": c.recorded, "rederived": c.derived, "matched": c.matched}
                       for t, c in sorted(self.counts.items())},
            "findings": [{"kind": f.kind, "id": f.id, "type": f.type, "source": f.source, "seq": f.seq,
                          "basis": f.basis, "detail": f.detail, "recorded": f.recorded, "rederived": f.derived}
                         for f in self.findings],
        }


def wire(envelope: Envelope) -> dict[str, Any]:
    """The envelope as compared: as encoded on the wire (numbers as rounded there), minus what is ignored."""
    data: dict[str, Any] = json.loads(encode(envelope))
    for name in IGNORED_ENVELOPE_FIELDS:
        data.pop(name, None)
    return data


def differences(recorded: Any, derived: Any, path: str = "", limit: int = 5) -> list[str]:
    """Where two JSON values differ, as `path: recorded != re-derived` (at most `limit`)."""
    if isinstance(recorded, dict) and isinstance(derived, dict):
        out: list[str] = []
        for key in sorted(set(recorded) | set(derived)):
            sub = f"{path}.{key}" if path else str(key)
            if key not in derived:
                out.append(f"{sub}: {_short(recorded[key])} recorded, absent re-derived")
            elif key not in recorded:
                out.append(f"{sub}: absent recorded, {_short(derived[key])} re-derived")
            else:
                out.extend(differences(recorded[key], derived[key], sub, limit - len(out)))
            if len(out) >= limit:
                return out[:limit]
        return out
    if isinstance(recorded, list) and isinstance(derived, list) and len(recorded) == len(derived):
        out = []
        for i, (a, b) in enumerate(zip(recorded, derived, strict=True)):
            out.extend(differences(a, b, f"{path}[{i}]", limit - len(out)))
            if len(out) >= limit:
                return out[:limit]
        return out
    if recorded == derived:
        return []
    return [f"{path or '(value)'}: {_short(recorded)} recorded != {_short(derived)} re-derived"]


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 80 else text[:77] + "..."


# --- re-deriving ------------------------------------------------------------------------------------


def _folded(folder: Folder, subjects: Sequence[str], messages: Sequence[Stored]) -> list[Envelope]:
    wanted = subject_filter(tuple(subjects))
    return fold_batch(folder, [m for m in messages if wanted(m.subject)], 0).decisions


@dataclass(frozen=True, slots=True)
class _Refusal:
    seq: int
    envelope: Envelope


def _tree_decisions(messages: Sequence[Stored], refusals: Sequence[_Refusal]) -> list[Envelope]:
    """The tree's malformed-message rejections, and each recorded refusal judged again at its basis."""
    view = TreeView()
    derived: list[Envelope] = []
    pending = sorted(refusals, key=lambda r: (r.envelope.basis or 0, r.seq))
    i = 0
    for stored in [*messages, None]:
        limit = stored.seq if stored is not None else None
        while i < len(pending) and (limit is None or (pending[i].envelope.basis or 0) < limit):
            again = _judge_again(view, pending[i].envelope)
            if again is not None:
                derived.append(again)
            i += 1
        if stored is not None:
            derived.extend(view.fold([stored]))
    return derived


def _judge_again(view: TreeView, recorded: Envelope) -> Envelope | None:
    """The record the tree would write for this refused input on `view` (None: it would not refuse)."""
    event = recorded.event
    assert isinstance(event, InputRejected)
    basis = recorded.basis or 0
    if event.input_type in COMMANDS:  # a request that was not a valid command
        parsed = parse_command(event.input_type, event.input)
        if not isinstance(parsed, Refused):
            return None
        if len(event.input) >= INPUT_LIMIT:  # recorded truncated: the reason is taken as recorded
            parsed = Refused(event.ref, event.rule, event.reason, event.field, event.tree)
        return rejection(parsed, event.input_type, event.input, basis, view.now)
    model = MODELS.get(event.input_type)
    if model is None:
        parsed = parse_command(event.input_type, event.input)  # an unknown op: refused by parsing
        return rejection(parsed, event.input_type, event.input, basis, view.now) \
            if isinstance(parsed, Refused) else None
    try:
        command = model.model_validate_json(event.input)
    except ValueError:
        return None
    decision = judge(view.state, command)  # type: ignore[arg-type]
    if not isinstance(decision, Refused):
        return None
    return rejection(decision, event.input_type, command.model_dump_json(), basis, view.now)


def _is_command_refusal(envelope: Envelope) -> bool:
    event = envelope.event
    return envelope.source == TREE and isinstance(event, InputRejected) and event.input_seq is None


# --- comparing ------------------------------------------------------------------------------------


def verify(messages: Sequence[Stored]) -> Report:
    """Re-derive every decision from `messages` (a whole log, in order) and compare."""
    report = Report(messages=len(messages))
    recorded: list[tuple[Stored, Envelope]] = []
    refusals: list[_Refusal] = []
    for stored in messages:
        try:
            envelopes = decode_all(stored.data)  # one event, or a pack of decisions
        except DecodeError:
            report.malformed += 1
            continue
        for envelope in envelopes:
            if envelope.type in DECISION_TYPES:
                recorded.append((stored, envelope))
                if _is_command_refusal(envelope):
                    refusals.append(_Refusal(stored.seq, envelope))

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
                                           f"re-derived {n} times", None, wire(d)))

    seen: set[str] = set()
    for stored, envelope in recorded:
        count = report.count(envelope.type)
        count.recorded += 1
        mine = wire(envelope)
        if envelope.id in seen:
            report.findings.append(Finding("duplicate", envelope.id, envelope.type, envelope.source, stored.seq,
                                           envelope.basis, "the id is recorded more than once", mine))
            continue
        seen.add(envelope.id)
        rederived = derived.get(envelope.id)
        if rederived is None:
            report.findings.append(Finding("unexpected", envelope.id, envelope.type, envelope.source, stored.seq,
                                           envelope.basis, "recorded, but no service decides it from this log",
                                           mine))
            continue
        theirs = wire(rederived)
        if mine != theirs:
            report.findings.append(Finding("differs", envelope.id, envelope.type, envelope.source, stored.seq,
                                           envelope.basis, "; ".join(differences(mine, theirs)), mine, theirs))
            continue
        count.matched += 1
    for decision_id, decision in derived.items():
        if decision_id not in seen:
            report.findings.append(Finding("missing", decision_id, decision.type, decision.source, None,
                                           decision.basis, "re-derived, but not in the log", None, wire(decision)))
    return report
