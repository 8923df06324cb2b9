"""What a replay reports (`Report`): the counts of each decision type, and the findings, each a
decision where the log and the re-derivation disagree (`Finding`, its `line` as the CLI prints it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

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
    about: str = ""  # the key fields of the decision's event (`about`)

    def line(self) -> str:
        where = f"seq {self.seq}" if self.seq is not None else "not in the log"
        text = f"{self.kind:<10} {self.id}  {self.type} by {self.source}, {where}, basis {self.basis}"
        if self.about:
            text += f" [{self.about}]"
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
    events: int = 0  # events in the messages folded (a pack holds many)
    last_seq: int = 0  # the last position folded
    read_to: int = 0  # the last position read (past `to_seq`: looking for decisions in flight there)
    to_seq: int | None = None
    tree: str | None = None
    from_seq: int | None = None  # `--from`: the position asked for
    starts: dict[str, int] = field(default_factory=dict)  # `--from`: service -> its snapshot's position (0: none)
    passed_over: list[str] = field(default_factory=list)  # `--from`: snapshots not used, and why
    unchecked: int = 0  # `--from`: decisions read whose basis is before their service's start
    shared: bool = False  # admission's state was folded once for both services (`shared.py`)

    @property
    def ok(self) -> bool:
        return not self.findings

    def count(self, event_type: str) -> TypeCount:
        found = self.counts.get(event_type)  # (not `setdefault`: it made a TypeCount per call, a few per decision)
        if found is None:
            found = self.counts[event_type] = TypeCount()
        return found

    def ids(self, kind: Kind | None = None) -> set[str]:
        return {f.id for f in self.findings if kind is None or f.kind == kind}

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "messages": self.messages,
            "events": self.events,
            "malformed": self.malformed,
            "scope": {"tree": self.tree, "to_seq": self.to_seq, "last_seq": self.last_seq, "read_to": self.read_to,
                      "from_seq": self.from_seq, "snapshots": dict(self.starts), "passed_over": list(self.passed_over),
                      "unchecked": self.unchecked},
            "counts": {t: {"recorded": c.recorded, "rederived": c.derived, "matched": c.matched}
                       for t, c in sorted(self.counts.items())},
            "findings": [{"kind": f.kind, "id": f.id, "type": f.type, "source": f.source, "seq": f.seq,
                          "basis": f.basis, "about": f.about, "detail": f.detail, "recorded": f.recorded,
                          "rederived": f.derived}
                         for f in self.findings],
        }
