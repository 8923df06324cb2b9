"""Which pools a cycle writes for a large tree (`entitle.compute_cycle`): the engine's numbers
compared with those the previous parts published (`Published`, kept as matrices while the
tree's map is the one they made), or with the tree's map itself; which pools are lent (their
numbers computed by readers from their group's factor) and each one's own part of step 3."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from math import inf

import numpy as np
import numpy.typing as npt

from events import PoolEntitlement
from events.decisions import ENTITLEMENT_DIGITS, LentPool
from events.entitlement_map import CPU, EntitlementMap
from services.admission.domain.rounding import round_matrix
from services.admission.domain.trusted import lent_pool
from services.entitlement.model import FloatArray, IntArray, Lending, TreeEntitlements

BoolArray = npt.NDArray[np.bool_]


@dataclass(slots=True, eq=False)
class Published:
    """The numbers of the parts `compute_cycle` gave last, in the engine's row order: the raw
    matrices (entitlement, non-slack, slack per kind, the three shares), the rounded numbers as
    published (those four side by side; a lent pool's entitlement, non-slack entitlement and fair
    share as of its last write), the dominant kinds, which rows are lent and the `given` of each
    (as lent), and each sibling group's factor (`entitle_engine.sibling_groups` order; `(0, kinds)`
    under a policy that lends nothing). They are the tree's entitlement map while that map is the
    one those parts made (`EntitlementMap.last` is their last part)."""

    raw: tuple[FloatArray, ...]
    rounded: FloatArray
    dominant: IntArray
    lent: BoolArray
    given: FloatArray | None
    factors: FloatArray
    token: object = None


def lendable(result: TreeEntitlements, capacity: dict[str, float]) -> BoolArray:
    """The rows a reader may compute (see `compute_cycle`): none under a policy that does not
    lend, or when the capacity is not its rounded self; else every row but the root's with no
    slack but cpu's (and its step 3 terms finite) that step 3 gives something (a pool it gives
    nothing, say one at its limit, changes only when its own numbers do: written so, as in v2,
    it costs nothing more than its row)."""
    n = len(result.paths)
    lending = result.lending
    if lending is None or any(capacity.get(kind, 0.0) != amount for kind, amount in result.capacity.items()):
        return np.zeros(n, dtype=np.bool_)
    ok = np.ones(n, dtype=np.bool_)
    ok[0] = False
    slack = result.slack_matrix
    for column, kind in enumerate(result.kinds):
        if kind != CPU:
            ok &= slack[:, column] == 0.0
        ok &= np.isfinite(lending.given[:, column]) & np.isfinite(lending.per_share[:, column])
        ok &= np.isfinite(lending.share[:, column])
    return ok & rows_differ((result.entitlement_matrix,), (lending.given,))


def moved_rows(previous: Published, raw: tuple[FloatArray, ...], dominant: IntArray, ok: BoolArray,
               given: FloatArray | None, k: int) -> list[int]:
    """The rows to write, the map being what `previous` made (in engine order; its `rounded`
    updated): a pool lent now and before whose given moved, or whose other numbers (slack,
    usage and demand shares, dominant kind) differ once rounded; a pool lent now or before but
    not both; a pool lent neither time whose rounded numbers differ."""
    was = previous.lent
    before = previous.raw
    other = rows_differ((raw[2], raw[3][:, 1:]), (before[2], before[3][:, 1:])) | (dominant != previous.dominant)
    stay = was & ok
    must = was != ok
    if given is not None and previous.given is not None and stay.any():
        must |= stay & rows_differ((given,), (previous.given,))
    full = other | rows_differ((raw[0], raw[1], raw[3][:, :1]), (before[0], before[1], before[3][:, :1]))
    check = np.where(stay, other, full) & ~must
    look = np.flatnonzero(must | check)
    if not look.size:
        return []
    rounded = previous.rounded
    fresh = np.asarray(round_matrix(np.hstack([m[look] for m in raw]), ENTITLEMENT_DIGITS),
                       dtype=np.float64).reshape(look.size, rounded.shape[1])
    old = rounded[look]
    kept = np.r_[2 * k:3 * k, 3 * k + 1:3 * k + 3]  # slack, usage and demand shares: never computed by readers
    differs = np.where(stay[look], (fresh[:, kept] != old[:, kept]).any(axis=1), (fresh != old).any(axis=1))
    differs |= dominant[look] != previous.dominant[look]
    rounded[look] = fresh
    return look[must[look] | differs].tolist()  # type: ignore[no-any-return]


def differing_rows(current: Mapping[str, PoolEntitlement], order: list[int], paths: tuple[str, ...],
                   rounded: FloatArray, dominant: IntArray, ok: BoolArray, lending: Lending | None,
                   kinds: tuple[str, ...]) -> list[int]:
    """The rows (in `order`) whose pool the map `current` holds otherwise than the engine gives it:
    missing; lent now and not in the map, or with another given, share or limit, or other
    numbers that readers do not compute; not lent now but lent in the map, or with other numbers."""
    rows_of = current.rows if isinstance(current, EntitlementMap) else current
    lent_of = current.lent if isinstance(current, EntitlementMap) else {}
    k = len(kinds)
    out: list[int] = []
    values = rounded.tolist()
    dom = dominant.tolist()
    for row in order:
        path = paths[row]
        old = rows_of.get(path)
        if old is None:
            out.append(row)
            continue
        value = values[row]
        kind = kinds[dom[row]] if dom[row] >= 0 else None
        same_other = (dict(old.slack_entitlement) == dict(zip(kinds, value[2 * k:3 * k], strict=True))
                      and old.usage_share == value[3 * k + 1] and old.demand_share == value[3 * k + 2]
                      and old.dominant_kind == kind)
        was = lent_of.get(path)
        if ok[row]:
            assert lending is not None
            part = lent_part(path, row, kinds, lending)
            if (was is None or not same_other or dict(was.given) != part.given or dict(was.share) != part.share
                    or dict(was.limit) != part.limit):
                out.append(row)
        elif was is not None or not same_other or not _same_numbers(old, value, kinds):
            out.append(row)
    return out


def _same_numbers(old: PoolEntitlement, value: list[float], kinds: tuple[str, ...]) -> bool:
    k = len(kinds)
    return (dict(old.entitlement) == dict(zip(kinds, value[:k], strict=True))
            and dict(old.non_slack_entitlement) == dict(zip(kinds, value[k:2 * k], strict=True))
            and old.fair_share == value[3 * k])


def lent_part(path: str, row: int, kinds: tuple[str, ...], lending: Lending) -> LentPool:
    """A lent pool's own part of step 3 (its limit: the kinds it has a finite one of)."""
    limits = lending.limit[row].tolist()
    return lent_pool(path, dict(zip(kinds, lending.given[row].tolist(), strict=True)),
                     dict(zip(kinds, lending.share[row].tolist(), strict=True)),
                     {kind: value for kind, value in zip(kinds, limits, strict=True) if value != inf})


def same_shapes(now: tuple[FloatArray, ...], before: tuple[FloatArray, ...]) -> bool:
    return [m.shape for m in now] == [m.shape for m in before]


def rows_differ(now: tuple[FloatArray, ...], before: tuple[FloatArray, ...]) -> npt.NDArray[np.bool_]:
    """Rows in which any column of any matrix differs: column by column, since numpy's `any`
    along a short last axis costs several times more per row (~10 ms at 100k pools)."""
    out = np.zeros(now[0].shape[0], dtype=np.bool_)
    for a, b in zip(now, before, strict=True):
        for column in range(a.shape[1]):
            out |= a[:, column] != b[:, column]
    return out
