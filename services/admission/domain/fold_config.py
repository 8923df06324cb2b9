"""The fold of configuration and ticks: pool and tree options (a pool's queues may take a new
order), hosts and deleted pools (every tree has something to decide again), and ticks (the trees
whose admission cycle is due)."""

from __future__ import annotations

from events import ClockTicked, Event, PoolConfigChanged, TreeConfigured
from services.admission.domain.fold_data import FoldData
from services.admission.domain.outcomes import Outcome
from services.admission.domain.queue_book import rebuild_queues_under
from services.tree.domain import paths


def on_pool_changed(state: FoldData, event: Event, seq: int, out: list[Outcome]) -> None:
    assert isinstance(event, PoolConfigChanged)
    rt = state.runtime(event.tree)
    rt.dirty = True
    rebuild_queues_under(state, rt, paths.normalize(event.path))


def on_tree_configured(state: FoldData, event: Event, seq: int, out: list[Outcome]) -> None:
    """New tree options (presets among them): every queue of the tree may have a new order."""
    assert isinstance(event, TreeConfigured)
    on_config(state, event, seq, out)
    rt = state.trees.get(event.tree)
    if rt is not None:
        rt.cycle_gangs = event.options.cycle_gangs
        rebuild_queues_under(state, rt, paths.ROOT)


def on_config(state: FoldData, event: Event, seq: int, out: list[Outcome]) -> None:
    """Hosts came or went, a pool was deleted (or a tree configured): every tree may decide
    otherwise (`dirty`: the clock ticks for it)."""
    for rt in state.trees.values():
        rt.dirty = True


def trees_ticked(state: FoldData, tree: str | None) -> list[str]:
    """The trees a tick naming `tree` starts a cycle in: that one; or, for a tick naming none,
    every tree that holds anything to decide: a pool below its root, or gangs. A tree of a root
    alone that never had a gang (the default tree, next to named ones) has nothing to entitle,
    admit or preempt: cycling it made three log messages per tick that every service read."""
    if tree:
        return [tree]
    names = sorted(set(state.config.tree_names()) | set(state.trees))
    return [name for name in names
            if len(state.config.tree(name).pools) > 1 or ((rt := state.trees.get(name)) is not None and rt.gangs)]


def on_tick(state: FoldData, event: Event, seq: int, out: list[Outcome]) -> None:
    """A tick starts an admission cycle in each tree it names (those holding anything, when it
    names none: `trees_ticked`)."""
    assert isinstance(event, ClockTicked)
    due = state.due
    for name in trees_ticked(state, event.tree):
        state.runtime(name)
        if name not in due:
            due.append(name)
