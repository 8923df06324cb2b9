"""The shortcuts of a preemption pass give what the plain code gives: `starvation.totals` (inline
loops) the same sums as `add_into` leaf by leaf, and `passes.over_any` the same answer as
building both excesses, on ledgers with every kind of awkward number."""

from __future__ import annotations

import random

import pytest

from events import PoolEntitlement
from services.admission.domain.chains import pool_chain
from services.admission.domain.model import Ledger
from services.admission.domain.runtime import TreeRuntime
from services.admission.domain.vectors import add_into, exceeds
from services.preemption.domain.passes import over_any
from services.preemption.domain.starvation import totals

KINDS = ("cpu", "memory", "gpu")
AMOUNTS = (0.0, -0.0, 1e-10, -1e-10, 5e-10, 0.1, 0.2, 0.3, 1 / 3, 2.5, 1e6, 1e-9, 0.0009, 0.00089999)


def _vector(rng: random.Random) -> dict[str, float]:
    return {k: rng.choice(AMOUNTS) * rng.choice((1, -1, 3)) for k in rng.sample(KINDS, rng.randrange(len(KINDS) + 1))}


def _ledger(rng: random.Random) -> Ledger:
    return Ledger(allocation=_vector(rng), slack=_vector(rng), demand=_vector(rng), slack_demand=_vector(rng))


def _plain_totals(rt: TreeRuntime) -> dict[str, Ledger]:
    out: dict[str, Ledger] = {}
    for leaf, ledger in rt.ledgers.items():
        for path in pool_chain(leaf):
            acc = out.get(path)
            if acc is None:
                acc = out[path] = Ledger()
            add_into(acc.allocation, ledger.allocation)
            add_into(acc.slack, ledger.slack)
            add_into(acc.demand, ledger.demand)
    return out


@pytest.mark.parametrize("seed", range(20))
def test_totals_are_the_sums_leaf_by_leaf(seed: int) -> None:
    rng = random.Random(seed)
    rt = TreeRuntime("t")
    leaves = ["/a/x", "/a/y", "/b", "/c/d/e", "/c/d/f", "/c/g"]
    rng.shuffle(leaves)
    for leaf in leaves:
        rt.ledgers[leaf] = _ledger(rng)
    got, want = totals(rt), _plain_totals(rt)
    assert list(got) == list(want)
    for path in want:
        for name in ("allocation", "slack", "demand"):
            a, b = getattr(got[path], name), getattr(want[path], name)
            assert list(a.items()) == list(b.items()), (path, name)  # the same floats, keys in the same order
            assert all(str(x) == str(y) for x, y in zip(a.values(), b.values(), strict=True))  # signed zeros too


@pytest.mark.parametrize("seed", range(200))
def test_over_any_is_whether_either_excess_is_not_empty(seed: int) -> None:
    rng = random.Random(seed)
    ledger = _ledger(rng)
    entitlement = PoolEntitlement(path="/a", entitlement={}, non_slack_entitlement=_vector(rng),
                                  slack_entitlement=_vector(rng))
    expected = bool(exceeds(ledger.non_slack, entitlement.non_slack_entitlement)
                    or exceeds(ledger.slack, entitlement.slack_entitlement))
    assert over_any(ledger, entitlement) == expected
