"""Entitlement engine timings on random trees: `bench_entitlement(sizes) -> list[dict]`.

Run: `.venv/bin/python -m bench.entitlement [SIZE ...] [dominant] [hdrf] [all] [contended]`
(`contended`: capacity cut by `CONTENDED`, jobs needing some kinds). Nothing runs or prints at
import.
`.venv/bin/python -m bench.entitlement compare [SIZE ...] [capacity=0.25] [some-kinds] [without=gpu]`:
the policies side by side on one tree (`compare_policies`: prepared `compute()` of each, runs
alternated, best and median), with the capacity cut by the factor given (so that kinds run out),
with `some-kinds` jobs that each need only some of the kinds, and with `without=KIND` none of
that kind in the tree (every GPU host drained, the jobs still asking for it).

Each row times, best of `repeat`, in CPU time (`time.process_time`; `compare` too):
- `compute_s`: `EntitlementEngine.compute()` on a prepared engine (what the admission service
  pays after each batch of events: leaves written in place, whole tree recomputed);
- `update_compute_s`: the same after rewriting 1% of the leaves with `set_usage`;
- `build_s`: `EntitlementEngine(tree_input)` from plain dataclasses (once per config change);
- `end_to_end_s`: `compute_entitlements(tree_input)` (build + compute);
- `read_all_s`: reading every pool's `PoolEntitlement` out of the result (dicts built lazily).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

import numpy as np

from services.entitlement import (
    EntitlementEngine,
    JobDemand,
    LeafUsage,
    PoolInput,
    TreeInput,
    compute_entitlements,
)
from services.entitlement.model import JOB_POLICIES, Policy

KINDS = ("cpu", "memory", "disk", "gpu")


def random_tree(
    n_pools: int, *, seed: int = 0, fanout: int = 10, policy: Policy = "per_resource", jobs_per_leaf: int = 2
) -> TreeInput:
    """A random valid tree of `n_pools` pools (fan-out about `fanout`), 4 kinds, busy leaves."""
    rng = np.random.default_rng(seed)
    capacity = {"cpu": 1e6, "memory": 4e6, "disk": 1e7, "gpu": 1e4}
    cap = np.array([capacity[k] for k in KINDS])
    parents: list[int] = [-1]
    paths = ["/"]
    reservation = [cap * 0.9]
    children: list[int] = [0]
    frontier = [0]
    i = 0
    while len(paths) < n_pools + 1:
        nxt: list[int] = []
        for p in frontier:
            m = int(rng.integers(max(1, fanout // 2), fanout * 3 // 2 + 1))
            for _ in range(m):
                if len(paths) >= n_pools + 1:
                    break
                i += 1
                paths.append(f"{paths[p].rstrip('/')}/p{i}")
                parents.append(p)
                children.append(0)
                children[p] += 1
                reservation.append(np.zeros(len(KINDS)))
                nxt.append(len(paths) - 1)
        frontier = nxt or frontier
    # reservations: each parent hands a random part of its own to its children
    kids: list[list[int]] = [[] for _ in paths]
    for c, p in enumerate(parents):
        if p >= 0:
            kids[p].append(c)
    for p in range(len(paths)):
        if kids[p]:
            parts = rng.dirichlet(np.ones(len(kids[p]))) * rng.uniform(0.3, 1.0)
            for c, f in zip(kids[p], parts, strict=True):
                reservation[c] = reservation[p] * f
    pools: list[PoolInput] = []
    for row in range(1, len(paths)):
        res = reservation[row]
        usage = LeafUsage()
        if not kids[row]:
            demand = res * rng.uniform(0.0, 3.0, len(KINDS))
            alloc = res * rng.uniform(0.0, 1.2, len(KINDS))
            jobs = None
            if policy in JOB_POLICIES:
                jobs = tuple(
                    JobDemand(
                        job=f"j{row}-{j}",
                        demand=dict(zip(KINDS, (demand * rng.uniform(0.2, 1.0, len(KINDS))).tolist(), strict=True)),
                    )
                    for j in range(jobs_per_leaf)
                )
            usage = LeafUsage(
                allocation=dict(zip(KINDS, alloc.tolist(), strict=True)),
                demand=dict(zip(KINDS, demand.tolist(), strict=True)),
                revocable_allocation={"cpu": float(res[0] * 0.1), "memory": float(res[1] * 0.05)},
                revocable_demand={"cpu": float(res[0] * 0.1)},
                jobs=jobs,
            )
        pools.append(
            PoolInput(
                path=paths[row],
                reservation=dict(zip(KINDS, res.tolist(), strict=True)),
                limit=dict(zip(KINDS, (cap * rng.uniform(0.5, 1.0)).tolist(), strict=True)),
                share=float(rng.choice([1.0, 1.0, 2.0, 5.0])),
                static=bool(rng.random() < 0.05),
                usage=usage,
            )
        )
    return TreeInput(kinds=KINDS, capacity=capacity, pools=tuple(pools), revocable_capacity={"cpu": 5e4}, policy=policy)


def _best(fn: Callable[[], Any], repeat: int) -> float:
    """The least CPU time (`time.process_time`: this process) of `repeat` runs. CPU, not wall: on
    a shared 2-core machine the wall clock timed 5-15x the CPU of the same run under load."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


CONTENDED = 0.15
"""`bench_entitlement(contended=True)` cuts the capacity by this, and makes each job need only
some kinds: kinds run out one after the other and `hdrf` and `dominant` differ (the GPU shape)."""


def bench_entitlement(
    sizes: Iterable[int] = (1000, 10000, 100000), *, policy: Policy = "per_resource", repeat: int = 5,
    contended: bool = False,
) -> list[dict[str, Any]]:
    """One row of timings (seconds, best of `repeat`) per size: see the module docstring. With
    `contended`, the tree's capacity is cut by `CONTENDED` and each job needs only some kinds
    (`label` says so)."""
    return [_bench_one(n, policy, repeat, contended) for n in sizes]


def _bench_one(n: int, policy: Policy, repeat: int, contended: bool = False) -> dict[str, Any]:
    tree = random_tree(n, policy=policy)
    label: str = policy
    if contended:
        tree = with_some_kinds(replace(tree, capacity={k: v * CONTENDED for k, v in tree.capacity.items()}), 0)
        label = f"{policy}, contended (capacity x {CONTENDED:g}, jobs need some kinds)"
    engine = EntitlementEngine(tree)
    reps = repeat if n <= 10000 else max(2, repeat // 2)
    compute_s = _best(engine.compute, reps)
    leaves = engine.leaves
    rng = np.random.default_rng(1)
    batch = [leaves[int(j)] for j in rng.integers(0, len(leaves), max(1, len(leaves) // 100))]
    usage = LeafUsage(demand={"cpu": 5.0, "memory": 10.0}, allocation={"cpu": 1.0})

    def update_and_compute() -> None:
        for path in batch:
            engine.set_usage(path, usage)
        engine.compute()

    update_s = _best(update_and_compute, reps)
    build_s = _best(lambda: EntitlementEngine(tree), max(1, reps // 2))
    end_to_end_s = _best(lambda: compute_entitlements(tree), max(1, reps // 2))
    result = engine.compute()
    read_s = _best(lambda: [result[p] for p in result], 1)
    return {
        "pools": n,
        "kinds": len(KINDS),
        "policy": policy,
        "label": label,
        "depth": max(p.count("/") for p in result.paths[1:]) if n else 0,
        "compute_s": compute_s,
        "update_compute_s": update_s,
        "build_s": build_s,
        "end_to_end_s": end_to_end_s,
        "read_all_s": read_s,
    }


def compare_policies(
    n: int, policies: Iterable[Policy] = ("per_resource", "dominant", "hdrf"), *, repeat: int = 5, seed: int = 0,
    capacity_factor: float = 1.0, some_kinds: bool = False, without: str | None = None,
) -> list[dict[str, Any]]:
    """Each policy's prepared `compute()` on one tree of `n` pools (its leaves' jobs given, which
    `per_resource` ignores), the runs alternated (policy A, B, C, A, B, C, ...) so that a noisy
    machine slows them alike: best and median of `repeat` per policy, and the tree's numbers.

    `random_tree`'s demands fit its capacity (nothing is used up: `hdrf` then needs no event);
    `capacity_factor` < 1 cuts the capacity so that kinds run out (`contended` in the rows);
    `some_kinds` makes each job need only some kinds (each kind kept with probability 1/2, one
    at least: the GPU cluster's shape, where `hdrf` and `dominant` differ); `without` sets one
    kind's capacity to 0 (its jobs unchanged: `hdrf` stops them by it from the start)."""
    chosen = list(policies)
    tree = random_tree(n, seed=seed, policy="dominant")
    tree = replace(tree, capacity={k: 0.0 if k == without else v * capacity_factor for k, v in tree.capacity.items()})
    if some_kinds:
        tree = with_some_kinds(tree, seed)
    engines = {p: EntitlementEngine(replace(tree, policy=p)) for p in chosen}
    times: dict[str, list[float]] = {p: [] for p in chosen}
    for _ in range(repeat):
        for p in chosen:
            t0 = time.process_time()
            engines[p].compute()
            times[p].append(time.process_time() - t0)
    rows = []
    for p in chosen:
        result = engines[p].compute()
        cap = np.array([result.capacity[k] for k in result.kinds])
        used = np.divide(result.entitlement_matrix[0], cap, out=np.zeros_like(cap), where=cap > 0)
        rows.append({"pools": n, "kinds": len(KINDS), "policy": p, "best_s": min(times[p]),
                     "median_s": float(np.median(times[p])), "repeat": repeat,
                     "contended": capacity_factor < 1.0,
                     "root_used": used.round(3).tolist()})
    return rows


def with_some_kinds(tree: TreeInput, seed: int) -> TreeInput:
    rng = np.random.default_rng(seed + 1)

    def cut(job: JobDemand) -> JobDemand:
        keep = rng.random(len(KINDS)) < 0.5
        keep[int(rng.integers(len(KINDS)))] = True
        return replace(job, demand={k: v for (k, v), kept in zip(job.demand.items(), keep, strict=True) if kept})

    pools = tuple(replace(p, usage=replace(p.usage, jobs=tuple(map(cut, p.usage.jobs)))) if p.usage.jobs else p
                  for p in tree.pools)
    return replace(tree, pools=pools)


def main(argv: list[str]) -> None:
    if argv[:1] == ["compare"]:
        sizes = [int(a) for a in argv[1:] if a.isdigit()] or [100, 1000]
        factor = next((float(a.split("=", 1)[1]) for a in argv if a.startswith("capacity=")), 1.0)
        some = "some-kinds" in argv
        without = next((a.split("=", 1)[1] for a in argv if a.startswith("without=")), None)
        cut = ((f" (capacity x {factor:g})" if factor < 1.0 else "") + (" (jobs need some kinds)" if some else "")
               + (f" (no {without})" if without else ""))
        for n in sizes:
            for row in compare_policies(n, repeat=3 if n > 300 else 5, capacity_factor=factor, some_kinds=some,
                                        without=without):
                print(f"{row['policy']:>12} {row['pools']:>7} pools x {row['kinds']} kinds{cut}: "
                      f"compute best {row['best_s'] * 1e3:10.1f} ms, median {row['median_s'] * 1e3:10.1f} ms "
                      f"(runs alternated, {row['repeat']} each); root given / capacity {row['root_used']}")
        return
    sizes = [int(a) for a in argv if a.isdigit()] or [1000, 10000, 100000]
    policies: list[Policy] = [p for p in ("dominant", "hdrf") if p in argv] or ["per_resource"]
    if "all" in argv:
        policies = ["per_resource", "dominant", "hdrf"]
    for policy in policies:
        for row in bench_entitlement(sizes, policy=policy, contended="contended" in argv):
            print(
                f"{row['label']:>12} {row['pools']:>7} pools x {row['kinds']} kinds (depth {row['depth']}): "
                f"compute {row['compute_s'] * 1e3:8.1f} ms | "
                f"1% leaves + compute {row['update_compute_s'] * 1e3:8.1f} ms | "
                f"build {row['build_s'] * 1e3:8.1f} ms | end-to-end {row['end_to_end_s'] * 1e3:8.1f} ms | "
                f"read all {row['read_all_s'] * 1e3:8.1f} ms"
            )


if __name__ == "__main__":
    main(sys.argv[1:])
