"""The events a cycle publishes for a large tree (`entitle.compute_cycle`): the pools it writes,
built from the numbers as published, and cut into parts (`EntitlementsComputed`, at most
`PART_POOLS` pools and removed paths and about `PART_BYTES` each)."""

from __future__ import annotations

from collections.abc import Callable

from events import EntitlementsComputed, PoolEntitlement
from events.decisions import ENTITLEMENT_PART_POOLS, LendingFactor, LentPool
from services.admission.domain.entitle_changes import BoolArray, Published, lent_part
from services.admission.domain.trusted import entitlements_computed, pool_entitlement
from services.entitlement.model import Lending

PART_POOLS = ENTITLEMENT_PART_POOLS  # pools (and removed paths) per event at most
PART_BYTES = 256 * 1024  # about this many bytes of pools per event at most (NATS: 1 MiB a message)


RowBuilder = Callable[[str, list[float], str | None], PoolEntitlement]


def row_builder(kinds: tuple[str, ...]) -> RowBuilder:
    """For the rows of the parts of a large tree's map (per kind: entitlement, non-slack, slack;
    then the fair, usage and demand shares): `pool_entitlement(path, dict(zip(kinds, row[:k])),
    dict(zip(kinds, row[k:2k])), dict(zip(kinds, row[2k:3k])), row[3k], row[3k + 1], row[3k + 2],
    dominant)`. Made once per tuple of kinds."""
    found = _BUILDERS.get(kinds)
    if found is None:
        k = len(kinds)
        fair = 3 * k

        def build(path: str, row: list[float], dominant: str | None) -> PoolEntitlement:
            return pool_entitlement(path, dict(zip(kinds, row, strict=False)),  # (zip stops at the kinds)
                                    dict(zip(kinds, row[k:2 * k], strict=True)),
                                    dict(zip(kinds, row[2 * k:fair], strict=True)),
                                    row[fair], row[fair + 1], row[fair + 2], dominant)

        found = _BUILDERS[kinds] = build
    return found


_BUILDERS: dict[tuple[str, ...], RowBuilder] = {}


def written_pools(published: Published, rows: list[int], paths: tuple[str, ...], kinds: tuple[str, ...],
                  build: RowBuilder, ok: BoolArray,
                  lending: Lending | None) -> tuple[list[PoolEntitlement], list[LentPool]]:
    """The pools of `rows` (in that order) as published, and the lent ones' parts."""
    if not rows:
        return [], []
    values = published.rounded[rows].tolist()
    dom = published.dominant[rows].tolist()
    pools = [build(paths[row], value, kinds[d] if d >= 0 else None) for row, value, d in zip(rows, values, dom,
                                                                                              strict=True)]
    lent = [] if lending is None else [lent_part(paths[row], row, kinds, lending) for row in rows if ok[row]]
    return pools, lent


def event_parts(tree: str, capacity: dict[str, float], slack_capacity: dict[str, float],
                pools: list[PoolEntitlement], lent: list[LentPool], factors: list[LendingFactor], removed: list[str],
                replace: bool, alerts: list[str], kinds: int) -> list[EntitlementsComputed]:
    """The events of one computation: the factors (in the first), the removed paths, then the
    pools (each lent one's part beside it), in parts of at most `PART_POOLS` pools and removed
    paths and about `PART_BYTES` (at least one part; `replace` and the alerts in the first)."""
    cuts: list[tuple[list[str], list[PoolEntitlement], list[LentPool]]] = []
    gone: list[str] = []
    kept: list[PoolEntitlement] = []
    kept_lent: list[LentPool] = []
    lent_of = {part.path: part for part in lent}
    count = 0
    size = sum(len(factor.group) + 40 + kinds * 40 for factor in factors)
    per_pool = 200 + 3 * kinds * 40  # bytes of a pool beside its path, generously
    for path in removed:
        if count == PART_POOLS or size + len(path) + 4 > PART_BYTES:
            cuts.append((gone, kept, kept_lent))
            gone, kept, kept_lent, count, size = [], [], [], 0, 0
        gone.append(path)
        count += 1
        size += len(path) + 4
    for pool in pools:
        part = lent_of.get(pool.path)
        cost = per_pool + len(pool.path) + (0 if part is None else 60 + 3 * kinds * 40 + len(pool.path))
        if count == PART_POOLS or (count and size + cost > PART_BYTES):
            cuts.append((gone, kept, kept_lent))
            gone, kept, kept_lent, count, size = [], [], [], 0, 0
        kept.append(pool)
        if part is not None:
            kept_lent.append(part)
        count += 1
        size += cost
    cuts.append((gone, kept, kept_lent))
    total = len(cuts)
    return [entitlements_computed(tree, capacity, slack_capacity, kept, alerts if part == 1 else [], gone,
                                  replace and part == 1, part, total, (factors or None) if part == 1 else None,
                                  kept_lent or None)
            for part, (gone, kept, kept_lent) in enumerate(cuts, start=1)]
