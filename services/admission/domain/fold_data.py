"""`FoldData`: what admission's fold holds (the trees' configuration and runtimes, the clock, the
trees due for a cycle, the timer heaps), and what its readers ask of it. The evolve function and
the handler table are `state.py`'s (`AdmissionState`, this class with `apply`); the handlers and
the pieces they share (`timers.py`, `retention.py`, `queue_book.py`, `stopping.py`) take this
class, so that none of them imports the table that wires them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields

from services.admission.domain.runtime import TreeRuntime
from services.tree.domain.state import TreeState


@dataclass(slots=True)
class FoldData:
    config: TreeState = field(default_factory=TreeState)
    trees: dict[str, TreeRuntime] = field(default_factory=dict)
    now: float = 0.0
    last_seq: int = 0
    due: list[str] = field(default_factory=list)  # trees whose cycle the last tick started
    full: list[str] = field(default_factory=list)  # trees that reached `cycle_gangs` since their last cycle
    # A reader's copy of the fold (preemption's): the same gangs, tasks, ledgers, counts and
    # marks of jobs waiting for a running-job slot (preemption inside a pool judges job limits as
    # the next cycle will), but queue order is kept only where preemption reads it (pools with
    # `preempt_lower_priority`; elsewhere `UnorderedQueue`s sort when asked).
    reader: bool = False
    # Called with (tree, gang) when a finished gang is forgotten (explain's notes follow).
    on_forget: Callable[[str, str], None] | None = None
    # The gang and placement timeouts (`timers.py`): (deadline, gang, tree, kind, attempt).
    timers: list[tuple[float, str, str, str, int]] = field(default_factory=list)
    # When finished gangs are forgotten (`retention.py`): (deadline, gang, tree), a sorted list
    # (a heap too). Apart from `timers`, since forgetting decides nothing: it waits for the next
    # event past its time (no tick for it).
    forgets: list[tuple[float, str, str]] = field(default_factory=list)

    # --- a snapshot's ---------------------------------------------------------------------------

    def __getstate__(self) -> tuple[object, ...]:
        """What a snapshot (or a copy) keeps: every field but `on_forget`, its holder's callback
        (explain's notes: `ExplainingFolder.load` binds it again). Pickled, the callback took the
        holder's notes into the state's pickle, and a reader of the state alone (the what-if,
        the replay) loaded them too."""
        return tuple([None if name == "on_forget" else getattr(self, name) for name in _STATE_FIELDS])

    def __setstate__(self, state: tuple[object, ...]) -> None:
        for name, value in zip(_STATE_FIELDS, state, strict=True):
            setattr(self, name, value)
        self.forgets.sort()  # (kept sorted, `retention.py`: a heap's order is not; sorted, it stays one)

    # --- what readers ask -----------------------------------------------------------------------

    def take_due(self) -> list[str]:
        """Trees whose admission cycle is due now, at the end of the message just folded (the
        tick; or the input message that left them `cycle_gangs` gangs made pending since their
        last cycle), in that order: the tick's trees by name, then the others as they filled."""
        due, self.due = self.due, []
        if self.full:
            due += [name for name in self.full if name not in due]
            self.full = []
        return due

    def runtime(self, tree: str) -> TreeRuntime:
        found = self.trees.get(tree)
        if found is None:
            found = self.trees[tree] = TreeRuntime(tree)
            found.cycle_gangs = self.config.tree(tree).options.cycle_gangs
        return found

    @property
    def timer_heap(self) -> list[tuple[float, str, str, str, int]]:
        """The gang and placement timeouts, a heap of (deadline, gang, tree, kind, attempt), as
        held: for a copier of the state (`services.tools.cli.dry_run.clone`); only the handlers change it."""
        return self.timers

    @property
    def forget_heap(self) -> list[tuple[float, str, str]]:
        """When finished gangs are forgotten, a heap of (deadline, gang, tree), as held: for a copier
        of the state; only the handlers change it."""
        return self.forgets

    def next_deadline(self) -> float | None:
        """When the earliest timer fires (the service's clock ticks then, so timers fire on a
        quiet log); stale entries may make this early, never late."""
        return self.timers[0][0] if self.timers else None

    def next_timer(self) -> tuple[float, str] | None:
        """`next_deadline` and the tree of that timer (an instance deciding per tree ticks for the
        timers of the trees it holds)."""
        return (self.timers[0][0], self.timers[0][2]) if self.timers else None


_STATE_FIELDS = tuple(f.name for f in fields(FoldData))  # (`__getstate__`'s order)
