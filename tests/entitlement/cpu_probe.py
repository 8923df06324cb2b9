"""Entitlements of a fixed set of trees, printed byte for byte: run in processes that differ only
in `NPY_DISABLE_CPU_FEATURES` (numpy's SIMD kernels), their outputs must be identical
(tests/entitlement/test_cpu_independence.py).

    python -m tests.entitlement.cpu_probe [SIZE ...] [seeds=N]   # one line per (tree, policy)

Each line: the tree's name, the policy, then every number of the result as `float.hex` (every
bit), the dominant kinds, the alerts and (`hdrf`) the stops.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import replace

import numpy as np

from bench.entitlement import random_tree, with_some_kinds
from services.entitlement import EntitlementEngine, PoolInput, TreeInput
from services.entitlement.model import Policy, TreeEntitlements
from tests.entitlement.test_hdrf_runs import _below_the_guarantees, _seeded

POLICIES: tuple[Policy, ...] = ("per_resource", "dominant", "hdrf")
CAPACITY = (0.1, 0.15, 0.25, 1.0)


def trees(sizes: tuple[int, ...], seeds: int) -> Iterator[tuple[str, TreeInput]]:
    """`bench.entitlement`'s random trees: capacity cut (kinds run out) or not, jobs needing all
    kinds or some, the top-level pools limited to a tenth of the capacity or not; then
    test_hdrf_runs' seeded trees and its tree the epochs leave to the filling."""
    for n in sizes:
        for seed in range(seeds):
            base = random_tree(n, seed=seed, policy="dominant")
            for factor in CAPACITY:
                cut = replace(base, capacity={k: v * factor for k, v in base.capacity.items()})
                for some in (False, True):
                    tree = with_some_kinds(cut, seed) if some else cut
                    for limited in (False, True):
                        if limited:
                            tree = replace(tree, pools=tuple(_limited(p, tree) for p in tree.pools))
                        yield f"n={n} seed={seed} x{factor:g} some={some} limited={limited}", tree
    for seed in range(0, 80, 3):  # small capacity-bound trees, runs taken part-way
        yield f"seeded={seed}", _seeded(seed)
    yield "below-the-guarantees", _below_the_guarantees()  # `hdrf` left to the event-by-event filling


def _limited(pool: PoolInput, tree: TreeInput) -> PoolInput:
    if pool.path.count("/") != 1:
        return pool
    return replace(pool, limit={k: v * 0.1 for k, v in tree.capacity.items()})


def fingerprint(result: TreeEntitlements) -> str:
    """Every number of `result` as `float.hex`, then its dominant kinds, alerts and stops."""
    mats = (result.entitlement_matrix, result.non_slack_matrix, result.slack_matrix, result.requirement_matrix,
            result.shares_matrix)
    numbers = ",".join(float(x).hex() for m in mats for x in np.asarray(m, dtype=np.float64).ravel().tolist())
    stops = sorted((p, repr(s)) for p, s in result.stops.items())
    return f"{numbers}|{result.dominant_index.tolist()}|{result.alerts!r}|{stops}"


def lines(sizes: tuple[int, ...], seeds: int) -> Iterator[str]:
    for name, tree in trees(sizes, seeds):
        for policy in POLICIES:
            yield f"{name} {policy} {fingerprint(EntitlementEngine(replace(tree, policy=policy)).compute())}"


def main(argv: list[str]) -> None:
    sizes = tuple(int(a) for a in argv if a.isdigit()) or (100,)
    seeds = next((int(a.split("=", 1)[1]) for a in argv if a.startswith("seeds=")), 1)
    for line in lines(sizes, seeds):
        print(line)


if __name__ == "__main__":
    main(sys.argv[1:])
