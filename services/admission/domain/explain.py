"""Why a gang waits (DOMAIN §8), and what became of it: `explain(state, tree, gang_id)`.

Pure: computed from the admission state (gangs, queues, ledgers, running jobs) and the
entitlements of the tree's last cycle (`TreeRuntime.entitlements`). For a pending gang the
admission cycle is run again against the current numbers (`cycle.decide_cycle`, which changes
nothing) to learn what the next cycle would do, and `cycle.judge` is asked about the gang itself
with what the cycle would have admitted before reaching it:

- the check that fails and by how much ("entitlement: needs cpu 8, pool /ATG has 3.5 of 33.3
  left"), or that it fits now (the next cycle admits it);
- the gang ahead of it that stops its queue (head of line);
- every pool on its path whose running-job limit is full ("pool /ATG has 10 running jobs of 10");
- for a waiting gang, its members against its size and when it times out.

Finished gangs are explained from the state and from `History`, which a service keeps by
observing the events it folds and the decisions it makes (the reason of a refusal or of a
cancellation is in no state: only in those events).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import cast

from events import (
    Event,
    GangAdmitted,
    GangCancelled,
    GangFinished,
    GangMovedToQueue,
    GangRequeued,
    GangTimedOut,
    InputRejected,
    PoolEntitlement,
    PreemptionRequested,
    event_class,
)
from services.admission.domain.chains import pool_chain
from services.admission.domain.cycle import (
    Scratch,
    Verdict,
    admit,
    decide_cycle,
    in_order,
    judge,
    take_waiting_jobs,
)
from services.admission.domain.entitle import tree_input
from services.admission.domain.entitlement import compute_entitlements
from services.admission.domain.model import (
    ADMITTED,
    CANCELLED,
    CYCLE_ORDER,
    DONE,
    PENDING,
    PLACED_OR_LATER,
    REJECTED,
    TERMINAL,
    TIMED_OUT,
    UNKNOWN,
    WAITING,
    Gang,
)
from services.admission.domain.runtime import TreeRuntime
from services.admission.domain.state import AdmissionState, is_forgotten
from services.admission.domain.vectors import TOLERANCE, Vector, free, short_of
from services.tree.domain.amounts import spell
from services.tree.domain.effective import EffectivePool, capacity, effective_pools

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
                f"needs {_vector(self.resources)}, priority {self.priority}")

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


# --- what no state keeps: the history of a gang's decisions ------------------------------------


@dataclass(slots=True)
class GangNotes:
    """What happened to one gang that the admission state does not keep."""

    admitted_queue: str | None = None
    rejection: str | None = None  # why its first members were refused ("reason [rule]")
    refusal: str | None = None  # why members were last refused (the gang stands)
    cancel_reason: str | None = None
    cancelled_at: float | None = None
    requeue_reason: str | None = None
    requeued_at: float | None = None
    finished_at: float | None = None
    preempted_reason: str | None = None  # why preemption took it last (pool, numbers)
    preempted_at: float | None = None


# The events `History.observe` learns from (others need not be shown to it), and those of them
# whose notes keep the time they happened (the others may be shown with any time).
OBSERVED: frozenset[type[Event]] = frozenset({GangAdmitted, GangCancelled, GangRequeued, GangTimedOut, GangFinished,
                                              InputRejected, PreemptionRequested})
TIMED: frozenset[type[Event]] = frozenset({GangRequeued, GangTimedOut, GangFinished, PreemptionRequested})


@dataclass(slots=True)
class History:
    """Notes per (tree, gang), kept by observing every event folded and every decision made."""

    notes: dict[tuple[str, str], GangNotes] = field(default_factory=dict)
    admitted: dict[tuple[str, str], str] = field(default_factory=dict)
    """The queue each gang was last admitted from: kept apart from `notes`, since nearly every
    gang has one and few have any other note."""

    def get(self, tree: str, gang: str) -> GangNotes:
        key = (tree, gang)
        notes = self.notes.get(key)
        queue = self.admitted.get(key)
        if queue is None:
            return notes or GangNotes()
        return GangNotes(admitted_queue=queue) if notes is None else replace(notes, admitted_queue=queue)

    def _of(self, tree: str, gang: str) -> GangNotes:
        found = self.notes.get((tree, gang))
        if found is None:
            found = self.notes[(tree, gang)] = GangNotes()
        return found

    def forget(self, tree: str, gang: str) -> None:
        """The gang was forgotten (its tree's `gang_retention`): so are its notes."""
        self.notes.pop((tree, gang), None)
        self.admitted.pop((tree, gang), None)

    def observe(self, event: Event, time: float) -> None:
        """Note what `event` (stamped `time`, seconds) tells about a gang; other events are ignored."""
        if event_class(event) is GangAdmitted:  # the model (as decided), or a view of it (events.views)
            admitted = cast(GangAdmitted, event)
            self.admitted[(admitted.tree, admitted.gang)] = admitted.queue
        elif isinstance(event, GangCancelled):
            self._of(event.tree, event.gang).cancel_reason = event.reason
        elif isinstance(event, GangRequeued):
            notes = self._of(event.tree, event.gang)
            notes.requeue_reason, notes.requeued_at = f"{event.cause.replace('_', ' ')}: {event.reason}", time
        elif isinstance(event, GangTimedOut):
            self._of(event.tree, event.gang).finished_at = time
        elif isinstance(event, PreemptionRequested):
            notes = self._of(event.tree, event.gang)
            notes.preempted_reason, notes.preempted_at = f"pool {event.pool}: {event.reason}", time
        elif isinstance(event, GangFinished):
            notes = self._of(event.tree, event.gang)
            notes.finished_at = time
            if event.outcome == "cancelled":
                notes.cancelled_at = time
            elif event.outcome == "rejected" and notes.refusal is not None:
                notes.rejection, notes.refusal = notes.refusal, None  # the refusal of its first members
        elif (isinstance(event, InputRejected) and event.input_type == "GangEnqueued" and event.tree is not None
              and event.rule != "gang_forgotten"):  # (no notes again for a gang forgotten)
            self._of(event.tree, event.ref).refusal = f"{event.reason} [{event.rule}]"


# --- the explanation ----------------------------------------------------------------------------


def _preempted(notes: GangNotes) -> list[Finding]:
    """Why preemption took the gang, if it did: the pool and the numbers that made it necessary."""
    if notes.preempted_reason is None:
        return []
    return [Finding("preempted", f"taken by preemption {_at(notes.preempted_at)}({notes.preempted_reason})",
                    {"at": notes.preempted_at})]


def explain(state: AdmissionState, tree: str, gang_id: str, history: History | None = None) -> Explanation:
    """Why gang `gang_id` of `tree` is where it is, from the state (read only, never changed)."""
    rt = state.trees.get(tree)
    gang = rt.gangs.get(gang_id) if rt is not None else None
    if rt is None or gang is None:
        message = (f"no gang {gang_id} in tree {tree} (as of log position {state.last_seq}): never enqueued, "
                   f"or its first members have not been read yet")
        if rt is not None and is_forgotten(state, rt, gang_id):
            message = (f"gang {gang_id} of tree {tree} finished and was forgotten after the tree's gang_retention "
                       f"(as of log position {state.last_seq}); its history is in the log and in SQL (table gangs)")
        return Explanation(tree, gang_id, UNKNOWN, (Finding(UNKNOWN, message),), as_of=state.last_seq,
                           cycle_seq=rt.entitlement_seq if rt is not None else 0, now=state.now)
    notes = (history or History()).get(tree, gang_id)
    position: int | None = None
    length: int | None = None
    if gang.state == PENDING:
        findings, position, length = _pending(state, rt, gang, notes)
    else:
        findings = _EXPLAINERS.get(gang.state, _other)(state, rt, gang, notes)
    return Explanation(
        tree=tree, gang=gang.id, state=gang.state, findings=tuple(findings), pool=gang.pool,
        queue=gang.queue if gang.state == PENDING else None, position=position, queue_length=length,
        job=gang.job, user=gang.user, priority=gang.priority, size=gang.size, members=len(gang.tasks),
        attempt=gang.attempt, resources=dict(gang.resources), as_of=state.last_seq, cycle_seq=rt.entitlement_seq,
        now=state.now)


def _waiting(state: AdmissionState, rt: TreeRuntime, gang: Gang, notes: GangNotes) -> list[Finding]:
    deadline = gang.waiting_deadline
    members = len(gang.tasks)
    left = deadline - state.now
    when = f"in {spell(round(left, 1))} s" if left > 0 else "due now: the next event or tick times it out"
    missing = gang.size - members
    arrive = "arrives" if missing == 1 else "arrive"
    findings = [Finding("members", f"gang has {members} of {gang.size} members; times out at {clock_text(deadline)} "
                                   f"({when}) unless {_count(missing, 'more member')} {arrive}; until then it is "
                                   f"not admissible and not demand",
                        {"members": members, "size": gang.size, "deadline": deadline, "timeout": gang.timeout})]
    return findings + _refused(notes)


def _pending(state: AdmissionState, rt: TreeRuntime, gang: Gang,
             notes: GangNotes) -> tuple[list[Finding], int | None, int | None]:
    pools = effective_pools(state.config, rt.name)
    view = pools.get(gang.pool)
    queue_name = gang.queue or "pending"
    queues = rt.queues.get(gang.pool)
    if view is None or queues is None:
        return [Finding("pool_missing", f"pool {gang.pool} is not in tree {rt.name} any more: no cycle visits it",
                        {"pool": gang.pool})], None, None
    cap = pools["/"].limit if "/" in pools else {}
    order = list(in_order(rt, view, queues[queue_name].ordered(), cap))
    index = next((i for i, g in enumerate(order) if g.id == gang.id), len(order))
    position, length = index + 1, len(order)
    entitlement = rt.entitlements.get(gang.pool)
    preemption_on = state.config.tree(rt.name).options.preemption.enabled

    # What the next cycle would do, on the last cycle's entitlements and the current allocation.
    entitlements = dict(rt.entitlements)
    decided = [o.event for o in decide_cycle(state, rt.name, entitlements)]
    moved = {e.gang: e.queue for e in decided if isinstance(e, GangMovedToQueue)}

    # The cycle's scratch as it reaches this queue: the waiting jobs' gangs first (with the slots
    # kept for them), then whatever it admitted in the pools and queues before this one (in this
    # queue, the gangs ahead are taken in order by `_verdicts`).
    scratch = Scratch()
    take_waiting_jobs(rt, pools, entitlements, preemption_on, scratch, [])
    ours = (gang.pool, CYCLE_ORDER.index(queue_name))
    admitted_ids: set[str] = set()
    for event in decided:
        if not isinstance(event, GangAdmitted):
            continue
        admitted_ids.add(event.gang)
        other = rt.gangs.get(event.gang)
        if other is None or event.gang in scratch.admitted:
            continue
        key = (event.pool, CYCLE_ORDER.index(event.queue) if event.queue in CYCLE_ORDER else len(CYCLE_ORDER))
        if key < ours:
            admit(rt, other, event.queue, pools, scratch, [])

    findings: list[Finding] = []
    if gang.id in admitted_ids:
        findings.append(_fits(rt, gang))
    else:
        findings += _verdicts(state, rt, gang, view, entitlement, pools, preemption_on, scratch, order[:index],
                              admitted_ids, moved, queue_name, position, length)
    said = " ".join(f.message for f in findings)
    findings += [full for full in _full_pools(rt, gang, pools, scratch) if full.message not in said]
    if gang.slot_wait is not None:
        findings.append(Finding("slot_wait", f"job {gang.job} is in line for a running-job slot at pool "
                                             f"{gang.slot_wait}: jobs waiting for a slot are taken first, by arrival",
                                {"pool": gang.slot_wait}))
    if rt.entitlement_seq == 0:
        findings.append(Finding("no_cycle_yet", f"no admission cycle has run in tree {rt.name} yet"))
    if gang.attempt and notes.requeue_reason:
        findings.append(Finding("requeued", f"attempt {gang.attempt} ended: requeued "
                                            f"{_at(notes.requeued_at)}({notes.requeue_reason})",
                                {"attempt": gang.attempt}))
    findings += _preempted(notes)
    return findings + _refused(notes), position, length


def _verdicts(state: AdmissionState, rt: TreeRuntime, gang: Gang, view: EffectivePool,
              entitlement: PoolEntitlement | None, pools: dict[str, EffectivePool], preemption_on: bool,
              scratch: Scratch, ahead: list[Gang], admitted: set[str], moved: Mapping[str, str], queue_name: str,
              position: int, length: int) -> list[Finding]:
    """A pending gang the next cycle would not admit: the gang ahead that stops its queue, if
    any, and its own failed check, with the numbers. The gangs ahead are taken as the cycle
    takes them, in order: admitted, moved, skipped (held by a job limit), or stopping the queue."""
    blocker: tuple[Gang, Verdict] | None = None
    for other in ahead:
        if other.id in scratch.admitted or other.id in moved:
            continue
        if other.id in admitted:
            admit(rt, other, queue_name, pools, scratch, [])
            continue
        verdict = judge(rt, other, view, entitlement, pools, preemption_on, scratch)
        if verdict is None:  # fits on these numbers: taken as the cycle would take it
            admit(rt, other, queue_name, pools, scratch, [])
        elif verdict.movable:
            blocker = (other, verdict)
            break
    own = judge(rt, gang, view, entitlement, pools, preemption_on, scratch)
    if blocker is not None:
        other, verdict = blocker
        reason = _describe(state, rt, other, view, entitlement, pools, scratch, verdict)
        findings = [Finding("head_of_line", f"queue {queue_name} of {gang.pool}: behind gang {other.id} (head of "
                                            f"line), which does not fit: {reason.message}",
                            {"blocker": other.id, "queue": queue_name, "position": position,
                             "blocker_check": reason.check, "blocker_numbers": dict(reason.numbers)})]
        if own is None:
            findings.append(Finding("fits_alone", f"on its own it would fit: it waits for gang {other.id}",
                                    {"blocker": other.id}))
        elif own.check != "job_limit":
            mine = _describe(state, rt, gang, view, entitlement, pools, scratch, own)
            findings.append(Finding(mine.check, f"and on its own: {mine.message}", mine.numbers))
        return findings
    if own is None:
        return [_fits(rt, gang)]
    mine = _describe(state, rt, gang, view, entitlement, pools, scratch, own)
    if gang.id in moved:
        mine = Finding(mine.check, f"{mine.message}; the next cycle moves it to queue {moved[gang.id]}", mine.numbers)
    findings = [mine]
    behind = length - position
    if own.movable and gang.id not in moved and behind:
        waits = "waits" if behind == 1 else "wait"
        findings.append(Finding("head_of_line", f"it is the head of line of queue {queue_name} of {gang.pool}: "
                                                f"{_count(behind, 'gang')} behind it {waits} for it",
                                {"behind": behind, "queue": queue_name}))
    return findings


def _fits(rt: TreeRuntime, gang: Gang) -> Finding:
    if rt.entitlement_seq < gang.arrival:
        since = f" (at {rt.entitlement_seq})" if rt.entitlement_seq else ""
        why = f"it arrived at log position {gang.arrival}, after the last cycle{since}"
    else:
        why = "what held it back has freed since the last cycle"
    return Finding("fits", f"fits now: the next admission cycle admits it ({why})",
                   {"arrival": gang.arrival, "cycle_seq": rt.entitlement_seq})


def _describe(state: AdmissionState, rt: TreeRuntime, gang: Gang, view: EffectivePool,
              entitlement: PoolEntitlement | None, pools: dict[str, EffectivePool], scratch: Scratch,
              verdict: Verdict) -> Finding:
    """The failed check of `verdict`, with the numbers of the pool as the cycle sees them."""
    held = scratch.ledger(rt, view.path)
    need = gang.resources
    path = view.path
    if verdict.check == "entitlement":
        if entitlement is None:
            return Finding("entitlement", f"entitlement: none computed for pool {path} yet (no admission cycle "
                                          f"has run since it was created)", {"pool": path})
        if gang.revocable:
            return _shortage(state, rt, "entitlement", "slack entitlement", need, entitlement.slack_entitlement,
                             held.slack, lambda k, left, of: f"needs {k} {spell(need[k])}, pool {path} has "
                                                             f"{spell(left)} of {spell(of)} slack left")
        found = _shortage(state, rt, "entitlement", "entitlement", need, entitlement.non_slack_entitlement,
                          held.non_slack, lambda k, left, of: f"needs {k} {spell(need[k])}, pool {path} has "
                                                              f"{spell(left)} of {spell(of)} left")
        if state.config.tree(rt.name).options.policy == "hdrf":
            found = _used_up(state, rt, gang, pools, found)
        return found
    if verdict.check == "controller_limit":
        percent = view.controller_limit or 0.0
        cap = {k: v * percent / 100.0 for k, v in view.reservation.items()}
        return _shortage(state, rt, "controller_limit", "controller limit", need, cap, held.controller,
                         lambda k, left, of: f"needs {k} {spell(need[k])}, controller tasks of pool {path} may "
                                             f"hold {spell(of)} ({spell(percent)}% of reservation "
                                             f"{spell(view.reservation.get(k, 0.0))}), {spell(left)} left")
    if verdict.check == "reservation":
        return _shortage(state, rt, "reservation", "reservation", need, view.reservation, held.non_preemptible,
                         lambda k, left, of: f"non-preemptible work stays within it: needs {k} {spell(need[k])}, "
                                             f"pool {path} has {spell(left)} of its reservation {spell(of)} left")
    if verdict.check == "job_limit":
        full = _full_pools(rt, gang, pools, scratch)
        if full:
            return Finding("job_limit", f"{full[0].message}; job {gang.job} waits for a slot", full[0].numbers)
    return Finding(verdict.check, f"{verdict.check.replace('_', ' ')}: {verdict.detail}")


Say = Callable[[str, float, float], str]  # (kind, left, of) -> how one short kind reads


def _shortage(state: AdmissionState, rt: TreeRuntime, check: str, what: str, need: Vector,
              total: Mapping[str, float], used: Mapping[str, float], say: Say) -> Finding:
    """`what: <each kind short of room, as `say` puts it>`, with the numbers per kind."""
    room = free(total, used, need)
    have, _ = capacity(state.config, rt.name)
    parts: list[str] = []
    numbers: dict[str, object] = {}
    for kind in sorted(short_of(need, room)):
        left, of = room.get(kind, 0.0), total.get(kind, 0.0)
        text = say(kind, left, of)
        if have.get(kind, 0.0) <= 0:
            text += f" (tree {rt.name} has no {kind}: no host offers it)"
        parts.append(text)
        numbers[kind] = {"need": need[kind], "left": left, "of": of, "held": used.get(kind, 0.0),
                         "short": need[kind] - left}
    return Finding(check, f"{what}: {'; '.join(parts)}", numbers)


HOLDERS_NAMED = 5
"""How many holders of a used-up kind are named (the largest); the others are counted."""


def _used_up(state: AdmissionState, rt: TreeRuntime, gang: Gang, pools: dict[str, EffectivePool],
             found: Finding) -> Finding:
    """Under `hdrf` a pool's jobs stop growing only when a kind they need is used up (DOMAIN §3):
    which kinds stopped the gang's pool and where (the engine's `stops`: the tree's capacity, or the
    limit of a pool on the path), and who holds each there (that place's children, by the last
    cycle's entitlements, the largest first), added to the shortage. The stops come from computing
    the tree again on the state as it is now (they are not in the log's entitlement events)."""
    stops = compute_entitlements(tree_input(state, rt.name)).stops.get(gang.pool, ())
    ents = rt.entitlements
    parts: list[str] = []
    numbers = dict(found.numbers)
    for stop in stops:
        kind, place = stop.kind, stop.at
        if gang.resources.get(kind, 0.0) <= 0:
            continue
        below = [p for p in ents if p != place and p.rsplit("/", 1)[0] == ("" if place == "/" else place)]
        held = sorted(((ents[p].entitlement.get(kind, 0.0), p) for p in below), key=lambda e: (-e[0], e[1]))
        held = [(amount, p) for amount, p in held if amount >= TOLERANCE]
        named = ", ".join(f"{p} {spell(amount)}" for amount, p in held[:HOLDERS_NAMED])
        more = f" and {len(held) - HOLDERS_NAMED} more" if len(held) > HOLDERS_NAMED else ""
        limit = pools[place].limit.get(kind, 0.0) if place in pools else 0.0
        where = "" if place == "/" else f" at the limit of {place} ({spell(limit)})"
        parts.append(f"{kind} is used up{where}: {named}{more}")
        numbers[f"used_up_{kind}"] = {"at": place, "holders": {p: amount for amount, p in held}}
    if not parts:
        return found
    return Finding(found.check, f"{found.message}; {'; '.join(parts)}", numbers)


def _full_pools(rt: TreeRuntime, gang: Gang, pools: dict[str, EffectivePool], scratch: Scratch) -> list[Finding]:
    """Every pool on the gang's path whose running-job limit leaves its job no slot (slots kept
    for jobs waiting longer count as taken, as in the cycle's check)."""
    found: list[Finding] = []
    for path in pool_chain(gang.pool):
        running = scratch.jobs_running(rt, path)
        limit = pools[path].max_running_jobs if path in pools else None
        if limit is None or gang.job in running:
            continue
        kept = len(scratch.kept.get(path, set()) - {gang.job})
        if len(running) + kept >= limit:
            more = f" and {kept} slot(s) kept for jobs waiting longer" if kept else ""
            found.append(Finding("job_limit", f"pool {path} has {len(running)} running jobs of {limit}{more}",
                                 {"pool": path, "running": len(running), "limit": limit, "kept": kept}))
    return found


def _admitted(state: AdmissionState, rt: TreeRuntime, gang: Gang, notes: GangNotes) -> list[Finding]:
    queue = notes.admitted_queue or _likely_queue(state, rt, gang)
    findings = [Finding("admitted", f"admitted {_at(gang.admitted_at)}from queue {queue} of pool {gang.pool} "
                                    f"(attempt {gang.attempt})",
                        {"admitted_at": gang.admitted_at, "queue": queue, "attempt": gang.attempt})]
    live = [t for t in gang.tasks if t.state not in TERMINAL]
    placed = sum(t.state in PLACED_OR_LATER for t in live)
    findings.append(Finding("tasks", f"tasks: {_states(t.state for t in gang.tasks)}",
                            {"states": dict(Counter(t.state for t in gang.tasks))}))
    deadline = gang.placement_deadline
    if live and placed < len(live) and deadline is not None:
        findings.append(Finding("placement", f"{placed} of {len(live)} tasks placed; all must be placed by "
                                             f"{clock_text(deadline)} or the gang is requeued",
                                {"placed": placed, "tasks": len(live), "deadline": deadline}))
    asked = sum(t.preemption_requested for t in live)
    if asked:
        findings.append(Finding("preemption", f"preemption requested for {asked} of its tasks", {"tasks": asked}))
        findings += _preempted(notes)
    if gang.attempt > 1 and notes.requeue_reason:
        findings.append(Finding("requeued", f"attempt {gang.attempt - 1} ended: requeued "
                                            f"{_at(notes.requeued_at)}({notes.requeue_reason})",
                                {"attempt": gang.attempt - 1}))
    return findings


def _likely_queue(state: AdmissionState, rt: TreeRuntime, gang: Gang) -> str:
    """The queue it was admitted from, when no note says: only gangs of these kinds ever move."""
    preemption_on = state.config.tree(rt.name).options.preemption.enabled
    if (preemption_on and not gang.preemptible) or gang.controller or gang.revocable:
        return "pending or the one of its kind"
    return "pending"


def _done(state: AdmissionState, rt: TreeRuntime, gang: Gang, notes: GangNotes) -> list[Finding]:
    return [Finding("done", f"done {_at(notes.finished_at)}after attempt {gang.attempt}: every task ended "
                            f"({_states(t.state for t in gang.tasks)})",
                    {"states": dict(Counter(t.state for t in gang.tasks)), "attempt": gang.attempt})]


def _timed_out(state: AdmissionState, rt: TreeRuntime, gang: Gang, notes: GangNotes) -> list[Finding]:
    members, timeout = len(gang.tasks), spell(round(gang.timeout, 3))
    found = Finding("timed_out", f"timed out at {clock_text(gang.waiting_deadline)} with {members} of {gang.size} "
                                 f"members: the others did not arrive within {timeout} s",
                    {"members": members, "size": gang.size, "deadline": gang.waiting_deadline,
                     "timeout": gang.timeout})
    return [found, *_refused(notes)]


def _cancelled(state: AdmissionState, rt: TreeRuntime, gang: Gang, notes: GangNotes) -> list[Finding]:
    why = f" (reason: {notes.cancel_reason})" if notes.cancel_reason else ""
    if gang.attempt and any(t.state == "killed" for t in gang.tasks):
        what = f"while admitted (attempt {gang.attempt}): its tasks were killed"
    else:
        what = "before it was admitted"
    return [Finding("cancelled", f"cancelled {_at(notes.cancelled_at)}{what}{why}",
                    {"reason": notes.cancel_reason, "attempt": gang.attempt})]


def _rejected(state: AdmissionState, rt: TreeRuntime, gang: Gang, notes: GangNotes) -> list[Finding]:
    reason = notes.rejection or "its reason is in the log's InputRejected record for it"
    return [Finding("rejected", f"refused at enqueue: {reason}", {"reason": notes.rejection})]


def _other(state: AdmissionState, rt: TreeRuntime, gang: Gang, notes: GangNotes) -> list[Finding]:
    return [Finding(gang.state, f"gang is {gang.state}")]


def _refused(notes: GangNotes) -> list[Finding]:
    if notes.refusal is None:
        return []
    return [Finding("refused_members", f"members refused: {notes.refusal}", {"reason": notes.refusal})]


_EXPLAINERS = {
    WAITING: _waiting,
    ADMITTED: _admitted,
    DONE: _done,
    TIMED_OUT: _timed_out,
    CANCELLED: _cancelled,
    REJECTED: _rejected,
}


# --- listing gangs ------------------------------------------------------------------------------


def gang_rows(state: AdmissionState, tree: str | None = None, pool: str | None = None,
              states: Iterable[str] | None = None) -> list[dict[str, object]]:
    """One row per gang (in enqueue order, per tree), for `poolwise gangs`: `pool` matches that
    pool and every pool under it; `states` keeps only gangs in those states."""
    wanted = set(states) if states is not None else None
    below = None if pool is None else pool.rstrip("/") + "/"
    rows: list[dict[str, object]] = []
    for name in sorted(state.trees) if tree is None else [tree]:
        rt = state.trees.get(name)
        if rt is None:
            continue
        for gang in rt.gangs.values():
            if wanted is not None and gang.state not in wanted:
                continue
            if pool is not None and below is not None and gang.pool != pool and not gang.pool.startswith(below):
                continue
            rows.append(gang_row(rt, gang))
    return rows


def gang_row(rt: TreeRuntime, gang: Gang) -> dict[str, object]:
    """One gang as `poolwise gangs` and the dashboard show it (`position`: 1 at its queue's head)."""
    position: int | None = None
    if gang.state == PENDING and gang.queue is not None:
        queue = rt.queues.get(gang.pool, {}).get(gang.queue)
        at = queue.position(gang.id) if queue is not None else None
        position = None if at is None else at + 1
    return {
        "tree": rt.name, "gang": gang.id, "pool": gang.pool, "state": gang.state,
        "queue": gang.queue if gang.state == PENDING else None, "position": position,
        "members": len(gang.tasks), "size": gang.size, "resources": dict(gang.resources),
        "priority": gang.priority, "job": gang.job, "user": gang.user, "attempt": gang.attempt,
        "preemptible": gang.preemptible, "revocable": gang.revocable, "controller": gang.controller,
        "created_at": gang.created_at, "admitted_at": gang.admitted_at,
    }


# --- small helpers ------------------------------------------------------------------------------


def _vector(values: Mapping[str, float]) -> str:
    shown = {k: v for k, v in values.items() if v}
    return ",".join(f"{k}={spell(v)}" for k, v in sorted(shown.items())) or "nothing"


def _states(states: Iterable[str]) -> str:
    counts = Counter(states)
    return ", ".join(f"{n} {s}" for s, n in sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _at(seconds: float | None) -> str:
    return "" if seconds is None else f"at {clock_text(seconds)} "


def clock_text(seconds: float) -> str:
    """Log time (seconds since the epoch) as `YYYY-MM-DD HH:MM:SS UTC` (pure: no datetime)."""
    whole = int(seconds // 1)
    days, rest = divmod(whole, 86400)
    hour, rest = divmod(rest, 3600)
    minute, second = divmod(rest, 60)
    year, month, day = _civil(days)
    return f"{year:04d}-{month:02d}-{day:02d} {hour:02d}:{minute:02d}:{second:02d} UTC"


def _civil(days: int) -> tuple[int, int, int]:
    """(year, month, day) of a day count since 1970-01-01 (H. Hinnant's `civil_from_days`)."""
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (1 if month <= 2 else 0), month, day
