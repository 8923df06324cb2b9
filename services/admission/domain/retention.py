"""Retention of finished gangs: a finished gang is kept `gang_retention` seconds of log time (the
tree's option), then forgotten; its ids stay used, and what comes for it later is refused
(`gang_forgotten`)."""

from __future__ import annotations

import heapq

from services.admission.domain.fold_data import FoldData
from services.admission.domain.model import FINISHED, Gang
from services.admission.domain.runtime import TreeRuntime


def retire(state: FoldData, rt: TreeRuntime, gang: Gang) -> None:
    """The gang has finished: it is forgotten `gang_retention` seconds of log time from now (the
    tree's option as it is now; None: never)."""
    tree = state.config.trees.get(rt.name)  # (`config.tree`, without the call: once per gang)
    retention = (tree or state.config.tree(rt.name)).options.gang_retention
    if retention is not None:
        heapq.heappush(state.forgets, (state.now + retention, gang.id, rt.name))


def forget_due(state: FoldData, time: float) -> None:
    """Forget the finished gangs whose retention ended at or before `time`, in deadline order
    (ties by gang id), after the timers due by then have fired."""
    forgets, trees, pop = state.forgets, state.trees, heapq.heappop  # (once per finished gang)
    while forgets and forgets[0][0] <= time:
        _, gang_id, tree = pop(forgets)
        rt = trees.get(tree)
        gang = rt.gangs.get(gang_id) if rt is not None else None
        if rt is not None and gang is not None and gang.state in FINISHED:
            _forget(state, rt, gang)


def _forget(state: FoldData, rt: TreeRuntime, gang: Gang) -> None:
    """Drop a finished gang: its tasks, members and notes. Its id and its tasks' ids stay used."""
    del rt.gangs[gang.id]
    tasks = rt.tasks
    for task in gang.tasks:
        if tasks.get(task.id) is task:
            del tasks[task.id]
        rt.forgotten_tasks.add(task.id)
    rt.slot_waiters.discard(gang.id)
    if state.on_forget is not None:
        state.on_forget(rt.name, gang.id)


def is_forgotten(state: FoldData, rt: TreeRuntime, gang: str) -> bool:
    """Whether `gang` was forgotten (its id was used, and the gang is gone)."""
    tree = state.config.trees.get(rt.name)
    return tree is not None and gang not in rt.gangs and gang in tree.seen_gangs


def forgotten_reason(state: FoldData, rt: TreeRuntime, gang: str, task: str | None = None) -> str:
    """The refusal of an input for a gang forgotten after its retention."""
    retention = state.config.tree(rt.name).options.gang_retention
    after = f"{retention:g} s of log time" if retention is not None else "its retention"
    what = f"task {task} of gang {gang}" if task is not None else f"gang {gang}"
    return (f"{what}: the gang finished and was forgotten {after} later (tree option gang_retention); "
            f"its ids are not used again")
