"""Entitlement: what each pool of a tree may hold now (DOMAIN §3). Pure code over plain values.

WORKED NUMERIC EXAMPLE
======================

A tree of 100 cpu and 1000 memory, 40 cpu of it offered by the hosts as revocable too::

    /project-root   reservation cpu 100, mem 1000   (every limit: cpu 100, mem 1000)
      adhoc         reservation cpu 80, mem 500, share 1    holds cpu 30, mem 200; waits for cpu 50
      batch         reservation none,            share 10   holds cpu 20
      backup        reservation cpu 20, mem 500, share 1    holds cpu 20; revocable gangs wait for
                                                            cpu 10, mem 150 (slack_limit 20%)

1. Requirement, bottom up: non-revocable allocation + demand (+ for every kind but cpu
   `min(slack_limit% * reservation, revocable allocation + revocable demand)`), capped at the limit::

       adhoc  cpu 30 + 50 = 80     mem 200
       batch  cpu 20               mem 0
       backup cpu 20               mem 0 + min(20% * 500, 150) = 100
       /project-root: the sums, capped at its limit: cpu 120 -> 100, mem 300

2. `per_resource`, top down, per kind. The root's entitlement is the capacity; /project-root
   gets all of it (cpu: its reservation, min(100, 100); memory: min(300, 1000) reserved, then
   the 700 nobody asked for, by share, up to its limit 1000). Among its children, cpu, E = 100:

       1. reservation   adhoc min(80, 80) = 80   batch min(20, 0) = 0   backup min(20, 20) = 20
       2. share         100 - 100 = 0 left: batch, which requires more than it reserved, gets 0
       3. unclaimed     nothing left
       -> adhoc 80, batch 0, backup 20: batch holds 20 and must give them back (preemption)

   memory, E = 1000:

       1. reservation   adhoc min(200, 500) = 200   batch 0   backup min(100, 500) = 100
       2. share         nobody requires more than its reservation
       3. unclaimed     700 by share 1:10:1: adhoc +58.33, batch +583.33, backup +58.33
       -> adhoc 258.33, batch 583.33, backup 158.33 (the single pass is capped at each limit;
          what a cap cuts off is not handed to the others)

   Had adhoc waited for nothing (requirement 30), the cpu would have been: reservation 30, 0, 20;
   share: batch water-filled up to its 20; unclaimed 30 by 1:10:1 -> adhoc 32.5, batch 45,
   backup 22.5: scenario `yt-project-pools` at step 10.

3. Slack. Slack cpu = the hosts' 40 revocable cpu (plus, with `allocation_slack`, each leaf's
   `max(0, reservation - allocation - demand)` cpu). Top down, water-filled by share over the
   revocable cpu requirement, the rest by share with no cap: /project-root gets 40; backup wants
   10 -> 10; the 30 left by 1:10:1 -> adhoc 2.5, batch 25, backup 10 + 2.5 = 12.5.
   Slack memory of backup = min(entitlement - non-revocable requirement, 20% of its reservation,
   revocable need) = min(158.33 - 0, 100, 150) = 100; its non-slack memory 58.33. Non-slack cpu
   is the cpu entitlement: revocable cpu never comes out of it.

4. `dominant` (DRF): shares are fractions of the capacity; each sibling gets
   `min(demand, limit, guarantee + weight * y)` with the largest common `y` that fits its parent.
   Pools guaranteed 60% and 20% of a (100 cpu, 1000 mem) cluster, both wanting all of it:
   0.6 + y + 0.2 + y = 1 -> y = 0.1 -> 70% and 30%, i.e. (70 cpu, 700 mem) and (30, 300).
   Two pools wanting (100 cpu, 2000 mem) and (200 cpu, 1000 mem) grow along (0.5, 1) and
   (1, 0.5): 1.5 y = 1 -> (33.3 cpu, 666.7 mem) and (66.7 cpu, 333.3 mem).

Shares reported for every pool: fair share (entitlement), usage share (allocation) and demand
share (requirement), each as its largest component, fractions of capacity; the dominant kind is
the largest component of the requirement.

API
===

- `compute_entitlements(TreeInput) -> TreeEntitlements`: one computation from plain values.
- `EntitlementEngine(TreeInput)`: the same, kept as arrays; after a batch of events call
  `set_usage(leaf_path, LeafUsage)` for the leaves that changed, `set_capacity(...)` if hosts
  changed, then `compute()`. The whole tree is recomputed each time (vectorized per depth:
  about 6 ms for 10k pools x 4 kinds under `per_resource`), so there is no partial state to get
  wrong. A configuration change builds a new engine.
- Inputs: `TreeInput`, `PoolInput`, `LeafUsage`, `JobDemand` (model.py). Outputs:
  `TreeEntitlements` (`path -> PoolEntitlement`, built lazily; raw matrices too), `Alert`.

Modules: `per_resource` (requirement and Peloton's three phases), `dominant` (exact
piecewise-linear vector fair share), `hdrf` (`dominant` where a job stops only when a kind it
needs is used up, with its worked GPU example: exact, in epochs of `dominant`-like functions that
can stop part-way up a jump, `hdrf_curves` and `hdrf_runs`, and event by event where those do not
apply), `slack`, `waterfill` (weighted max-min, scalar and segmented), `arrays` (the tree as flat
per-depth arrays), `compute` (the entry points).
"""

from services.entitlement.compute import EntitlementEngine, compute_entitlements
from services.entitlement.model import (
    Alert,
    JobDemand,
    LeafUsage,
    PoolEntitlement,
    PoolInput,
    TreeEntitlements,
    TreeInput,
)

__all__ = [
    "Alert",
    "EntitlementEngine",
    "JobDemand",
    "LeafUsage",
    "PoolEntitlement",
    "PoolInput",
    "TreeEntitlements",
    "TreeInput",
    "compute_entitlements",
]
