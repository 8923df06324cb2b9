"""Retention of finished gangs: a finished gang is kept `gang_retention` seconds of log time (the
tree's option), then forgotten; its ids stay used, and what comes for it later is refused
(`gang_forgotten`).

When they are forgotten is `FoldData.forgets`, a list of (deadline, gang, tree) kept sorted (so a
heap too): a deadline is the log's time (which never goes back) plus the tree's retention, so
nearly every one comes after the last and is appended, and the forgets due when the clock moves
are a prefix, taken in one slice. (A heap cost a `heappop` per gang, ~1% of a replay's child: the
clock moves a few hundred times in the 100k-gang history, each time past hundreds of deadlines.)
The order is the heap's: by deadline, ties by gang id."""

from __future__ import annotations

from bisect import bisect_right, insort
from operator import itemgetter

from services.admission.domain.fold_data import FoldData
from services.admission.domain.model import FINISHED, Gang
from services.admission.domain.runtime import TreeRuntime


def retire(state: FoldData, rt: TreeRuntime, gang: Gang) -> None:
    """The gang has finished: it is forgotten `gang_retention` seconds of log time from now (the
    tree's option as it is now; None: never)."""
    tree = state.config.trees.get(rt.name)  # (`config.tree`, without the call: once per gang)
    retention = (tree or state.config.tree(rt.name)).options.gang_retention
    if retention is not None:
        entry = (state.now + retention, gang.id, rt.name)
        forgets = state.forgets
        if not forgets or entry >= forgets[-1]:
            forgets.append(entry)
        else:  # (a tie with a later gang id, or a retention made shorter)
            insort(forgets, entry)


def forget_due(state: FoldData, time: float) -> None:
    """Forget the finished gangs whose retention ended at or before `time`, in deadline order
    (ties by gang id), after the timers due by then have fired."""
    forgets, trees = state.forgets, state.trees
    due = bisect_right(forgets, time, key=_DEADLINE)
    done = 0
    try:
        while done < due:
            _, gang_id, tree = forgets[done]
            done += 1
            rt = trees.get(tree)
            gang = rt.gangs.get(gang_id) if rt is not None else None
            if rt is not None and gang is not None and gang.state in FINISHED:
                _forget(state, rt, gang)
    finally:  # (those taken, and only those, as the heap's pops were: a raise stops there too)
        del forgets[:done]


_DEADLINE = itemgetter(0)


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
