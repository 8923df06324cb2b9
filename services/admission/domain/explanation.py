"""What `explain` answers: an `Explanation` of one gang, made of `Finding`s, and how it reads
(its headline, its text, its JSON form)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from services.admission.domain.explain_text import clock_text, vector_text
from services.admission.domain.model import PENDING, REJECTED, UNKNOWN

Numbers = Mapping[str, object]


@dataclass(frozen=True, slots=True)
class Finding:
    """One reason or fact: `check` names it (`entitlement`, `controller_limit`, `reservation`,
    `job_limit`, `head_of_line`, `members`, `fits`, `no_cycle_yet`, `admitted`, `placement`,
    `requeued`, `done`, `timed_out`, `cancelled`, `rejected`, `refused_members`, `unknown`, ...),
    `message` says it for people, `numbers` holds the figures in it (JSON-ready)."""

    check: str
    message: str
    numbers: Numbers = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        return {"check": self.check, "message": self.message, "numbers": dict(self.numbers)}


@dataclass(frozen=True, slots=True)
class Explanation:
    """What is known of one gang and why it is where it is; `findings[0]` is the main reason."""

    tree: str
    gang: str
    state: str
    findings: tuple[Finding, ...]
    pool: str | None = None
    queue: str | None = None
    position: int | None = None  # 1-based place in its queue, in the order the cycle takes it
    queue_length: int | None = None
    job: str | None = None
    user: str | None = None
    priority: int | None = None
    size: int | None = None
    members: int | None = None
    attempt: int = 0
    resources: Mapping[str, float] = field(default_factory=dict)
    as_of: int = 0  # log position of the state explained
    cycle_seq: int = 0  # log position of the entitlements of the tree's last cycle (0: none yet)
    now: float = 0.0  # the log's time

    @property
    def summary(self) -> str:
        return self.findings[0].message if self.findings else self.headline

    @property
    def headline(self) -> str:
        if self.state == UNKNOWN:
            return f"gang {self.gang}: unknown in tree {self.tree}"
        who = f"gang {self.gang} (job {self.job}, tree {self.tree})"
        if self.state == REJECTED:
            return f"{who} was rejected: it named pool {self.pool}"
        where = f"pool {self.pool}"
        if self.state == PENDING and self.queue is not None:
            place = f" (position {self.position} of {self.queue_length})" if self.position is not None else ""
            where = f"queue {self.queue} of pool {self.pool}{place}"
        return (f"{who} is {self.state.replace('_', ' ')} in {where}: {self.members} of {self.size} members, "
                f"needs {vector_text(self.resources)}, priority {self.priority}")

    @property
    def text(self) -> str:
        lines = [self.headline]
        lines += [f"  - {f.message}" for f in self.findings]
        cycle = f"; entitlements of the cycle at {self.cycle_seq}" if self.cycle_seq else "; no cycle has run yet"
        lines.append(f"  (as of log position {self.as_of}, time {clock_text(self.now)}{cycle})")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, object]:
        return {
            "tree": self.tree, "gang": self.gang, "state": self.state, "pool": self.pool, "queue": self.queue,
            "position": self.position, "queue_length": self.queue_length, "job": self.job, "user": self.user,
            "priority": self.priority, "size": self.size, "members": self.members, "attempt": self.attempt,
            "resources": dict(self.resources), "as_of": self.as_of, "cycle_seq": self.cycle_seq, "now": self.now,
            "summary": self.summary, "findings": [f.to_dict() for f in self.findings], "text": self.text,
        }
