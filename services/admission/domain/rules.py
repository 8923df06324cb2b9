"""Refusals of admission's inputs (DOMAIN §4, §5): each names the rule and the numbers.

A refused input changes nothing; the service publishes an `InputRejected` with the reason."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from events import GangEnqueued, TaskStateChanged
from services.admission.domain.model import ADMITTED, PENDING, RANK, TERMINAL, WAITING, Gang, Task
from services.admission.domain.vectors import TOLERANCE, total
from services.tree.domain import paths
from services.tree.domain.amounts import spell
from services.tree.domain.effective import effective_pool
from services.tree.domain.placement import place_gang
from services.tree.domain.state import TreeState

if TYPE_CHECKING:
    from services.admission.domain.state import TreeRuntime


@dataclass(frozen=True, slots=True)
class Refusal:
    rule: str
    message: str
    pool: str | None = None


def place(config: TreeState, event: GangEnqueued) -> str | None:
    """The pool the tree state gave this gang when its first members arrived (None: nowhere)."""
    record = config.tree(event.tree).unfinished.get(event.gang)
    return None if record is None else record.pool


def check_new_gang(config: TreeState, rt: TreeRuntime, event: GangEnqueued) -> Refusal | None:
    tree = config.tree(event.tree)
    pool_path = place(config, event)
    if pool_path is None:
        why = place_gang(tree, event.pool, event.user).reason or f"pool {event.pool} does not exist"
        return Refusal("pool_missing", f"gang {event.gang}: {why}")
    pool = tree.pool(pool_path)
    if pool is None:
        return Refusal("pool_missing", f"gang {event.gang}: pool {pool_path} does not exist", pool_path)
    if not pool.is_leaf:
        children = ", ".join(sorted(pool.children)[:3])
        return Refusal("pool_not_leaf", f"gang {event.gang}: pool {pool_path} is not a leaf pool "
                                        f"(it has children: {children}); only leaf pools take gangs", pool_path)
    kinds = set(tree.kinds)
    for spec in event.tasks:
        unknown = sorted(set(spec.resources) - kinds)
        if unknown:
            return Refusal("unknown_kind", f"gang {event.gang}: task {spec.id} asks for unknown resource kind "
                                           f"{unknown[0]} (tree {tree.name} has {', '.join(tree.kinds)})", pool_path)
    if len(event.tasks) > event.size:
        return Refusal("too_many_members", f"gang {event.gang}: {len(event.tasks)} members for a gang of size "
                                           f"{event.size}", pool_path)
    duplicate = _duplicate_task(rt, event)
    if duplicate is not None:
        return Refusal("duplicate_task", f"gang {event.gang}: task id {duplicate} is already used", pool_path)
    refusal = _above_limit(config, event, pool_path)
    if refusal is not None:
        return refusal
    return _over_max_jobs(config, rt, event, pool_path)


def _duplicate_task(rt: TreeRuntime, event: GangEnqueued) -> str | None:
    seen: set[str] = set()
    for spec in event.tasks:
        if spec.id in rt.tasks or spec.id in seen:
            return spec.id
        seen.add(spec.id)
    return None


def _above_limit(config: TreeState, event: GangEnqueued, pool_path: str) -> Refusal | None:
    view = effective_pool(config, event.tree, pool_path)
    if view is None:
        return None
    need = total(spec.resources for spec in event.tasks)
    for kind, amount in sorted(need.items()):
        limit = view.limit.get(kind, 0.0)
        if amount - limit >= TOLERANCE:
            return Refusal("above_limit", f"gang {event.gang}: needs {kind} {spell(amount)}, above the limit "
                                          f"{spell(limit)} of pool {pool_path}", pool_path)
    return None


def _over_max_jobs(config: TreeState, rt: TreeRuntime, event: GangEnqueued, pool_path: str) -> Refusal | None:
    for path in [pool_path, *paths.ancestors(pool_path)]:
        if path == paths.ROOT:
            break
        jobs = rt.jobs.get(path, {})
        if event.job in jobs:
            continue
        view = effective_pool(config, event.tree, path)
        if view is not None and view.max_jobs is not None and len(jobs) >= view.max_jobs:
            return Refusal("max_jobs", f"gang {event.gang}: job {event.job} would be job {len(jobs) + 1} in pool "
                                       f"{path}, above its max_jobs {view.max_jobs}", pool_path)
    return None


def check_more_members(config: TreeState, rt: TreeRuntime, gang: Gang, event: GangEnqueued) -> Refusal | None:
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
    tree = config.tree(event.tree)
    kinds = set(tree.kinds)
    for spec in event.tasks:
        unknown = sorted(set(spec.resources) - kinds)
        if unknown:
            return Refusal("unknown_kind", f"gang {gang.id}: task {spec.id} asks for unknown resource kind "
                                           f"{unknown[0]} (tree {tree.name} has {', '.join(tree.kinds)})", gang.pool)
    duplicate = _duplicate_task(rt, event)
    if duplicate is not None:
        return Refusal("duplicate_task", f"gang {gang.id}: task id {duplicate} is already used", gang.pool)
    return None


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
