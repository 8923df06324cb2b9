"""One admission cycle of one tree, as the service and the scenario runner run it:

    1. compute every pool's entitlement from the state (`EntitlementsComputed`);
    2. run the admission cycle against those entitlements (`GangAdmitted`, `GangMovedToQueue`);
    3. close the cycle (`CycleCompleted`), so readers know every decision of it is in the log.

Pure: the outcomes are returned, the state is not changed (they apply when read back).
"""

from __future__ import annotations

from events import CycleCompleted
from services.admission.domain.cycle import decide_cycle
from services.admission.domain.entitle import compute_for
from services.admission.domain.state import SERVICE, AdmissionState, Outcome


def decide_tree(state: AdmissionState, tree: str, trigger_seq: int) -> list[Outcome]:
    computed = compute_for(state, tree)  # 1.
    out = [Outcome(computed, "entitlements")]
    out += decide_cycle(state, tree, {p.path: p for p in computed.pools})  # 2.
    out.append(Outcome(CycleCompleted(tree=tree, service=SERVICE, trigger_seq=trigger_seq,  # 3.
                                      decisions=len(out) - 1), "cycle"))
    return out
