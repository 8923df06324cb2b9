"""`AdmissionState`: gangs, tasks, queues and ledgers of every tree, folded from the log.

`apply(event, seq, time)` is the evolve function. It is pure and deterministic: time comes from
the events (it never goes back), and whenever it advances the timers due at or before the new
time fire first, in deadline order (ties by gang id), before the event itself is applied.

Effects and announcements. Inputs take effect where they stand in the log, and so do
preemption's decisions (`PreemptionRequested`). An admission cycle runs at the end of the
message that started it (its *trigger*: a tick, `fold_config.on_tick`, or an input message
after which a tree holds `cycle_gangs` gangs made pending since its last cycle), and its
decisions (`EntitlementsComputed`, `GangAdmitted`, `GangMovedToQueue`, then `CycleCompleted`,
whose reading marks the gangs of jobs waiting for a running-job slot, see `mark_slot_waiters`)
take effect *there*, at the trigger, before anything after it in the log, wherever they land:
admission applies them as it decides them (`services.admission.domain.decide.run_cycles`) and
a reader of its decisions applies them at the trigger too (`cycle_order.CycleOrder`: what
comes after a trigger waits until its cycle is read). So the next cycle never waits for the
previous one's decisions to come back. What the fold itself decides (a gang timed out,
requeued after a placement timeout, finished, an input refused) is applied at once and returned
as an `Outcome` for the service to publish; reading those back changes nothing.

Where the fold's pieces are: what it holds, `fold_data.py`; what it publishes, `outcomes.py`;
timers, `timers.py`; finished gangs forgotten, `retention.py`; the pools' queues,
`queue_book.py`; what a stopping gang gives back, `stopping.py`; the handlers by family of
events, `fold_gangs.py` (gang inputs), `fold_tasks.py` (task reports, preemption's requests),
`fold_decisions.py` (admission's own decisions), `fold_config.py` (configuration and ticks),
wired to their event types in the one table below. The names other packages import from here
(`SERVICE`, `Outcome`, `failed_cycle`, `is_forgotten`, `trees_ticked`) are those modules'.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from events import (
    ClockTicked,
    CycleCompleted,
    EntitlementsComputed,
    Event,
    GangAdmitted,
    GangCancelled,
    GangEnqueued,
    GangFinished,
    GangMovedToQueue,
    HostRegistered,
    HostRemoved,
    PoolConfigChanged,
    PoolDeleted,
    PreemptionRequested,
    TaskStateChanged,
    TreeConfigured,
    with_views,
)
from services.admission.domain.fold_config import on_config, on_pool_changed, on_tick, on_tree_configured, trees_ticked
from services.admission.domain.fold_data import FoldData
from services.admission.domain.fold_decisions import on_admitted, on_cycle, on_entitlements, on_moved
from services.admission.domain.fold_gangs import on_cancelled, on_enqueued
from services.admission.domain.fold_tasks import on_preemption, on_task
from services.admission.domain.outcomes import SERVICE, Outcome, failed_cycle
from services.admission.domain.retention import forget_due, is_forgotten
from services.admission.domain.timers import advance
from services.tree.domain.state import TreeState

__all__ = ["HANDLERS", "SERVICE", "AdmissionState", "Outcome", "failed_cycle", "is_forgotten", "trees_ticked"]


class AdmissionState(FoldData):
    """The fold's data (`FoldData`) and its evolve function."""

    __slots__ = ()

    def apply(self, event: Event, seq: int, time: float) -> list[Outcome]:
        """Fold one event read at log position `seq`, stamped `time` (seconds)."""
        out: list[Outcome] = []
        if time > self.now:
            if self.timers and self.timers[0][0] <= time:
                advance(self, time, seq, out)
            if self.forgets and self.forgets[0][0] <= time:
                forget_due(self, time)
            self.now = time
        if seq > self.last_seq:
            self.last_seq = seq
        kind = type(event)
        config = self.config
        if seq > config.last_seq:  # (all `TreeState.apply` does with the rest: most of the log)
            config.last_seq = seq
        fold = CONFIG_FOLDS.get(kind)
        if fold is not None:
            fold(config, event, seq)
        handler = HANDLERS.get(kind)
        if handler is not None:
            handler(self, event, seq, out)
        return out


Handler = Callable[[FoldData, Event, int, list[Outcome]], None]

# The one table that wires event types to their handlers.
HANDLERS: dict[type[Event], Handler] = with_views({
    GangEnqueued: on_enqueued,
    TaskStateChanged: on_task,
    GangCancelled: on_cancelled,
    GangAdmitted: on_admitted,
    GangMovedToQueue: on_moved,
    PreemptionRequested: on_preemption,
    EntitlementsComputed: on_entitlements,
    CycleCompleted: on_cycle,
    PoolConfigChanged: on_pool_changed,
    ClockTicked: on_tick,
    TreeConfigured: on_tree_configured,
    PoolDeleted: on_config,
    HostRegistered: on_config,
    HostRemoved: on_config,
})  # the views of gang events (events.views) as their models

# The types the trees' configuration folds (`TreeState.apply`), views too, and how: of any other
# event it only moves its `last_seq`, and asking it (`event_class`, a call) cost ~2% of a replay's
# child; a gang's events (one each per gang) go to the tree's own handler of their type. A test
# holds this to the tree's own list.
ConfigFold = Callable[[TreeState, Any, int], None]
CONFIG_FOLDS: dict[type[Event], ConfigFold] = with_views({
    GangEnqueued: TreeState.gang_enqueued, GangFinished: TreeState.gang_finished,
    **dict.fromkeys([TreeConfigured, PoolConfigChanged, PoolDeleted, HostRegistered, HostRemoved], TreeState.apply)})
CONFIG_FOLDED: frozenset[type[Event]] = frozenset(CONFIG_FOLDS)
