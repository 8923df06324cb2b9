"""The pure core of the tree service: pool trees, their validation, effective options, capacity.

Worked example
==============

Tree `default`, kinds `cpu` and `memory`, one host `h1` of cpu 100, memory 1000, and three
pools (the log: TreeConfigured, HostRegistered, then one PoolConfigChanged each)::

    /              capacity: cpu 100, memory 1000 (its reservation and limit)
    /org           reservation cpu 60, memory 600    limit cpu 100, memory 1000
    /org/a         reservation cpu 30, memory 300    limit cpu 50, memory 500
    /org/b         reservation cpu 20, memory 200    limit cpu 100   (memory: inherits 1000)

Effective options of /org/b: reservation cpu 20, memory 200; limit cpu 100, memory 1000
(inherited from /org); share 1 per kind; elastic; slack_limit 20; fifo by [priority, arrival];
no job limits (the tree sets no per-pool defaults). A top-level pool with no limit would read
the capacity (cpu 100, memory 1000) as its limit.

Commands, in order (`decide(state, command)`; an accepted one is appended and folded):

1. upsert /org/c reservation {cpu: 20}: 30 + 20 + 20 = 70 > 60. Refused,
   rule `children_reservation_exceeds_parent`:
   ``Aggregated child reservation 70 of kind `cpu` exceed parent `/org` reservation 60``
2. upsert /org/c reservation {cpu: 10.0005}: 30 + 20 + 10.0005 = 60.0005, over 60 by less than
   the tolerance 0.0009. Accepted: PoolConfigChanged(path=/org/c, created=True).
3. upsert /org/d reservation {cpu: 1}, limit {cpu: 0.5}. Refused, rule
   `reservation_exceeds_limit`: ``resource cpu, reservation 1 exceeds limit 0.5``
4. upsert /org/e limit {cpu: 200}. Refused, rule `limit_exceeds_parent`:
   ``resource cpu, limit 200 exceeds parent /org limit 100``
5. upsert /org/b reservation {cpu: 20, memory: 450} (the map is replaced whole): 300 + 450 > 600.
   Refused, rule `children_reservation_exceeds_parent`:
   ``Aggregated child reservation 750 of kind `memory` exceed parent `/org` reservation 600``
6. upsert /org reservation {cpu: 50, memory: 600}: the parent shrinks below its children.
   Refused: ``Aggregated child reservation 60.0005 of kind `cpu` exceed parent `/org` reservation 50``
7. upsert /org limit {cpu: 45, memory: 1000}. Refused, rule `reservation_exceeds_limit`:
   ``resource cpu, reservation 60 exceeds limit 45``
8. upsert /org/a limit {cpu: 35, memory: 500}. Accepted; the event carries the whole config
   after the merge: reservation cpu 30, memory 300 (kept), limit cpu 35, memory 500.
9. The same upsert again: Accepted with no event (nothing changed, nothing recorded).
10. upsert /lab reservation {cpu: 500}, limit {cpu: 800}: a top-level pool is held neither to
    the capacity nor to the root's limit. Accepted.
11. upsert /lab/x limit {cpu: 700}: within /lab's 800. Accepted.
12. upsert /lab limit {cpu: 600}: /lab's own reservation 500 fits, but its child would exceed it.
    Refused, rule `limit_below_children`:
    ``resource cpu, limit 600 of /lab is below limit 700 of child /lab/x``
13. delete /org. Refused, rule `delete_has_children`:
    ``pool /org has 3 child pool(s) (/org/a, /org/b, /org/c): delete them first``
14. upsert /org/b max_running_jobs 10, max_jobs 5. Refused, rule `job_limits_order`:
    ``max_running_jobs 10 exceeds max_jobs 5``
15. upsert /nope/x. Refused, rule `parent_missing`: ``parent /nope does not exist``

Modules
=======

- `state`: `TreeState`, folded from the log (`apply(event, seq)`).
- `tree`: the values it holds (`Tree`, `Pool`, `Host`).
- `effective`: resolved options (`EffectivePool`), declared limits, `capacity`.
- `presets`, `placement` (where a gang goes, ephemeral pools), `paths`, `amounts`.
- `validation`: one function per rule (`RULES`), `Refusal`.
- `decide`: `decide(state, command) -> Accepted | Refused`.
- `views`: plain-dict answers for the shell and the CLI.
"""

from services.tree.domain.amounts import TOLERANCE, exceeds, spell
from services.tree.domain.decide import Accepted, ConfigCommand, Decision, Refused, decide
from services.tree.domain.effective import (
    EffectivePool,
    capacity,
    declared_limits,
    effective_of,
    effective_pool,
    effective_pools,
    explicit_config,
    resolved,
    tree_hosts,
)
from services.tree.domain.placement import Placement, place_gang
from services.tree.domain.state import TreeState
from services.tree.domain.tree import DEFAULT_TREE, Host, Pool, Tree, UnfinishedGang
from services.tree.domain.validation.commands import validate_delete, validate_upsert
from services.tree.domain.validation.names import check_path
from services.tree.domain.validation.refusal import RULES, Refusal
from services.tree.domain.validation.tree_options import validate_tree_options
from services.tree.domain.views import list_hosts, list_pools, list_trees, pool_view

__all__ = [
    "DEFAULT_TREE",
    "RULES",
    "TOLERANCE",
    "Accepted",
    "ConfigCommand",
    "Decision",
    "EffectivePool",
    "Host",
    "Placement",
    "Pool",
    "Refusal",
    "Refused",
    "Tree",
    "TreeState",
    "UnfinishedGang",
    "capacity",
    "check_path",
    "decide",
    "declared_limits",
    "effective_of",
    "effective_pool",
    "effective_pools",
    "exceeds",
    "explicit_config",
    "list_hosts",
    "list_pools",
    "list_trees",
    "place_gang",
    "pool_view",
    "resolved",
    "spell",
    "tree_hosts",
    "validate_delete",
    "validate_tree_options",
    "validate_upsert",
]
