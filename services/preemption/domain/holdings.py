"""What a pass works on: each leaf pool's admitted gangs and what the pool holds once the
preemptions already asked for are counted as given back (DOMAIN §6)."""

from __future__ import annotations

from collections.abc import Iterable

from services.admission.domain.model import TERMINAL, Gang, Ledger, Task
from services.admission.domain.runtime import TreeRuntime
from services.admission.domain.vectors import Vector, add_into
from services.preemption.domain.admitted import AdmittedIndex


def live_tasks(gang: Gang) -> list[Task]:
    """The tasks of an admitted gang that hold resources (admitted, not ended)."""
    return [t for t in gang.tasks if t.state not in TERMINAL and t.state != "pending"]


def held_by(gang: Gang) -> Vector:
    """What the gang's live tasks hold: what preempting the whole gang gives back."""
    acc: Vector = {}
    for task in live_tasks(gang):
        add_into(acc, task.resources)
    return acc


def copy_ledger(ledger: Ledger) -> Ledger:
    return Ledger(dict(ledger.allocation), dict(ledger.non_preemptible), dict(ledger.controller), dict(ledger.slack),
                  dict(ledger.demand), dict(ledger.slack_demand))


def release(ledger: Ledger, gang: Gang) -> None:
    """Count every live task of `gang` as given back in `ledger`."""
    for task in live_tasks(gang):
        ledger.hold(gang, task.resources, -1.0)


class Holdings:
    """Per leaf pool: its admitted gangs (gang id order) and its ledger with every task that has a
    preemption request outstanding counted as given back. The pass releases what it takes here,
    so later decisions of the same pass see it as given back too. Built lazily, pool by pool: a
    pass that finds nothing over looks at no gang twice."""

    __slots__ = ("_gangs", "_index", "_ledgers", "_rt", "taken")

    def __init__(self, rt: TreeRuntime, admitted: AdmittedIndex | Iterable[Gang] | None = None) -> None:
        """`admitted`: the tree's admitted gangs, if the caller keeps them (an index by pool, or
        a superset of them); else every gang of the tree is looked at."""
        self._rt = rt
        self._index = admitted if isinstance(admitted, AdmittedIndex) else AdmittedIndex(
            rt.live.values() if admitted is None else admitted)
        self._gangs: dict[str, list[Gang]] = {}
        self._ledgers: dict[str, Ledger] = {}
        self.taken: set[str] = set()  # gang ids taken by this pass

    @classmethod
    def of(cls, rt: TreeRuntime, admitted: AdmittedIndex | Iterable[Gang] | None = None) -> Holdings:
        return cls(rt, admitted)

    def of_pool(self, pool: str) -> list[Gang]:
        """The pool's admitted gangs, by gang id (read from the index once per pass)."""
        found = self._gangs.get(pool)
        if found is None:
            found = self._gangs[pool] = sorted(self._index.of_pool(pool), key=lambda g: g.id)
        return found

    def ledger(self, pool: str) -> Ledger:
        found = self._ledgers.get(pool)
        if found is None:
            base = self._rt.ledgers.get(pool)
            found = self._ledgers[pool] = copy_ledger(base) if base is not None else Ledger()
            for gang in self.of_pool(pool):
                for task in live_tasks(gang):
                    if task.preemption_requested:
                        found.hold(gang, task.resources, -1.0)
        return found

    def take(self, gang: Gang) -> None:
        self.taken.add(gang.id)
        release(self.ledger(gang.pool), gang)
