"""`PreemptionState`: admission's fold (tasks, gangs, ledgers, entitlements) plus what
preemption remembers (since when each pool is over), and the pass each admission cycle triggers."""

from __future__ import annotations

from dataclasses import dataclass, field

from events import CycleCompleted, Event
from services.admission.domain.state import SERVICE as ADMISSION
from services.admission.domain.state import AdmissionState, Outcome
from services.preemption.domain.passes import OverSince, preemption_pass

SERVICE = "preemption"


@dataclass(slots=True)
class PreemptionState:
    admission: AdmissionState = field(default_factory=AdmissionState)
    over: dict[str, OverSince] = field(default_factory=dict)
    in_flight: dict[str, int] = field(default_factory=dict)  # tree -> trigger seq of an unread pass

    @property
    def now(self) -> float:
        return self.admission.now

    def apply(self, event: Event, seq: int, time: float) -> list[Outcome]:
        """Fold one event; after an admission cycle completes, run one preemption pass."""
        self.admission.apply(event, seq, time)  # admission's own announcements are admission's to publish
        self.admission.take_due()
        if not isinstance(event, CycleCompleted):
            return []
        if event.service == SERVICE:
            if self.in_flight.get(event.tree) == event.trigger_seq:
                del self.in_flight[event.tree]
            return []
        if event.service != ADMISSION or event.tree in self.in_flight:
            return []
        self.in_flight[event.tree] = seq
        rt = self.admission.runtime(event.tree)
        options = self.admission.config.tree(event.tree).options
        out = preemption_pass(rt, self.now, options.preemption.grace, options.preemption.enabled,
                              self.over.setdefault(event.tree, OverSince()))
        out.append(Outcome(CycleCompleted(tree=event.tree, service=SERVICE, trigger_seq=seq, decisions=len(out)),
                           "cycle"))
        return out
