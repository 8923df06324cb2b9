"""A slow, obvious reading of policy `dominant` (DOMAIN §3), the oracle of
`test_dominant_equivalence.py`, written from the spec without the engine's code (`dominant.py`,
`polylines.py`): plain Python floats and lists, no numpy.

The spec's rule, and how it is read here:

- Shares are fractions of the tree's capacity, per kind (a kind of no capacity is left out: see
  below). Jobs are the leaves; a pool's share is the sum of its children's (and of what a static
  pool holds: below).
- "Among siblings, each gets `min(demand, limit, guarantee + weight * y)`, with one `y` common to
  the siblings, the largest that fits in the parent's share." A child is a job or a pool whose
  share can only move along its own *path* (a job: along its demand, from 0 to the demand,
  "demand grows along its own direction"; a pool: the sum of its children's shares as its own
  `y` rises). So the child gets the furthest point of its path that is within its demand (the
  path ends there), its limit and `guarantee + weight * y` in every kind. A point `q` is within
  `guarantee + weight * y` exactly when `y >= key(q) = max over kinds (q - guarantee) / weight`;
  so the child's share as a function of `y` is its path read up to where `key` reaches `y`
  (`_as_child`). Weight 0: `guarantee + 0 * y`, the guarantee bounds the child.
- A pool's path is the sum of its children's shares at each of its own `y` (`_add`). Where a
  child's share jumps at one `y` (its path grows in a kind that does not raise its key), the sum
  jumps too; "the largest `y` that fits" then stops at the foot of the jump when its top does not
  fit (no `y` gives a point in between): a jump is taken whole or not at all.
- The root's share is the furthest point of its path within the capacity (share 1 of every kind).
  Then, top down, every child is read at the `y` (and foot or top) where its parent stopped.
- Guarantees: the reservation as a share of the capacity; one on `cpu` alone implies the other
  kinds in proportion to the parent's guarantee; capped at the limit; where siblings' guarantees
  add up to more than their parent's, each is scaled down in proportion (alert
  `guarantees_scaled_down`, DOMAIN §1's 0.0009 tolerance, in amounts).
- A leaf's jobs are its `LeafUsage.jobs`, else one job of its allocation plus demand (weight 1);
  plus one pseudo-job of its revocable work, `min(slack_limit% * reservation, revocable
  allocation + revocable demand)` in every kind but cpu (§3's requirement).
- Requirement (§3): a leaf's jobs' demands plus that revocable term, capped at its limit; a
  parent's, the sum of its children's claims (a `static` child claims `max(requirement,
  reservation)`), capped at its limit (the root's: the capacity).

Three rules the spec does not state for `dominant` and that the engine follows too, read here as
follows (the first is the spec's, in part; the other two, and the way the third is given, are
choices, written in `docs/policies.md`, "Pool options under `dominant` and `hdrf`"):

- **`static` (`reservation_type`)**: the spec's rule. DOMAIN §2 says a static reservation "is given
  whatever the demand", and §3 that a static child claims `max(requirement, reservation)`; it does
  not say how DRF gives it. Read here (a choice): a static pool has one more child, a constant,
  given before anything else: what its reservation exceeds its requirement by, per kind
  (`max(0, reservation - requirement)`; its requirement counts its static descendants' claims, so
  a reservation inside a static parent's is held once). Its share is that plus its children's; a
  pool with no demand gets exactly its reservation, one whose demand covers it is held nothing.
  The reservation is taken as written (one on cpu alone holds cpu only: the kinds it implies are
  a guarantee, not a hold) and no more than its guarantee (capped at the limit, scaled down with
  its siblings'), so the holds never exceed the capacity. What an internal static pool holds is
  none of its children's (there is no pass for unclaimed resources). When its own jobs are cut
  short, what they do not get of a reserved kind is not held for them (the hold is fixed by the
  requirement, not by what the jobs end with): a choice too.
- **A `share` given per kind** weighs the pool by its largest value (`weight`): a choice. The spec's
  `guarantee + weight * y` has one weight, and a pool's direction is one vector; DOMAIN §2 allows
  a per-kind share without saying what `dominant` does with it.
- **A kind of no capacity** is left out of the shares (its entitlement is 0, a demand of it stops
  nothing and does not bend a direction): a choice. "Shares are fractions of the tree's capacity"
  has no fraction of 0; the alternative, every job needing it stopped at once, is `hdrf`'s
  reading, not `dominant`'s.

Everything is exact but for rounding: the paths are piecewise linear (each piece a straight line
in both `y` and the share), so the oracle lists their vertices rather than bisecting, which would
nest one bisection per level of the tree and cost (iterations)^depth. It is quadratic in the
tree's size: do not optimise it.
"""

from __future__ import annotations

import bisect
import itertools
import math
from dataclasses import dataclass

from services.entitlement.arrays import TreeArrays
from services.entitlement.model import CPU, TOLERANCE

FITS = 1e-9
"""A jump's top fits a bound it passes by no more than this (shares: of the capacity): sums of
shares that should meet a bound exactly land a few ulps either side of it."""

ZERO_KEY = 1e-12
"""Rounding of a key that should be 0 (see `_key`)."""

FOOT, TOP = 0, 1


@dataclass(frozen=True)
class Vertex:
    """A point of a child's share as a function of its parent's `y`: at `y`, the share `vec`,
    which is the child's own path at its own level `z` (foot or top of a jump there: `side`)."""

    y: float
    vec: tuple[float, ...]
    z: float
    side: int


Path = list[Vertex]


def _key(q: tuple[float, ...], guarantee: list[float], weight: float) -> float:
    """`max over kinds (share - guarantee) / weight`, at least 0: the least `y` at which `q` is
    within `guarantee + weight * y` (a share within its guarantee fits at `y = 0`). A key within
    `ZERO_KEY` of 0 is 0: a point where a share meets its guarantee, computed along a line, lands
    a few ulps either side of it."""
    key = max([0.0, *((v - g) / weight for v, g in zip(q, guarantee, strict=True))])
    return 0.0 if key <= ZERO_KEY else key


def _within(q: tuple[float, ...], bound: list[float], slack: float = 0.0) -> bool:
    return all(v <= b + slack for v, b in zip(q, bound, strict=True))


def _read(path: Path, y: float, side: int) -> Vertex:
    """The child's share at its parent's `y`: on a jump at `y`, its foot or its top. At `y = 0`
    always the top: `guarantee + weight * 0` is the guarantee, and there is no smaller `y` whose
    share a foot would be (the vertices at 0 are where the key, clamped at 0, was below it)."""
    if y <= 0.0:
        side = TOP
    ys = [v.y for v in path]
    lo, hi = bisect.bisect_left(ys, y), bisect.bisect_right(ys, y)
    if lo < hi:  # vertices at exactly y
        return path[lo] if side == FOOT else path[hi - 1]
    if lo == 0:
        return path[0]
    if lo == len(path):
        return path[-1]
    a, b = path[lo - 1], path[lo]
    if a.z == b.z and a.side == b.side:  # waiting at a point (a jump's foot): that point
        return Vertex(y, a.vec, a.z, a.side)
    t = (y - a.y) / (b.y - a.y)
    vec = tuple(p + t * (q - p) for p, q in zip(a.vec, b.vec, strict=True))
    return Vertex(y, vec, a.z + t * (b.z - a.z), TOP)


def _add(children: list[Path], dims: int) -> Path:
    """A pool's own path: at each of its levels `z` where some child has a vertex, the sum of the
    children's shares (the sum of their feet, then of their tops where some child jumps);
    straight between those levels, as each child is."""
    levels = sorted({v.y for path in children for v in path})
    out: Path = []
    for z in levels:
        foot = [0.0] * dims
        top = [0.0] * dims
        for path in children:
            f, t = _read(path, z, FOOT), _read(path, z, TOP)
            foot = [a + b for a, b in zip(foot, f.vec, strict=True)]
            top = [a + b for a, b in zip(top, t.vec, strict=True)]
        out.append(Vertex(z, tuple(foot), z, FOOT))
        if top != foot:
            out.append(Vertex(z, tuple(top), z, TOP))
    return out or [Vertex(0.0, (0.0,) * dims, 0.0, TOP)]


def _as_child(own: Path, guarantee: list[float], limit: list[float], weight: float) -> Path:
    """`min(demand, limit, guarantee + weight * y)` as a function of the parent's `y`: the
    furthest point of the child's own path `own` within its limit whose key is at most `y`.

    Along a straight piece of `own`, each kind's `(share - guarantee) / weight` is a straight
    line, so the key (their maximum, and 0) is straight between the points where two of them
    cross: those points are vertices. Where the key stays level while the share grows, the share
    jumps at that `y`. A jump of `own` itself (one `z`, foot to top) is taken only whole: the
    child stays at the foot until the key of the top is reached. The limit cuts the path where it
    is first reached (a jump whose top passes it ends the path at its foot)."""
    if weight <= 0.0:  # guarantee + 0 * y: the guarantee bounds the child, whatever y
        bound = [min(lim, g) for lim, g in zip(limit, guarantee, strict=True)]
        last = _furthest(own, bound)
        return [Vertex(0.0, last.vec, last.z, last.side)]
    start = own[0]
    out: Path = [Vertex(_key(start.vec, guarantee, weight), start.vec, start.z, start.side)]

    def emit(vec: tuple[float, ...], z: float, side: int) -> None:
        y = max(out[-1].y, _key(vec, guarantee, weight))
        out.append(Vertex(y, vec, z, side))

    for a, b in itertools.pairwise(own):
        if a.z == b.z:  # a jump of the child's own path: whole or not at all
            if not _within(b.vec, limit, FITS):
                break
            top_key = _key(b.vec, guarantee, weight)
            if top_key > out[-1].y:
                out.append(Vertex(top_key, a.vec, a.z, a.side))  # waits at the foot
            emit(b.vec, b.z, b.side)
            continue
        step = [q - p for p, q in zip(a.vec, b.vec, strict=True)]
        reach = 1.0  # how far along a -> b the limit lets the child go
        for p, d, lim in zip(a.vec, step, limit, strict=True):
            if d > 0:
                reach = min(reach, max(0.0, (lim - p) / d))
        # each kind's line (share - guarantee) / weight along s in [0, 1], and the line 0
        lines = [((p - g) / weight, d / weight) for p, d, g in zip(a.vec, step, guarantee, strict=True)]
        lines.append((0.0, 0.0))
        crossings = set()
        for i, (c1, m1) in enumerate(lines):
            for c2, m2 in lines[i + 1 :]:
                if m1 != m2:
                    s = (c2 - c1) / (m1 - m2)
                    if 0.0 < s < reach:
                        crossings.add(s)
        for s in sorted(crossings):
            emit(tuple(p + s * d for p, d in zip(a.vec, step, strict=True)), a.z + s * (b.z - a.z), TOP)
        if reach < 1.0:
            emit(tuple(p + reach * d for p, d in zip(a.vec, step, strict=True)), a.z + reach * (b.z - a.z), TOP)
            break
        emit(b.vec, b.z, b.side)
    return out


def _furthest(own: Path, bound: list[float]) -> Vertex:
    """The furthest point of a path within `bound` (a jump whose top passes it: its foot)."""
    best = own[0]
    for a, b in itertools.pairwise(own):
        if a.z == b.z:
            if not _within(b.vec, bound, FITS):
                break
            best = b
            continue
        reach = 1.0
        for p, q, lim in zip(a.vec, b.vec, bound, strict=True):
            if q > p:
                reach = min(reach, max(0.0, (lim - p) / (q - p)))
        if reach < 1.0:
            vec = tuple(p + reach * (q - p) for p, q in zip(a.vec, b.vec, strict=True))
            return Vertex(a.z + reach * (b.z - a.z), vec, a.z + reach * (b.z - a.z), TOP)
        best = b
    return best


@dataclass
class _Job:
    demand: list[float]  # shares of the capacity, live kinds
    weight: float


def _positive(v: float | None) -> float:
    return float(v) if v is not None and v > 0 and not math.isnan(v) else 0.0


def _jobs(arr: TreeArrays, row: int) -> list[list[float]]:
    """A leaf's jobs' demands (amounts, every kind) and weights: its `jobs`, else one job of its
    allocation plus demand; plus its revocable work as a pseudo-job."""
    kinds = arr.kinds
    given = arr.jobs[row]
    if given is not None:
        jobs = [[_positive(j.demand.get(k)) for k in kinds] + [_positive(j.weight)] for j in given]
    else:
        own = [float(arr.allocation[row, k]) + float(arr.demand[row, k]) for k in range(len(kinds))]
        jobs = [[*own, 1.0]]
    revocable = [0.0] * len(kinds)
    for k, kind in enumerate(kinds):
        if kind != CPU:
            want = float(arr.revocable_allocation[row, k]) + float(arr.revocable_demand[row, k])
            revocable[k] = min(float(arr.slack_fraction[row]) * float(arr.reservation[row, k]), want)
    if any(v > 0 for v in revocable):
        jobs.append([*revocable, 1.0])
    return jobs


def _requirement(arr: TreeArrays) -> list[list[float]]:
    """DOMAIN §3: a leaf's jobs plus its revocable term, capped at its limit; a parent's, the sum
    of its children's claims (`static`: `max(requirement, reservation)`), capped at its limit."""
    n, dims = len(arr.paths), len(arr.kinds)
    req = [[0.0] * dims for _ in range(n)]

    def visit(row: int) -> None:
        kids = arr.children[row]
        if row != 0 and not kids:
            for job in _jobs(arr, row):
                req[row] = [a + b for a, b in zip(req[row], job[:dims], strict=True)]
        for c in kids:
            visit(c)
            claim = req[c]
            if arr.static[c]:
                claim = [max(r, float(arr.reservation[c, k])) for k, r in enumerate(claim)]
            req[row] = [a + b for a, b in zip(req[row], claim, strict=True)]
        cap = arr.capacity.tolist() if row == 0 else arr.limit[row].tolist()
        req[row] = [min(r, lim) for r, lim in zip(req[row], cap, strict=True)]

    visit(0)
    return req


def dominant_entitlements(arr: TreeArrays) -> tuple[list[list[float]], list[list[float]], set[tuple[str, str, str]]]:
    """`(entitlement, requirement, alerts)` of every row under `dominant`: per row, amounts in
    `arr.kinds` order; alerts as `(code, path, kind)` (the messages are the engine's prose)."""
    kinds, n = arr.kinds, len(arr.paths)
    cap = arr.capacity.tolist()
    live = [k for k, c in enumerate(cap) if c > 0]
    dims = len(live)

    def shares(row: int, m: object) -> list[float]:
        return [float(m[row, k]) / cap[k] for k in live]  # type: ignore[index]

    limit = [[1.0] * dims] + [shares(r, arr.limit) for r in range(1, n)]
    weight = [max(arr.share[r].tolist(), default=1.0) for r in range(n)]

    # guarantees, top down (rows are breadth-first: a parent's is final before its children's)
    guarantee = [[1.0] * dims] + [shares(r, arr.reservation) for r in range(1, n)]
    alerts: set[tuple[str, str, str]] = set()
    cpu = live.index(arr.cpu) if arr.cpu in live else -1
    for row in range(n):
        kids = arr.children[row]
        parent = guarantee[row]
        for c in kids:
            if arr.cpu_only_reservation[c] and cpu >= 0 and parent[cpu] > 0:
                ratio = guarantee[c][cpu] / parent[cpu]
                guarantee[c] = [ratio * g for g in parent]
            guarantee[c] = [min(g, lim) for g, lim in zip(guarantee[c], limit[c], strict=True)]
        for i in range(dims):
            claimed = sum(guarantee[c][i] for c in kids)
            if claimed > parent[i]:
                if (claimed - parent[i]) * cap[live[i]] >= TOLERANCE:
                    alerts.add(("guarantees_scaled_down", arr.paths[row], kinds[live[i]]))
                for c in kids:
                    guarantee[c][i] *= parent[i] / claimed

    # static reservations (DOMAIN §2, "given whatever the demand"; §3, a static child claims
    # `max(requirement, reservation)`): a static pool has one more child, a constant, given before
    # anything else: what its reservation exceeds its requirement by, per kind (its requirement
    # counts its static descendants' claims, so nothing is held twice). The reservation as
    # written, no more than its guarantee (capped at the limit, scaled down with its siblings').
    requirement = _requirement(arr)
    hold = [[0.0] * dims for _ in range(n)]
    for row in range(1, n):
        if arr.static[row]:
            reserved = [min(v, g) for v, g in zip(shares(row, arr.reservation), guarantee[row], strict=True)]
            needed = [requirement[row][k] / cap[k] for k in live]
            hold[row] = [max(0.0, r - q) for r, q in zip(reserved, needed, strict=True)]

    # bottom up: each row's share as a function of its parent's y
    as_child: list[Path] = [[] for _ in range(n)]
    own_path: list[Path] = [[] for _ in range(n)]
    for row in reversed(range(n)):
        kids = arr.children[row]
        if kids:
            parts = [as_child[c] for c in kids]
        elif row != 0:
            parts = []
            for job in _jobs(arr, row):
                demand = tuple(job[k] / cap[k] for k in live)
                zero = (0.0,) * dims
                line = [Vertex(0.0, zero, 0.0, TOP), Vertex(1.0, demand, 1.0, TOP)]
                parts.append(_as_child(line, [0.0] * dims, [math.inf] * dims, job[-1]))
        else:
            parts = []
        own_path[row] = _add(parts, dims)
        if any(hold[row]):
            own_path[row] = [Vertex(v.y, tuple(a + b for a, b in zip(v.vec, hold[row], strict=True)), v.z, v.side)
                             for v in own_path[row]]
        if row != 0:
            as_child[row] = _as_child(own_path[row], guarantee[row], limit[row], weight[row])

    # top down: the root's furthest point within the capacity, then each child where its parent is
    share = [[0.0] * dims for _ in range(n)]
    where: list[tuple[float, int]] = [(0.0, TOP)] * n
    top = _furthest(own_path[0], [1.0] * dims)
    share[0], where[0] = list(top.vec), (top.z, top.side)
    for row in range(n):
        z, side = where[row]
        for c in arr.children[row]:
            v = _read(as_child[c], z, side)
            share[c], where[c] = list(v.vec), (v.z, v.side)

    entitlement = [[0.0] * len(kinds) for _ in range(n)]
    for row in range(n):
        for i, k in enumerate(live):
            entitlement[row][k] = share[row][i] * cap[k]
    return entitlement, requirement, alerts

