"""One admission cycle of one tree, as the service and the scenario runner run it:

    1. compute every pool's entitlement from the state (`EntitlementsComputed`: the whole map, or
       for a large tree the pools that changed, in parts: `entitle.compute_cycle`);
    2. run the admission cycle against those entitlements (`GangAdmitted`, `GangMovedToQueue`);
    3. close the cycle (`CycleCompleted`), so readers know every decision of it is in the log.

`decide_tree` is pure: the outcomes are returned, the state is not changed. `run_cycles` runs
the cycles due at a trigger (the tick, or the input message, just folded) and applies each
cycle's decisions to the state as soon as they are made: they take effect at the trigger
(`state.py`), so the next cycle decides on them without waiting for them to be read back.
"""

from __future__ import annotations

from collections.abc import Callable

from events import CycleCompleted
from services.admission.domain.cycle import decide_cycle
from services.admission.domain.entitle import compute_cycle
from services.admission.domain.state import SERVICE, AdmissionState, Outcome, failed_cycle


def decide_tree(state: AdmissionState, tree: str, trigger_seq: int) -> list[Outcome]:
    computed = compute_cycle(state, tree)  # 1. (a large tree's in parts: what changed)
    out = [Outcome(event, "entitlements" if event.part == 1 else f"entitlements.{event.part}")
           for event in computed.events]
    out += decide_cycle(state, tree, computed.entitlements)  # 2. on the whole map
    out.append(Outcome(CycleCompleted(tree=tree, service=SERVICE, trigger_seq=trigger_seq,  # 3.
                                      decisions=len(out) - 1), "cycle"))
    return out


def run_cycles(state: AdmissionState, trigger_seq: int,
               applied: Callable[[Outcome, list[Outcome]], None] | None = None) -> list[Outcome]:
    """Decide the cycle of every tree due at `trigger_seq` (`state.take_due`), one tree after the
    other, each applied to the state (at the trigger's position and time) before the next is
    decided. Returns their decisions, in order. `applied(decision, announced)`: called as each
    is applied (a replay folds preemption's part of the same state there: services/tools/replay/shared.py)."""
    out: list[Outcome] = []
    for tree in state.take_due():
        try:
            decided = decide_tree(state, tree, trigger_seq)
        except Exception as error:  # one tree's broken cycle neither stops the others nor the service
            decided = failed_cycle(tree, SERVICE, trigger_seq, "ClockTicked",
                                   f"the admission cycle of tree {tree} at seq {trigger_seq}", error)
        now = state.now
        for outcome in decided:  # the cycle's own decisions: nothing to announce
            announced = state.apply(outcome.event, trigger_seq, now)
            if applied is not None:
                applied(outcome, announced)
        out += decided
    return out
