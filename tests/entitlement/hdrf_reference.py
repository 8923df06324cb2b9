"""A slow, obvious reading of policy `hdrf` (DOMAIN §3), the oracle of `test_hdrf_equivalence.py`.

The discrete progressive filling DOMAIN describes, written without the engine's code: repeatedly
walk from the root to the unblocked child with the least key (`max over kinds (share - guarantee
share) / weight`; ties to the first child, in path order, jobs in their given order), down to a
job, and give it a step of `STEP` of its own key (its dominant share over its weight), cut where
it would pass its demand, the tree's capacity or the limit of a pool on its path. A job stops when
its demand is met or a kind it needs is used up (the capacity all given, or a pool on its path at
its limit); a pool stops when all its children have. Do not optimise it.

Inputs are read straight from the `TreeInput` (not from the engine's arrays): a leaf's jobs are
its `LeafUsage.jobs`, else one job of its allocation plus demand, plus one job of its revocable
work `min(slack_limit% * reservation, revocable allocation + revocable demand)` in every kind but
cpu; guarantees are reservations as shares of the capacity, a cpu-only one implying the other
kinds in proportion to the parent's guarantee, capped at the limit, and scaled down where
siblings claim more than their parent's guarantee. A pool of weight 0 gets at most its guarantee.
A `static` pool (DOMAIN §2: its reservation "is given whatever the demand") holds from the start,
before any step, what its reservation (as written, no more than its guarantee) exceeds its
requirement by, per kind; its requirement (§3) counts its static children's claims,
`max(requirement, reservation)`, so nothing is held twice. The holds count in every share on
their way to the root: in keys, limits and the capacity used up.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from services.entitlement.model import JobDemand, PoolInput, TreeInput

STEP = 1e-3
"""The step of a job's key: the oracle agrees with the exact computation to about this."""


@dataclass
class _Job:
    demand: list[float]  # as shares of the capacity, kinds of positive capacity
    weight: float
    needs_missing_kind: bool  # a kind the tree has none of: used up from the start
    given: float = 0.0  # fraction of the demand given
    stopped: bool = False

    @property
    def dominant(self) -> float:
        return max(self.demand, default=0.0)

    def key(self) -> float:
        return self.given * self.dominant / self.weight


@dataclass
class _Pool:
    path: str
    guarantee: list[float]
    limit: list[float]
    weight: float
    children: list[_Pool] = field(default_factory=list)
    jobs: list[_Job] = field(default_factory=list)
    share: list[float] = field(default_factory=list)
    used_up: set[int] = field(default_factory=set)
    cpu_only: bool = False  # its reservation names cpu alone

    def key(self) -> float:
        return max(s - g for s, g in zip(self.share, self.guarantee, strict=True)) / self.weight


def _jobs_of(pool: PoolInput, kinds: tuple[str, ...]) -> list[JobDemand]:
    u = pool.usage
    if u.jobs is not None:
        jobs = list(u.jobs)
    else:
        own = {k: max(0.0, u.allocation.get(k, 0.0)) + max(0.0, u.demand.get(k, 0.0)) for k in kinds}
        jobs = [JobDemand("own", own)]
    revocable = {}
    for k in kinds:
        if k == "cpu":
            continue
        want = max(0.0, u.revocable_allocation.get(k, 0.0)) + max(0.0, u.revocable_demand.get(k, 0.0))
        revocable[k] = min(pool.slack_limit / 100.0 * pool.reservation.get(k, 0.0), want)
    if any(v > 0 for v in revocable.values()):
        jobs.append(JobDemand("revocable", revocable))
    return jobs


def _weight(share: float | Mapping[str, float], kinds: tuple[str, ...]) -> float:
    if isinstance(share, Mapping):
        return max(share.get(k, 1.0) for k in kinds)
    return float(share)


def _build(tree: TreeInput) -> tuple[_Pool, list[str]]:
    kinds = tree.kinds
    live = [k for k in kinds if tree.capacity.get(k, 0.0) > 0]
    cap = [tree.capacity[k] for k in live]
    dims = len(live)
    root = _Pool("/", [1.0] * dims, [1.0] * dims, 1.0, share=[0.0] * dims)
    by_path = {"/": root}
    inputs = {p.path: p for p in tree.pools}
    for path in sorted(inputs, key=lambda p: (p.count("/"), p)):
        p = inputs[path]
        parent = by_path[path.rsplit("/", 1)[0] or "/"]
        limit = [(p.limit or {}).get(k, math.inf) / c for k, c in zip(live, cap, strict=True)]
        raw = [p.reservation.get(k, 0.0) / c for k, c in zip(live, cap, strict=True)]
        cpu_only = "cpu" in p.reservation and all((v <= 0) == (k != "cpu") for k, v in p.reservation.items())
        weight = _weight(p.share, kinds)
        pool = _Pool(path, raw, limit, weight, share=[0.0] * dims, cpu_only=cpu_only)
        parent.children.append(pool)
        by_path[path] = pool
        for jd in (_jobs_of(p, kinds) if not any(q.startswith(path + "/") for q in inputs) else []):
            demand = [max(0.0, jd.demand.get(k, 0.0)) / c for k, c in zip(live, cap, strict=True)]
            missing = any(jd.demand.get(k, 0.0) > 0 for k in kinds if k not in live)
            pool.jobs.append(_Job(demand, max(0.0, jd.weight), missing))
    # top down: a cpu-only reservation implies the other kinds in proportion to the parent's
    # guarantee; capped at the limit; scaled down where siblings claim more than their parent's
    for path in sorted(by_path, key=lambda p: (p.count("/"), p)):
        pool = by_path[path]
        for c in pool.children:
            if c.cpu_only and "cpu" in live and pool.guarantee[live.index("cpu")] > 0:
                ratio = c.guarantee[live.index("cpu")] / pool.guarantee[live.index("cpu")]
                c.guarantee = [ratio * g for g in pool.guarantee]
            c.guarantee = [min(g, lim) for g, lim in zip(c.guarantee, c.limit, strict=True)]
        for k in range(dims):
            claimed = sum(c.guarantee[k] for c in pool.children)
            if claimed > pool.guarantee[k] * (1 + 1e-12) + 1e-12:
                for c in pool.children:
                    c.guarantee[k] *= pool.guarantee[k] / claimed
    # static reservations (DOMAIN §2: given whatever the demand; §3: a static child claims
    # `max(requirement, reservation)`): a static pool holds, from the start, what its reservation
    # (as written, no more than its guarantee) exceeds its requirement by, per kind; its
    # requirement counts its static descendants' claims, so nothing is held twice
    requirement = _requirement(tree)
    for path, pool in by_path.items():
        p = inputs.get(path)
        if p is None or not p.static:
            continue
        hold = [max(0.0, min(p.reservation.get(k, 0.0) / c, g) - requirement[path].get(k, 0.0) / c)
                for k, c, g in zip(live, cap, pool.guarantee, strict=True)]
        up = path
        while True:  # the pool and every pool above it hold it
            by_path[up].share = [s + h for s, h in zip(by_path[up].share, hold, strict=True)]
            if up == "/":
                break
            up = up.rsplit("/", 1)[0] or "/"
    for pool in by_path.values():
        if pool.weight <= 1e-12:  # weight 0: at most the guarantee
            pool.limit = [min(lim, g) for lim, g in zip(pool.limit, pool.guarantee, strict=True)]
            pool.weight = 1.0
    return root, live


def _requirement(tree: TreeInput) -> dict[str, dict[str, float]]:
    """DOMAIN §3, in amounts: a leaf's jobs (its revocable one included), capped at its limit; a
    pool's, the sum of its children's claims (a static child's: `max(requirement, reservation)`),
    capped at its limit."""
    inputs = {p.path: p for p in tree.pools}
    out: dict[str, dict[str, float]] = {}
    for path in sorted(inputs, key=lambda q: (-q.count("/"), q)):  # deepest first
        p = inputs[path]
        kids = [q for q in inputs if (q.rsplit("/", 1)[0] or "/") == path]
        if kids:
            total = {k: 0.0 for k in tree.kinds}
            for q in kids:
                claim = out[q]
                if inputs[q].static:
                    claim = {k: max(v, inputs[q].reservation.get(k, 0.0)) for k, v in claim.items()}
                total = {k: total[k] + claim[k] for k in tree.kinds}
        else:
            total = {k: sum(max(0.0, jd.demand.get(k, 0.0)) for jd in _jobs_of(p, tree.kinds)) for k in tree.kinds}
        out[path] = {k: min(v, (p.limit or {}).get(k, math.inf)) for k, v in total.items()}
    return out


def _stopped(pool: _Pool) -> bool:
    if pool.children:
        return all(_stopped(c) for c in pool.children)
    return all(j.stopped for j in pool.jobs)


def _least(pool: _Pool) -> _Pool | _Job:
    if pool.children:
        open_ = [c for c in pool.children if not _stopped(c)]
        return min(open_, key=lambda c: c.key())  # min keeps the first of equals: path order
    return min((j for j in pool.jobs if not j.stopped), key=lambda j: j.key())


def hdrf_reference(tree: TreeInput, step: float = STEP) -> dict[str, dict[str, float]]:
    """Every pool's entitlement (amounts, every kind of the tree) under `hdrf`."""
    root, live = _build(tree)
    cap = [tree.capacity[k] for k in live]
    pools: list[_Pool] = []
    todo = [root]
    while todo:
        p = todo.pop()
        pools.append(p)
        todo.extend(p.children)
    for p in pools:
        for job in p.jobs:
            if job.needs_missing_kind or job.dominant <= 1e-12 or job.weight <= 1e-12:
                job.stopped = True
    _mark_used_up(root, [])
    while not _stopped(root):
        path = [root]
        node = _least(root)
        while isinstance(node, _Pool):
            path.append(node)
            node = _least(node)
        job = node
        more = min(step * job.weight / job.dominant, 1.0 - job.given)
        for p in path:  # cut at every limit on the way (the root's: the capacity)
            for k, d in enumerate(job.demand):
                if d > 0:
                    more = min(more, max(0.0, (p.limit[k] - p.share[k]) / d))
        job.given += more
        for p in path:
            for k, d in enumerate(job.demand):
                p.share[k] += more * d
        if job.given >= 1.0 - 1e-12:
            job.stopped = True
        _mark_used_up(root, [])
    out: dict[str, dict[str, float]] = {}
    for p in pools:
        out[p.path] = {k: 0.0 for k in tree.kinds}
        for kind, s, c in zip(live, p.share, cap, strict=True):
            out[p.path][kind] = s * c
    return out


def _mark_used_up(pool: _Pool, above: list[_Pool]) -> None:
    """A kind at a pool's limit is used up there: the jobs under it that need it stop."""
    for k, (s, lim) in enumerate(zip(pool.share, pool.limit, strict=True)):
        if s >= lim - 1e-12:
            pool.used_up.add(k)
    line = [*above, pool]
    for job in pool.jobs:
        if not job.stopped and any(job.demand[k] > 0 for p in line for k in p.used_up):
            job.stopped = True
    for c in pool.children:
        _mark_used_up(c, line)
