"""`TreeRuntime`: admission's view of one tree (its gangs, tasks, queues, ledgers and counts), the
value `AdmissionState` holds per tree and the rules, the cycle, explain and preemption read. Its
own module so that the rules (which `state.py` calls) read it without importing the state."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from events import PoolEntitlement, TreeOptions
from services.admission.domain.model import Gang, Ledger, Task
from services.admission.domain.queues import GangQueue
from services.tree.domain.used_ids import UsedIds


@dataclass(slots=True)
class TreeRuntime:
    """Admission's view of one tree."""

    name: str
    gangs: dict[str, Gang] = field(default_factory=dict)  # every gang, finished ones too, in the order they came
    # The unfinished gangs (waiting, pending, admitted), in the order they came: what a cycle looks
    # through. The finished stay in `gangs` (what comes for them later is refused by their state),
    # so a scan of `live` costs what is going on, not the tree's whole history.
    live: dict[str, Gang] = field(default_factory=dict)
    admitted: dict[str, dict[str, Gang]] = field(default_factory=dict)  # leaf -> its admitted gangs, by id
    made: int = 0  # gangs made so far (`Gang.number`)
    tasks: dict[str, Task] = field(default_factory=dict)
    queues: dict[str, dict[str, GangQueue]] = field(default_factory=dict)
    orders: dict[str, tuple[str, ...]] = field(default_factory=dict)  # pool -> fifo_sort its queues use
    ledgers: dict[str, Ledger] = field(default_factory=dict)
    running: dict[str, dict[str, int]] = field(default_factory=dict)  # pool -> job -> admitted gangs
    jobs: dict[str, dict[str, int]] = field(default_factory=dict)  # pool -> job -> unfinished gangs
    entitlements: Mapping[str, PoolEntitlement] = field(default_factory=dict)  # an `EntitlementMap` once folded
    entitlement_seq: int = 0
    requeues: int = 0
    slot_waiters: set[str] = field(default_factory=set)  # gangs marked with a `slot_wait` (some may be stale)
    dirty: bool = False  # inputs since the last cycle (the clock ticks for them)
    fresh: int = 0  # gangs made pending since the last cycle
    cycle_gangs: int = TreeOptions().cycle_gangs  # the tree's option (`fold_config.on_tree_configured`)
    # The task ids of the gangs forgotten after the tree's `gang_retention` (`retention.py`): they
    # stay used. (The gang ids stay in the tree's `seen_gangs`: a gang id seen there and not in
    # `gangs` is a forgotten gang's, and what comes for it is refused: `gang_forgotten`.)
    forgotten_tasks: UsedIds = field(default_factory=UsedIds)
