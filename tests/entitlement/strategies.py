"""Hypothesis strategies: random *valid* pool trees (DOMAIN §2 validation holds below the top
level; top-level reservations may exceed the capacity, which entitlement must scale down)."""

from __future__ import annotations

import math

from hypothesis import strategies as st

from services.entitlement.model import JobDemand, LeafUsage, Policy, PoolInput, TreeInput

KIND_SETS: list[tuple[str, ...]] = [
    ("cpu",),
    ("cpu", "memory"),
    ("cpu", "memory", "disk", "gpu"),
    ("memory", "gpu"),
]


def _amount(draw: st.DrawFn, scale: float) -> float:
    choice = draw(st.sampled_from(["zero", "small", "mid", "big", "any"]))
    if choice == "zero":
        return 0.0
    if choice == "small":
        return scale * 0.05
    if choice == "mid":
        return scale * 0.3
    if choice == "big":
        return scale * 1.5
    return draw(st.floats(0.0, 2.0 * scale, allow_nan=False, allow_infinity=False))


def _vector(draw: st.DrawFn, kinds: tuple[str, ...], cap: dict[str, float]) -> dict[str, float]:
    return {k: _amount(draw, cap[k] or 10.0) for k in kinds if draw(st.booleans())}


@st.composite
def trees(
    draw: st.DrawFn, policy: Policy = "per_resource", max_pools: int = 9, with_jobs: bool = False, limits: bool = True
) -> TreeInput:
    kinds = draw(st.sampled_from(KIND_SETS))
    cap = {k: draw(st.sampled_from([0.0, 10.0, 100.0, 1000.0, 64.0])) for k in kinds}
    n = draw(st.integers(1, max_pools))
    res: dict[str, dict[str, float]] = {"/": dict(cap)}
    lim: dict[str, dict[str, float]] = {"/": {k: math.inf for k in kinds}}
    budget: dict[str, dict[str, float]] = {"/": {k: math.inf for k in kinds}}
    pools: list[PoolInput] = []
    paths = ["/"]
    for i in range(n):
        parent = draw(st.sampled_from(paths))
        path = f"/p{i}" if parent == "/" else f"{parent}/p{i}"
        r: dict[str, float] = {}
        lm: dict[str, float] = {}
        for k in kinds:
            if parent == "/":
                r[k] = draw(st.sampled_from([0.0, 0.1, 0.3, 0.6])) * cap[k]
            else:
                r[k] = budget[parent][k] * draw(st.sampled_from([0.0, 0.25, 0.5, 1.0]))
            plim = lim[parent][k]
            if math.isinf(plim):
                lm[k] = draw(st.sampled_from([math.inf, r[k], r[k] + 0.5 * (cap[k] or 10.0), 2 * (cap[k] or 10.0)]))
            else:
                lm[k] = r[k] + draw(st.sampled_from([0.0, 0.5, 1.0])) * (plim - r[k])
            lm[k] = max(lm[k], r[k])
            if parent != "/":
                budget[parent][k] -= r[k]
        res[path], lim[path], budget[path] = r, lm, dict(r)
        paths.append(path)
        share_kind = draw(st.sampled_from(["one", "num", "per_kind"]))
        share: float | dict[str, float]
        if share_kind == "one":
            share = 1.0
        elif share_kind == "num":
            share = draw(st.sampled_from([0.0, 0.5, 2.0, 10.0]))
        else:
            share = {k: draw(st.sampled_from([0.0, 0.5, 1.0, 3.0])) for k in kinds}
        jobs: tuple[JobDemand, ...] | None = None
        if with_jobs and draw(st.booleans()):
            jobs = tuple(
                JobDemand(
                    job=f"j{i}-{j}",
                    demand=_vector(draw, kinds, cap),
                    weight=draw(st.sampled_from([1.0, 1.0, 0.5, 3.0])),
                )
                for j in range(draw(st.integers(0, 3)))
            )
        usage = LeafUsage(
            allocation=_vector(draw, kinds, cap),
            demand=_vector(draw, kinds, cap),
            revocable_allocation=_vector(draw, kinds, cap),
            revocable_demand=_vector(draw, kinds, cap),
            jobs=jobs,
        )
        pools.append(
            PoolInput(
                path=path,
                reservation=r,
                limit=None if not limits or (all(math.isinf(x) for x in lm.values()) and draw(st.booleans())) else lm,
                share=share,
                static=draw(st.booleans()) and draw(st.booleans()),
                slack_limit=draw(st.sampled_from([0.0, 20.0, 50.0, 100.0])),
                usage=usage,
            )
        )
    revocable = {"cpu": draw(st.sampled_from([0.0, 5.0, 45.0]))} if "cpu" in kinds else {}
    return TreeInput(
        kinds=kinds,
        capacity=cap,
        pools=tuple(pools),
        revocable_capacity=revocable,
        policy=policy,
        allocation_slack=draw(st.booleans()),
    )


ALL_KINDS = ("cpu", "memory", "disk", "gpu")


@st.composite
def contended_trees(draw: st.DrawFn) -> TreeInput:
    """Nested pools whose jobs want more than there is, each needing only some kinds (the case
    `hdrf` exists for): limits that bind, guarantees, weights, 2-4 kinds."""
    chosen = draw(st.sets(st.sampled_from(ALL_KINDS), min_size=2))
    kinds = tuple(k for k in ALL_KINDS if k in chosen)
    cap = {k: draw(st.sampled_from([8.0, 10.0, 100.0, 1000.0])) for k in kinds}
    n = draw(st.integers(1, 7))
    paths: list[str] = []
    parents: dict[str, str] = {}
    for i in range(n):
        parent = draw(st.sampled_from(["/", *paths]))
        path = f"/q{i}" if parent == "/" else f"{parent}/q{i}"
        paths.append(path)
        parents[path] = parent
    has_kids = set(parents.values())
    budget: dict[str, dict[str, float]] = {"/": dict(cap)}
    limit_of: dict[str, dict[str, float]] = {"/": dict(cap)}
    pools: list[PoolInput] = []
    for path in paths:
        parent = parents[path]
        reservation = {k: budget[parent][k] * draw(st.sampled_from([0.0, 0.0, 0.25, 0.5])) for k in kinds}
        for k in kinds:
            budget[parent][k] -= reservation[k]
        budget[path] = dict(reservation)
        limit = {k: max(reservation[k], limit_of[parent][k] * draw(st.sampled_from([1.0, 1.0, 0.6, 0.3])))
                 for k in kinds}
        limit_of[path] = limit
        usage = LeafUsage()
        if path not in has_kids:
            jobs = []
            for j in range(draw(st.integers(0, 4))):
                needs = draw(st.sets(st.sampled_from(kinds), min_size=1))
                demand = {k: cap[k] * draw(st.sampled_from([0.02, 0.1, 0.3, 0.7])) for k in sorted(needs)}
                jobs.append(JobDemand(f"j{j}", demand, draw(st.sampled_from([1.0, 1.0, 0.5, 2.0]))))
            usage = LeafUsage(jobs=tuple(jobs))
        pools.append(PoolInput(path=path, reservation=reservation,
                               limit=None if all(limit[k] >= cap[k] for k in kinds) else limit,
                               share=draw(st.sampled_from([1.0, 1.0, 2.0, 0.5])), usage=usage))
    return TreeInput(kinds=kinds, capacity=cap, pools=tuple(pools), policy="hdrf")
