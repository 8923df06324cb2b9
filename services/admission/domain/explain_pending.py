"""Why a pending gang waits (DOMAIN §8): the admission cycle run again against the current
numbers (`cycle.decide_cycle`, which changes nothing) to learn what the next cycle would do, and
`cycle.judge` asked about the gang itself with what the cycle would have admitted before reaching
it: the check that fails and by how much, the gang ahead that stops its queue (head of line), and
every pool on its path whose running-job limit is full."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from events import GangAdmitted, GangMovedToQueue, PoolEntitlement
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
from services.admission.domain.entitle_engine import tree_input
from services.admission.domain.explain_history import GangNotes, preempted_findings, refused_findings
from services.admission.domain.explain_text import at_text, count_text
from services.admission.domain.explanation import Finding
from services.admission.domain.model import CYCLE_ORDER, Gang
from services.admission.domain.runtime import TreeRuntime
from services.admission.domain.state import AdmissionState
from services.admission.domain.vectors import TOLERANCE, Vector, free, short_of
from services.entitlement import compute_entitlements
from services.tree.domain.amounts import spell
from services.tree.domain.effective import EffectivePool, capacity, effective_pools


def pending_findings(state: AdmissionState, rt: TreeRuntime, gang: Gang,
                     notes: GangNotes) -> tuple[list[Finding], int | None, int | None]:
    """A pending gang's findings, its 1-based place in its queue, in the order the cycle takes it,
    and the queue's length."""
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
                                            f"{at_text(notes.requeued_at)}({notes.requeue_reason})",
                                {"attempt": gang.attempt}))
    findings += preempted_findings(notes)
    return findings + refused_findings(notes), position, length


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
                                                f"{count_text(behind, 'gang')} behind it {waits} for it",
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
    limit of a pool on the path), and what uses each up there, added to the shortage. The stops
    come from computing the tree again on the state as it is now (they are not in the log's
    entitlement events). What uses a kind up is said always (`_what_uses_up`)."""
    computed = compute_entitlements(tree_input(state, rt.name))
    stops = computed.stops.get(gang.pool, ())
    have, _ = capacity(state.config, rt.name)
    parts: list[str] = []
    numbers = dict(found.numbers)
    for stop in stops:
        kind, place = stop.kind, stop.at
        if gang.resources.get(kind, 0.0) <= 0:
            continue
        # the last cycle's entitlements, which the shortage above is measured against; when they
        # name nobody (no cycle since the demand came, or since the hosts changed), the
        # computation that found the stop
        held = _holders(rt.entitlements, place, kind) or _holders(computed, place, kind)
        limit = pools[place].limit.get(kind, 0.0) if place in pools else 0.0
        parts.append(f"{kind} is used up{_what_uses_up(rt, kind, place, held, limit, have.get(kind, 0.0))}")
        numbers[f"used_up_{kind}"] = {"at": place, "holders": {p: amount for amount, p in held}}
    if not parts:
        return found
    return Finding(found.check, f"{found.message}; {'; '.join(parts)}", numbers)


class _Entitled(Protocol):
    """A pool's entitlement: as the log has it (`events.PoolEntitlement`) or as computed."""

    @property
    def entitlement(self) -> Mapping[str, float]: ...


def _holders(ents: Mapping[str, _Entitled], place: str, kind: str) -> list[tuple[float, str]]:
    """The children of `place` entitled to some of `kind` in `ents`, the largest first."""
    parent = "" if place == "/" else place
    # rounded as the log rounds entitlements, so a computed one reads as the published one would
    held = [(round(ents[p].entitlement.get(kind, 0.0), 9), p) for p in ents
            if p != place and p.rsplit("/", 1)[0] == parent]
    return sorted(((amount, p) for amount, p in held if amount >= TOLERANCE), key=lambda e: (-e[0], e[1]))


def _what_uses_up(rt: TreeRuntime, kind: str, place: str, held: list[tuple[float, str]], limit: float,
                  have: float) -> str:
    """`: <the holders>` (the largest named, the others counted), with the limit when it is a
    pool's; where no child of the place is entitled to any (a leaf's own limit, a tree without
    the kind), what stops it instead: a person must never read a used-up kind with nobody
    named."""
    if held:
        named = ", ".join(f"{p} {spell(amount)}" for amount, p in held[:HOLDERS_NAMED])
        more = f" and {len(held) - HOLDERS_NAMED} more" if len(held) > HOLDERS_NAMED else ""
        where = "" if place == "/" else f" at the limit of {place} ({spell(limit)})"
        return f"{where}: {named}{more}"
    if place != "/":
        return f": {place}'s limit {kind} {spell(limit)} is reached"
    if have < TOLERANCE:
        return f": tree {rt.name} has no {kind}"
    return f": tree {rt.name}'s {kind} {spell(have)} is all given"


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
