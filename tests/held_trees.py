"""The random-cut driver of the per-tree tests: a per-tree folder (admission's `HeldTreesFolder`,
preemption's `HeldTreesPreemption`) folds a recorded log in random batch cuts while the trees it
holds change at random, and whatever it decides is held to what the log records."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, cast

from events import CycleCompleted, Envelope, decode_all, event_class
from services.common.folding import Folder, fold_batch
from services.common.log import Stored


class PerTreeFolder(Folder, Protocol):
    """What the driver needs of a per-tree folder."""

    held: frozenset[str]
    decided: Counter[str]  # cycles or passes decided here, per tree
    read: Counter[str]  # and read from the log

    def waiting_trees(self) -> set[str]: ...

    def settled(self) -> bool: ...


def given_up(folder: PerTreeFolder) -> Counter[str]:
    """Passes a fold gave up waiting for and decided itself (preemption's `given_up`; admission has none)."""
    return cast("Counter[str]", getattr(folder, "given_up", Counter()))


def recorded(messages: list[Stored]) -> dict[str, Envelope]:
    """Every envelope of the log, by id."""
    return {e.id: e for stored in messages for e in decode_all(stored.data)}


def closes(messages: list[Stored], source: str) -> Counter[str]:
    """How many cycles (`source` admission) or passes (preemption) of each tree the log closes."""
    counts: Counter[str] = Counter()
    for envelope in recorded(messages).values():
        event = envelope.event
        if event_class(event) is CycleCompleted and envelope.source == source:
            assert isinstance(event, CycleCompleted)
            counts[event.tree] += 1
    return counts


@dataclass
class Cuts:
    """What one fold in random cuts did: its decisions, and how many times it took over a tree
    whose cycle or pass waited."""

    decisions: list[Envelope] = field(default_factory=list)
    taken_over: int = 0


def fold_in_random_cuts(folder: PerTreeFolder, messages: list[Stored], trees: Sequence[str], seed: int,
                        same: Callable[[Envelope, Envelope], bool],
                        take_over: Callable[[], list[Envelope]] | None = None) -> Cuts:
    """Fold `messages` into `folder` in cuts of 1 to 12 messages, the trees it holds drawn anew
    from `trees` before three cuts in ten. A tree it comes to hold while its cycle or pass waits
    (as if its holder died) is decided at once: by `take_over()` before the cut, or, without it,
    by the fold of the next message alone; those decisions must close it (`CycleCompleted`).
    Every decision must be in the log and `same` as the one recorded; at the end the folder must
    be settled, having decided or read each of the log's closes of its service at least once."""
    found = recorded(messages)
    rng = random.Random(seed)
    cuts = Cuts()
    folder.held = frozenset(rng.sample(trees, rng.randint(0, len(trees))))
    done = 0
    while done < len(messages):
        end = min(len(messages), done + rng.randint(1, 12))
        waiting = folder.waiting_trees()
        if rng.random() < 0.3:  # trees taken over (some while their cycle or pass waits) and given away
            folder.held = frozenset(rng.sample(trees, rng.randint(0, len(trees))))
        taking = waiting & folder.held
        made: list[Envelope] = []
        if taking:
            cuts.taken_over += 1
            if take_over is None:
                end = done + 1
            else:
                made += take_over()
        result = fold_batch(folder, messages[done:end], done)
        done = result.last_seq
        deciding = made if take_over is not None else result.decisions
        closed = {d.event.tree for d in deciding if isinstance(d.event, CycleCompleted)}
        assert taking <= closed, (seed, taking, closed)
        made += result.decisions
        for decision in made:
            assert decision.id in found, (seed, decision.event.type, decision.basis)
            assert same(decision, found[decision.id]), (seed, decision.id)
        cuts.decisions += made
    assert folder.settled(), seed
    for tree, count in closes(messages, folder.service).items():
        assert folder.decided[tree] + folder.read[tree] + given_up(folder)[tree] >= count, (seed, tree)
    return cuts
