"""`PreemptionState`: admission's fold (tasks, gangs, ledgers, entitlements) plus what preemption
remembers (since when each pool is over, each pool's starvation status, the preemptions asked
for and how they ended), and the pass each admission cycle triggers.

Events come in the order admission's fold applies them (`PreemptionFolder` reads the log through
`CycleOrder`): a cycle's decisions at its trigger, then what came after it. The pass runs when
the cycle's `CycleCompleted` is applied, on the state the cycle left, and is based on the cycle's
trigger (the `seq` it is applied at) and closed with a `CycleCompleted` of that trigger. One pass
per tree is in flight: a cycle applied before the previous pass's `CycleCompleted` is read (its
requests take effect where they land) gets its pass when that is read, based there, on the state
then, closed with the cycle's trigger (the last such cycle's, for all that came meanwhile)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from events import CycleCompleted, Event, GangAdmitted, GangRequeued, PreemptionRequested, event_class
from services.admission.domain.model import ADMITTED, CANCELLED, DONE, PENDING, TERMINAL
from services.admission.domain.state import SERVICE as ADMISSION
from services.admission.domain.state import AdmissionState, Outcome, failed_cycle
from services.preemption.domain.admitted import AdmittedIndex
from services.preemption.domain.model import PassResult, TreeMemory
from services.preemption.domain.passes import preemption_pass

SERVICE = "preemption"
# The kinds of event `applied` acts on whatever else holds: with no preemption open, any other
# event changes nothing of preemption's own (a replay skips the call for it: most of a log)
ACTS_ON: frozenset[type[Event]] = frozenset({GangAdmitted, PreemptionRequested, CycleCompleted})
KEEP_FINISHED = 10_000  # completed preemption records kept for queries (the log keeps them all)


@dataclass(slots=True)
class PreemptionRecord:
    """One `PreemptionRequested` read back from the log, and what became of it: `requested` while
    its tasks still hold their allocation, then `completed` with an outcome: `preempted` (the
    tasks stopped and the gang went back to pending), `requeued` (nothing had started: back to
    pending at once; or its placement timed out first), `finished` (the tasks ended on their own
    first), `cancelled`, or `stale` (the gang was no longer admitted when the request was read:
    no effect)."""

    seq: int
    time: float
    tree: str
    pool: str
    gang: str
    tasks: list[str]
    reason: str
    attempt: int
    state: str = "requested"
    outcome: str | None = None
    completed_at: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "time": self.time, "tree": self.tree, "pool": self.pool, "gang": self.gang,
                "tasks": list(self.tasks), "reason": self.reason, "attempt": self.attempt, "state": self.state,
                "outcome": self.outcome, "completed_at": self.completed_at}


@dataclass(slots=True)
class PreemptionState:
    admission: AdmissionState = field(default_factory=lambda: AdmissionState(reader=True))
    memory: dict[str, TreeMemory] = field(default_factory=dict)
    in_flight: dict[str, int] = field(default_factory=dict)  # tree -> trigger seq of an unread pass
    # tree -> the trigger of the last admission cycle applied while a pass was in flight: its pass
    # runs when the one in flight is read back (once, for every cycle that came meanwhile)
    deferred: dict[str, int] = field(default_factory=dict)
    admitted: dict[str, AdmittedIndex] = field(default_factory=dict)  # tree -> its admitted gangs (a superset)
    records: list[PreemptionRecord] = field(default_factory=list)
    open: dict[tuple[str, str], PreemptionRecord] = field(default_factory=dict)  # (tree, gang) -> requested
    last_pass: dict[str, PassResult] = field(default_factory=dict)  # tree -> what its last pass decided, and why
    # Per tree (services/preemption/held_trees.py): the trees whose passes this fold runs as they
    # come (None: every tree). Another tree's pass is left to the caller, named by `parked` (tree,
    # trigger): it runs it (`run_pass`) before it folds anything else, deciding it or only
    # remembering what it would remember.
    held: frozenset[str] | None = None
    parked: tuple[str, int] | None = None

    @property
    def now(self) -> float:
        return self.admission.now

    def apply(self, event: Event, seq: int, time: float) -> list[Outcome]:
        """Fold one event; after an admission cycle completes, run one preemption pass."""
        kind = event_class(event)  # events come off the wire as exactly these types, or views of them
        before = self.attempt_of(event) if kind is PreemptionRequested else None
        announced = self.admission.apply(event, seq, time)  # admission's own announcements are admission's to publish
        return self.applied(event, kind, seq, before, announced)

    def applied(self, event: Event, kind: type[Event], seq: int, before: int | None,
                announced: list[Outcome]) -> list[Outcome]:
        """The rest of `apply`, once `self.admission` has applied `event` (of class `kind`) and
        announced `announced`; `before`: `attempt_of(event)` before it did (only a
        `PreemptionRequested`'s). A replay that folds admission's state once for both services
        steps it so (`services/tools/replay/shared.py`)."""
        if kind is GangAdmitted or kind is PreemptionRequested:
            self._track(event, kind, seq, before)
        if self.open:
            self._settle([event, *(o.event for o in announced)])
        if kind is not CycleCompleted:
            return []
        assert isinstance(event, CycleCompleted)
        tree = event.tree
        if event.service == SERVICE:
            if self.in_flight.get(tree) == event.trigger_seq:
                del self.in_flight[tree]
                trigger = self.deferred.pop(tree, None)
                if trigger is not None:  # a cycle came while that pass was in flight: its pass now
                    self.in_flight[tree] = trigger
                    return self._pass(tree, trigger)
            return []
        if event.service != ADMISSION:
            return []
        if tree in self.in_flight:  # the last pass's requests are not read yet: this one waits for them
            self.deferred[tree] = seq
            return []
        self.in_flight[tree] = seq
        return self._pass(tree, seq)

    def _pass(self, tree: str, trigger: int) -> list[Outcome]:
        if self.held is not None and tree not in self.held:
            self.parked = (tree, trigger)  # the caller's to run (`held`)
            return []
        return self.run_pass(tree, trigger)

    def run_pass(self, tree: str, seq: int, picks: bool = True) -> list[Outcome]:
        """The pass of `tree` after the admission cycle triggered at `seq`; `picks=False`: only
        what it remembers, and its starvation changes (`preemption_pass`)."""
        admitted = self._admitted(tree)
        admitted.sweep_if_grown()
        try:
            result = preemption_pass(self.admission, tree, self.now, self.memory.setdefault(tree, TreeMemory()),
                                     admitted, picks)
        except Exception as error:  # a broken pass neither stops the service nor its next passes
            return failed_cycle(tree, SERVICE, seq, "CycleCompleted",
                                f"the preemption pass of tree {tree} after seq {seq}", error)
        self.last_pass[tree] = result
        out = [Outcome(p.event, p.key) for p in result.preemptions]
        out += [Outcome(s, f"starvation:{s.pool}") for s in result.starvation]
        out.append(Outcome(CycleCompleted(tree=tree, service=SERVICE, trigger_seq=seq, decisions=len(out)), "cycle"))
        return out

    def _admitted(self, tree: str) -> AdmittedIndex:
        found = self.admitted.get(tree)
        if found is None:
            found = self.admitted[tree] = AdmittedIndex()
        return found

    # --- the record of preemptions ------------------------------------------------------------

    def attempt_of(self, event: Event) -> int | None:
        """For a preemption request: the attempt of the gang it asks for, if the gang is admitted."""
        if not isinstance(event, PreemptionRequested):
            return None
        gang = self.admission.runtime(event.tree).gangs.get(event.gang)
        return gang.attempt if gang is not None and gang.state == ADMITTED else None

    def _track(self, event: Event, kind: type[Event], seq: int, attempt: int | None) -> None:
        """Record what `event` (of class `kind`) admitted or asked to preempt."""
        if kind is GangAdmitted:
            event = cast(GangAdmitted, event)
            tree = event.tree  # (read once: of a cycle's own model, a pydantic attribute read is slow)
            gang = self.admission.runtime(tree).gangs.get(event.gang)
            if gang is not None and gang.state == ADMITTED:
                self._admitted(tree).add(gang)
        elif isinstance(event, PreemptionRequested):
            record = PreemptionRecord(seq, self.now, event.tree, event.pool, event.gang, list(event.tasks),
                                      event.reason, attempt if attempt is not None else 0)
            self.records.append(record)
            if attempt is None:
                self._complete(record, "stale")
            else:
                previous = self.open.pop((event.tree, event.gang), None)
                if previous is not None:
                    self._complete(previous, "superseded")
                self.open[(event.tree, event.gang)] = record

    def _settle(self, events: list[Event]) -> None:
        """Close the open records of the gangs these events (an input and what its fold announced:
        timers fire there) are about, if their tasks no longer hold what was asked for."""
        for event in events:
            tree, gang_id = getattr(event, "tree", None), getattr(event, "gang", None)
            if not isinstance(tree, str) or not isinstance(gang_id, str):
                continue
            key = (tree, gang_id)
            record = self.open.get(key)
            if record is None:
                continue
            gang = self.admission.runtime(record.tree).gangs.get(record.gang)
            if gang is None:
                outcome = "stale"
            elif gang.state == ADMITTED and gang.attempt == record.attempt:
                tasks = [gang_task for gang_task in gang.tasks if gang_task.id in record.tasks]
                if not tasks or any(t.state not in TERMINAL for t in tasks):
                    continue
                outcome = "preempted" if any(t.state == "preempted" for t in tasks) else "finished"
            elif gang.state == PENDING and gang.attempt == record.attempt and record.seq == self.admission.last_seq:
                outcome = "requeued"  # read just now, nothing had started: straight back to pending
            elif isinstance(event, GangRequeued) and event.cause == "placement_timeout":
                outcome = "requeued"  # its placement timed out first (a fold that keeps unplaced tasks)
            elif gang.state == DONE:
                outcome = "finished"
            elif gang.state == CANCELLED:
                outcome = "cancelled"
            else:
                outcome = "preempted"
            del self.open[key]
            self._complete(record, outcome)

    def _complete(self, record: PreemptionRecord, outcome: str) -> None:
        record.state, record.outcome, record.completed_at = "completed", outcome, self.now
        if len(self.records) > 2 * KEEP_FINISHED + len(self.open):  # trim now and then: amortised O(1)
            done = sum(r.state == "completed" for r in self.records)
            extra = done - KEEP_FINISHED
            kept: list[PreemptionRecord] = []
            for r in self.records:
                if extra > 0 and r.state == "completed":
                    extra -= 1
                    continue
                kept.append(r)
            self.records = kept

    def preemptions(self, *, tree: str | None = None, pool: str | None = None,
                    state: str | None = None) -> list[PreemptionRecord]:
        """The preemptions read from the log, oldest first; `pool` matches the pool or any pool
        under it."""
        def wanted(r: PreemptionRecord) -> bool:
            return ((tree is None or r.tree == tree) and (state is None or r.state == state)
                    and (pool is None or pool == "/" or r.pool == pool or r.pool.startswith(pool.rstrip("/") + "/")))
        return [r for r in self.records if wanted(r)]

    def starvation(self, *, tree: str | None = None, pool: str | None = None) -> list[dict[str, Any]]:
        """Every pool's starvation status as the last pass decided it, by tree and path."""
        out: list[dict[str, Any]] = []
        for name in sorted(self.memory):
            if tree is not None and name != tree:
                continue
            for path, status in sorted(self.memory[name].starvation.items()):
                if pool is None or pool == "/" or path == pool or path.startswith(pool.rstrip("/") + "/"):
                    out.append({"tree": name, "pool": path, "status": status.status, "since": status.since,
                                "below_since": status.below_since})
        return out
