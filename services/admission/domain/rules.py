"""Refusals of admission's inputs (DOMAIN §4, §5): each names the rule and the numbers.

A refused input changes nothing; the service publishes an `InputRejected` with the reason."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from events import GangEnqueued, TaskSpec, TaskStateChanged
from services.admission.domain.facts import pool_facts
from services.admission.domain.model import ADMITTED, PENDING, RANK, TERMINAL, WAITING, Gang, Task
from services.admission.domain.runtime import TreeRuntime
from services.admission.domain.vectors import TOLERANCE, Vector, total
from services.tree.domain.amounts import spell
from services.tree.domain.placement import place_gang
from services.tree.domain.state import TreeState


@dataclass(frozen=True, slots=True)
class Refusal:
    rule: str
    message: str
    pool: str | None = None


@dataclass(slots=True)
class NewGang:
    """First members that pass every check: the pool the gang goes to, what they need (the sum of
    their resources, in task order: the gang's `resources`) and their bytes (`members_bytes`)."""

    pool: str
    need: Vector
    wire_bytes: int = 0


# A gang is admitted in one `GangAdmitted` listing every member, and a log message holds at most
# the server's payload limit (1 MiB by default): its members may take at most this many bytes on
# the wire, which leaves room for the envelope and the rest of the event.
MAX_GANG_BYTES = 768 * 1024


KIND_BYTES = 28  # a resource kind's bytes beside its name: quotes, colon, comma and the longest float


def members_bytes(specs: Sequence[TaskSpec]) -> int:
    """An upper bound of the bytes these members take in JSON (`{"id":...,"resources":{...}}`, a
    comma each): ids of plain printable ASCII count a byte a character, any other id six (a
    `\\uXXXX` escape is the longest a character gets), a resource kind its name and 28 bytes (its
    quotes, colon, comma and the longest float)."""
    kinds = sum([len(kind) + KIND_BYTES for spec in specs for kind in spec.resources])
    return _members_bytes([spec.id for spec in specs], kinds)


def _members_bytes(ids: list[str], kind_bytes: int) -> int:
    """`members_bytes` of members with these ids whose resource kinds take `kind_bytes`."""
    joined = "".join(ids)
    plain = joined.isascii() and joined.isprintable() and '"' not in joined and "\\" not in joined
    return 26 * len(ids) + (len(joined) if plain else 6 * len(joined)) + kind_bytes


def _too_large(config: TreeState, event: GangEnqueued, wire_bytes: int, pool: str | None,
               members: int = 0) -> Refusal | None:
    """`gang_too_large`: a declared size above the tree's `max_tasks_per_gang`, or members that
    would take more than `MAX_GANG_BYTES` in the gang's `GangAdmitted`."""
    most = config.tree(event.tree).options.max_tasks_per_gang
    if event.size > most:
        return Refusal("gang_too_large", f"gang {event.gang}: size {event.size} is above the tree's "
                                         f"max_tasks_per_gang {most}", pool)
    if wire_bytes > MAX_GANG_BYTES:
        return Refusal("gang_too_large", f"gang {event.gang}: its {members + len(event.tasks)} members would take "
                                         f"{wire_bytes} bytes on the wire, above the {MAX_GANG_BYTES} one admission "
                                         f"message can hold", pool)
    return None


def check_new_gang(config: TreeState, rt: TreeRuntime, event: GangEnqueued) -> Refusal | NewGang:
    """The checks of a gang's first members, in order; the first that fails is the refusal.
    (The common case, every check passing, is asked first in one pass over the members; only
    when something fails are the checks run one by one, to name the first that fails.)"""
    passed = _passes(config, rt, event)
    return passed if passed is not None else _checks(config, rt, event)


def _passes(config: TreeState, rt: TreeRuntime, event: GangEnqueued) -> NewGang | None:
    """The gang when every check of `_checks` passes (the same numbers: `need` is added up in
    member order, as `total` adds, and the wire bytes are `members_bytes`'s, counted in the same
    walk over the members); None when one fails (or it cannot tell quickly)."""
    tree = config.trees.get(event.tree)
    record = tree.unfinished.get(event.gang) if tree is not None else None
    if tree is None or record is None:
        return None
    facts = pool_facts(config, event.tree, record.pool)
    specs = event.tasks
    if facts is None or not facts.leaf or len(specs) > event.size:
        return None
    kinds, tasks = facts.kinds, rt.tasks
    forgotten = rt.forgotten_tasks or None  # (asked once, not per member)
    need: Vector = {}
    get = need.get
    ids: list[str] = []
    kind_bytes = 0  # (`members_bytes`: a resource kind's name and `KIND_BYTES`)
    for spec in specs:
        resources = spec.resources
        task_id = spec.id
        if task_id in tasks or (forgotten is not None and task_id in forgotten):
            return None
        ids.append(task_id)
        for kind, amount in resources.items():
            if kind not in kinds:  # (`kinds.issuperset(resources)`, in this walk: it made a set of a dict's keys)
                return None
            kind_bytes += len(kind) + KIND_BYTES
            value = get(kind, 0.0) + amount
            need[kind] = 0.0 if -1e-9 < value < 1e-9 else value  # as `total` adds
    if len(ids) > 1 and len(set(ids)) < len(ids):
        return None
    limit = facts.limit
    for kind, amount in need.items():
        if amount - limit.get(kind, 0.0) >= TOLERANCE:
            return None
    if facts.max_jobs and _over_max_jobs(rt, event, record.pool, facts.max_jobs) is not None:
        return None
    wire_bytes = _members_bytes(ids, kind_bytes)
    if event.size > facts.max_tasks or wire_bytes > MAX_GANG_BYTES:
        return None
    return NewGang(record.pool, need, wire_bytes)


def _checks(config: TreeState, rt: TreeRuntime, event: GangEnqueued) -> Refusal | NewGang:
    """The checks one by one, in order: the first that fails is the refusal."""
    tree = config.tree(event.tree)
    record = tree.unfinished.get(event.gang)  # where the tree state placed it (None: nowhere)
    if record is None:
        why = place_gang(tree, event.pool, event.user).reason or f"pool {event.pool} does not exist"
        return Refusal("pool_missing", f"gang {event.gang}: {why}")
    pool_path = record.pool
    facts = pool_facts(config, event.tree, pool_path)
    if facts is None:
        return Refusal("pool_missing", f"gang {event.gang}: pool {pool_path} does not exist", pool_path)
    if not facts.leaf:
        children = ", ".join(facts.children[:3])
        return Refusal("pool_not_leaf", f"gang {event.gang}: pool {pool_path} is not a leaf pool "
                                        f"(it has children: {children}); only leaf pools take gangs", pool_path)
    specs = event.tasks
    kinds = facts.kinds
    for spec in specs:
        if not kinds.issuperset(spec.resources):
            unknown = sorted(set(spec.resources) - kinds)
            return Refusal("unknown_kind", f"gang {event.gang}: task {spec.id} asks for unknown resource kind "
                                           f"{unknown[0]} (tree {event.tree} has {facts.kinds_text})", pool_path)
    if len(specs) > event.size:
        return Refusal("too_many_members", f"gang {event.gang}: {len(specs)} members for a gang of size "
                                           f"{event.size}", pool_path)
    wire_bytes = members_bytes(specs)
    too_large = _too_large(config, event, wire_bytes, pool_path)
    if too_large is not None:
        return too_large
    ids = [spec.id for spec in specs]
    if not rt.tasks.keys().isdisjoint(ids) or not rt.forgotten_tasks.isdisjoint(ids) or len(set(ids)) < len(ids):
        return Refusal("duplicate_task", f"gang {event.gang}: task id {_used(rt, _duplicate_task(rt, ids))}",
                       pool_path)
    need = total([spec.resources for spec in specs])
    limit = facts.limit
    for kind, amount in need.items():
        if amount - limit.get(kind, 0.0) >= TOLERANCE:
            return _above_limit(event, pool_path, need, limit)
    if facts.max_jobs:
        refusal = _over_max_jobs(rt, event, pool_path, facts.max_jobs)
        if refusal is not None:
            return refusal
    return NewGang(pool_path, need, wire_bytes)


def _duplicate_task(rt: TreeRuntime, ids: list[str]) -> str | None:
    """The first of `ids` used already (in the tree, by a gang remembered or forgotten, or earlier
    in `ids`)."""
    seen: set[str] = set()
    for task_id in ids:
        if task_id in rt.tasks or task_id in rt.forgotten_tasks or task_id in seen:
            return task_id
        seen.add(task_id)
    return None


def _used(rt: TreeRuntime, task_id: str | None) -> str:
    """`<id> is already used`, and by which gang when it is remembered."""
    task = rt.tasks.get(task_id) if task_id is not None else None
    return f"{task_id} is already used" + (f" (a member of gang {task.gang})" if task is not None else "")


def _above_limit(event: GangEnqueued, pool_path: str, need: Vector, limit: Vector) -> Refusal:
    """The refusal naming the first kind, in kind order, where `need` is above `limit`."""
    kind = min(k for k, amount in need.items() if amount - limit.get(k, 0.0) >= TOLERANCE)
    return Refusal("above_limit", f"gang {event.gang}: needs {kind} {spell(need[kind])}, above the limit "
                                  f"{spell(limit.get(kind, 0.0))} of pool {pool_path}", pool_path)


def _over_max_jobs(rt: TreeRuntime, event: GangEnqueued, pool_path: str,
                   max_jobs: tuple[tuple[str, int], ...]) -> Refusal | None:
    """A job new to a pool (or an ancestor) with `max_jobs` set must not exceed it there."""
    for path, most in max_jobs:
        jobs = rt.jobs.get(path, {})
        if event.job not in jobs and len(jobs) >= most:
            return Refusal("max_jobs", f"gang {event.gang}: job {event.job} would be job {len(jobs) + 1} in pool "
                                       f"{path}, above its max_jobs {most}", pool_path)
    return None


def check_more_members(config: TreeState, rt: TreeRuntime, gang: Gang, event: GangEnqueued,
                       wire_bytes: int = 0) -> Refusal | None:
    """The checks of later members (`wire_bytes`: theirs, `members_bytes`), in order. Members
    that are the gang's already come first: a submission sent again (`duplicate_task`), or the
    same ids with other content (`member_conflict`), whatever state the gang is in."""
    again = _sent_again(rt, gang, event)
    if again is not None:
        return again
    if gang.state == PENDING:
        return Refusal("too_many_members", f"gang {gang.id} already has all {gang.size} members", gang.pool)
    if gang.state != WAITING:
        return Refusal("gang_closed", f"gang {gang.id} is {gang.state}: it takes no more members", gang.pool)
    if event.size != gang.size:
        return Refusal("size_mismatch", f"gang {gang.id}: size {event.size} disagrees with the first members' "
                                        f"size {gang.size}", gang.pool)
    if len(gang.tasks) + len(event.tasks) > gang.size:
        return Refusal("too_many_members", f"gang {gang.id}: {len(gang.tasks)} + {len(event.tasks)} members "
                                           f"exceed its size {gang.size}", gang.pool)
    too_large = _too_large(config, event, gang.wire_bytes + wire_bytes, gang.pool, len(gang.tasks))
    if too_large is not None:
        return too_large
    tree = config.tree(event.tree)
    kinds = set(tree.kinds)
    for spec in event.tasks:
        unknown = sorted(set(spec.resources) - kinds)
        if unknown:
            return Refusal("unknown_kind", f"gang {gang.id}: task {spec.id} asks for unknown resource kind "
                                           f"{unknown[0]} (tree {tree.name} has {', '.join(tree.kinds)})", gang.pool)
    duplicate = _duplicate_task(rt, [spec.id for spec in event.tasks])
    if duplicate is not None:
        return Refusal("duplicate_task", f"gang {gang.id}: task id {_used(rt, duplicate)}", gang.pool)
    return None


_GANG_FIELDS = ("size", "job", "user", "priority", "preemptible", "revocable", "controller")


def _sent_again(rt: TreeRuntime, gang: Gang, event: GangEnqueued) -> Refusal | None:
    """Members of `event` that are members of `gang` already: `member_conflict` when one has other
    resources, or the gang other options, than when it was enqueued; else `duplicate_task` (the
    same members sent again: nothing changes). None when none of them is the gang's."""
    tasks = rt.tasks
    first: str | None = None
    for spec in event.tasks:
        task = tasks.get(spec.id)
        if task is None or task.gang != gang.id:
            continue
        if first is None:
            first = spec.id
        if dict(spec.resources) != dict(task.resources):
            return Refusal("member_conflict", f"gang {gang.id}: member {spec.id} was enqueued before with other "
                                              f"content (resources {_amounts(task.resources)} then, "
                                              f"{_amounts(spec.resources)} now); a member is enqueued once: give "
                                              f"new member ids, or a new gang id", gang.pool)
    if first is None:
        return None
    for name in _GANG_FIELDS:
        then, now = getattr(gang, name), getattr(event, name)
        if then != now:
            return Refusal("member_conflict", f"gang {gang.id}: member {first} was enqueued before with other "
                                              f"content ({name} {then} then, {now} now); a member is enqueued "
                                              f"once: give new member ids, or a new gang id", gang.pool)
    return Refusal("duplicate_task", f"gang {gang.id}: member {first} was enqueued before (the same members sent "
                                     f"again: nothing changes)", gang.pool)


def _amounts(resources: Vector) -> str:
    return ", ".join(f"{kind} {spell(amount)}" for kind, amount in sorted(resources.items())) or "none"


def check_transition(task: Task | None, gang: Gang | None, event: TaskStateChanged) -> Refusal | None:
    """A task may move forward (skipping states is fine) once its gang is admitted (DOMAIN §5)."""
    if task is None or gang is None:
        return Refusal("unknown_task", f"task {event.task}: no such task in tree {event.tree}")
    if gang.id != event.gang:
        return Refusal("wrong_gang", f"task {event.task} belongs to gang {gang.id}, not {event.gang}", gang.pool)
    if task.state == event.state:
        return None
    if gang.state != ADMITTED:
        return Refusal("gang_not_admitted", f"task {task.id}: its gang {gang.id} is {gang.state}; a task leaves "
                                            f"pending only by admission", gang.pool)
    if task.state in TERMINAL:
        return Refusal("task_finished", f"task {task.id} is already {task.state}: {task.state} -> {event.state} "
                                        f"is not a transition", gang.pool)
    if event.state == "pending":
        return Refusal("backward_transition", f"task {task.id}: {task.state} -> pending; only admission and "
                                              f"requeues put a task back to pending", gang.pool)
    if event.state in RANK and RANK[event.state] < RANK[task.state]:
        return Refusal("backward_transition", f"task {task.id}: {task.state} -> {event.state} goes backward",
                       gang.pool)
    return None
