"""The fold of what stops tasks: an executor's task reports (`TaskStateChanged`) and
preemption's requests (`PreemptionRequested`, whole gangs). When every task of an admitted gang
has ended, the gang is done, or back to pending as a new attempt if any was preempted."""

from __future__ import annotations

from events import Event, GangRequeued, PreemptionRequested, TaskStateChanged
from services.admission.domain import rules
from services.admission.domain.fold_data import FoldData
from services.admission.domain.job_counts import job_done, ledger_of, stopped_running
from services.admission.domain.model import ADMITTED, DONE, RANK, TERMINAL, Gang, Task
from services.admission.domain.outcomes import Outcome, finished_outcome, rejected_outcome
from services.admission.domain.queue_book import enqueue
from services.admission.domain.retention import forgotten_reason, is_forgotten, retire
from services.admission.domain.runtime import TreeRuntime
from services.admission.domain.stopping import forget_specs


def on_task(state: FoldData, event: Event, seq: int, out: list[Outcome]) -> None:
    # (the model or its view, events.views: the same attributes; not `cast`, a call per report)
    report: TaskStateChanged = event  # type: ignore[assignment]
    rt = state.trees.get(report.tree) or state.runtime(report.tree)
    task = rt.tasks.get(report.task)
    gang = rt.gangs.get(task.gang) if task is not None else None
    new = report.state
    if gang is None or task is None or gang.id != report.gang:
        if task is None and report.gang not in rt.gangs and is_forgotten(state, rt, report.gang):
            out.append(rejected_outcome(rt, report, seq, "gang_forgotten",
                                        forgotten_reason(state, rt, report.gang, report.task), report.task))
            return
        _refuse(rt, task, gang, report, seq, out)
        return
    old = task.state
    if new == old:
        return
    # `rules.check_transition`'s refusals, asked in one test first (a report forward, of a live
    # task of an admitted gang: nearly every report); the rules name the refusal when not
    if gang.state != ADMITTED or old in TERMINAL or new == "pending" or (new in RANK and RANK[new] < RANK[old]):
        _refuse(rt, task, gang, report, seq, out)
        return
    rt.dirty = True
    if new == "running" and task.started_at is None:
        task.started_at = state.now
    if new not in TERMINAL:  # (then its gang, which holds this task, cannot have stopped)
        task.state = new
        return
    (rt.ledgers.get(gang.pool) or ledger_of(rt, gang.pool)).hold(gang, task.resources, -1.0)
    task.state = new
    for member in gang.tasks:
        if member.state not in TERMINAL:
            return
    _gang_stopped(state, rt, gang, out)


def _refuse(rt: TreeRuntime, task: Task | None, gang: Gang | None, report: TaskStateChanged, seq: int,
            out: list[Outcome]) -> None:
    refusal = rules.check_transition(task, gang, report)
    assert refusal is not None  # (the fast test and the rules agree: only a refused report comes here)
    out.append(rejected_outcome(rt, report, seq, refusal.rule, refusal.message, report.task))


def on_preemption(state: FoldData, event: Event, seq: int, out: list[Outcome]) -> None:
    assert isinstance(event, PreemptionRequested)
    rt = state.runtime(event.tree)
    gang = rt.gangs.get(event.gang)
    if gang is None or gang.state != ADMITTED:
        return
    rt.dirty = True
    ledger = ledger_of(rt, gang.pool)
    for task in gang.tasks:  # whole gangs: every live task, whichever the request names
        if task.state in TERMINAL or task.state == "pending":
            continue
        if task.state in ("ready", "placing"):  # nothing runs yet: given back at once
            ledger.hold(gang, task.resources, -1.0)
            task.state = "preempted"
        else:  # running (or placed, launching): released when the executor reports it stopped
            task.preemption_requested = True
    if all(t.state in TERMINAL for t in gang.tasks):
        _gang_stopped(state, rt, gang, out)


def _gang_stopped(state: FoldData, rt: TreeRuntime, gang: Gang, out: list[Outcome]) -> None:
    """Every task of an admitted gang ended: done, or (if preempted) back to pending as a new attempt."""
    for stopped in gang.tasks:
        if stopped.state == "preempted":
            break
    else:  # none preempted: done (most gangs)
        gang.state = DONE
        job_done(rt, gang)  # (`stopped_running` and `forget_job`'s count, in one walk)
        forget_specs(rt, gang)
        out.append(finished_outcome(rt, gang, "done"))
        retire(state, rt, gang)
        return
    stopped_running(rt, gang)
    for task in gang.tasks:
        task.state, task.started_at, task.preemption_requested = "pending", None, False
    gang.admitted_at, gang.head_rank, gang.slot_wait = None, 0, None
    enqueue(state, rt, gang)
    out.append(Outcome(GangRequeued(tree=rt.name, gang=gang.id, pool=gang.pool, cause="preempted",
                                    reason="its tasks were preempted"), f"requeued:{gang.id}:{gang.attempt}"))
