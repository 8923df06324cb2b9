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

Finished gangs are explained from the state and from `History` (`explain_history`), which a
service keeps by observing the events it folds and the decisions it makes (the reason of a refusal
or of a cancellation is in no state: only in those events). A pending gang's reasons are worked out
in `explain_pending`; the answer's types are in `explanation`.
"""

from __future__ import annotations

from collections import Counter

from services.admission.domain.explain_history import GangNotes, History, preempted_findings, refused_findings
from services.admission.domain.explain_pending import pending_findings
from services.admission.domain.explain_text import at_text, clock_text, count_text, states_text
from services.admission.domain.explanation import Explanation, Finding
from services.admission.domain.model import (
    ADMITTED,
    CANCELLED,
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
from services.tree.domain.amounts import spell


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
        findings, position, length = pending_findings(state, rt, gang, notes)
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
                                   f"({when}) unless {count_text(missing, 'more member')} {arrive}; until then it is "
                                   f"not admissible and not demand",
                        {"members": members, "size": gang.size, "deadline": deadline, "timeout": gang.timeout})]
    return findings + refused_findings(notes)


def _admitted(state: AdmissionState, rt: TreeRuntime, gang: Gang, notes: GangNotes) -> list[Finding]:
    queue = notes.admitted_queue or _likely_queue(state, rt, gang)
    findings = [Finding("admitted", f"admitted {at_text(gang.admitted_at)}from queue {queue} of pool {gang.pool} "
                                    f"(attempt {gang.attempt})",
                        {"admitted_at": gang.admitted_at, "queue": queue, "attempt": gang.attempt})]
    live = [t for t in gang.tasks if t.state not in TERMINAL]
    placed = sum(t.state in PLACED_OR_LATER for t in live)
    findings.append(Finding("tasks", f"tasks: {states_text(t.state for t in gang.tasks)}",
                            {"states": dict(Counter(t.state for t in gang.tasks))}))
    deadline = gang.placement_deadline
    if live and placed < len(live) and deadline is not None:
        findings.append(Finding("placement", f"{placed} of {len(live)} tasks placed; all must be placed by "
                                             f"{clock_text(deadline)} or the gang is requeued",
                                {"placed": placed, "tasks": len(live), "deadline": deadline}))
    asked = sum(t.preemption_requested for t in live)
    if asked:
        findings.append(Finding("preemption", f"preemption requested for {asked} of its tasks", {"tasks": asked}))
        findings += preempted_findings(notes)
    if gang.attempt > 1 and notes.requeue_reason:
        findings.append(Finding("requeued", f"attempt {gang.attempt - 1} ended: requeued "
                                            f"{at_text(notes.requeued_at)}({notes.requeue_reason})",
                                {"attempt": gang.attempt - 1}))
    return findings


def _likely_queue(state: AdmissionState, rt: TreeRuntime, gang: Gang) -> str:
    """The queue it was admitted from, when no note says: only gangs of these kinds ever move."""
    preemption_on = state.config.tree(rt.name).options.preemption.enabled
    if (preemption_on and not gang.preemptible) or gang.controller or gang.revocable:
        return "pending or the one of its kind"
    return "pending"


def _done(state: AdmissionState, rt: TreeRuntime, gang: Gang, notes: GangNotes) -> list[Finding]:
    return [Finding("done", f"done {at_text(notes.finished_at)}after attempt {gang.attempt}: every task ended "
                            f"({states_text(t.state for t in gang.tasks)})",
                    {"states": dict(Counter(t.state for t in gang.tasks)), "attempt": gang.attempt})]


def _timed_out(state: AdmissionState, rt: TreeRuntime, gang: Gang, notes: GangNotes) -> list[Finding]:
    members, timeout = len(gang.tasks), spell(round(gang.timeout, 3))
    found = Finding("timed_out", f"timed out at {clock_text(gang.waiting_deadline)} with {members} of {gang.size} "
                                 f"members: the others did not arrive within {timeout} s",
                    {"members": members, "size": gang.size, "deadline": gang.waiting_deadline,
                     "timeout": gang.timeout})
    return [found, *refused_findings(notes)]


def _cancelled(state: AdmissionState, rt: TreeRuntime, gang: Gang, notes: GangNotes) -> list[Finding]:
    why = f" (reason: {notes.cancel_reason})" if notes.cancel_reason else ""
    if gang.attempt and any(t.state == "killed" for t in gang.tasks):
        what = f"while admitted (attempt {gang.attempt}): its tasks were killed"
    else:
        what = "before it was admitted"
    return [Finding("cancelled", f"cancelled {at_text(notes.cancelled_at)}{what}{why}",
                    {"reason": notes.cancel_reason, "attempt": gang.attempt})]


def _rejected(state: AdmissionState, rt: TreeRuntime, gang: Gang, notes: GangNotes) -> list[Finding]:
    reason = notes.rejection or "its reason is in the log's InputRejected record for it"
    return [Finding("rejected", f"refused at enqueue: {reason}", {"reason": notes.rejection})]


def _other(state: AdmissionState, rt: TreeRuntime, gang: Gang, notes: GangNotes) -> list[Finding]:
    return [Finding(gang.state, f"gang is {gang.state}")]


_EXPLAINERS = {
    WAITING: _waiting,
    ADMITTED: _admitted,
    DONE: _done,
    TIMED_OUT: _timed_out,
    CANCELLED: _cancelled,
    REJECTED: _rejected,
}
