"""`entitle.compute_for`, as a cycle runs it (the engine kept per configuration, only the leaves
whose ledger changed written to it, every number rounded at once, the event built without
validation), publishes exactly what computing afresh from the state and validating gives: the
same event, encoded to the same bytes, cycle after cycle, under both policies, with revocable
capacity and allocation slack, as gangs come, are admitted, run, finish and are preempted."""

from __future__ import annotations

import random

import pytest

from events import EntitlementsComputed, GangAdmitted, PoolEntitlement, at_seconds, encode
from events.envelope import Envelope
from services.admission.domain import entitle, entitle_engine
from services.admission.domain.model import Gang, Ledger
from services.entitlement import EntitlementEngine, LeafUsage, compute_entitlements
from tests.admission.builders import TREE, Log, cancel, gang, pool, preempt, task, world


def reference(log: Log, tree: str) -> EntitlementsComputed:
    """The computation as first written: a fresh engine from the state, `round` on every number,
    every model validated."""
    given = entitle_engine.tree_input(log.state, tree)
    result = compute_entitlements(given)

    def per_kind(values: list[float]) -> dict[str, float]:
        return {k: round(v, 9) for k, v in zip(result.kinds, values, strict=True)}

    pools = [PoolEntitlement(path=path, entitlement=per_kind(e), non_slack_entitlement=per_kind(n),
                             slack_entitlement=per_kind(s), fair_share=round(f, 9), usage_share=round(u, 9),
                             demand_share=round(d, 9), dominant_kind=dom)
             for path, e, n, s, f, u, d, dom in sorted(result.rows())]
    return EntitlementsComputed(tree=tree, capacity={k: round(v, 9) for k, v in given.capacity.items()},
                                slack_capacity={k: round(v, 9) for k, v in given.revocable_capacity.items()},
                                pools=pools, alerts=[str(a) for a in result.alerts])


def _bytes(event: EntitlementsComputed) -> bytes:
    return encode(Envelope(id="x", time=at_seconds(1_767_225_600.0), event=event))


LEAVES = ["/a/x", "/a/y", "/a/z", "/b", "/c/d/e", "/c/f"]


def _world(policy: str, allocation_slack: bool) -> Log:
    return world(pool("/a", reservation={"cpu": 30, "memory": 300}, limit={"cpu": 70, "memory": 800}),
                 pool("/a/x", reservation={"cpu": 10}, share=2), pool("/a/y", reservation={"cpu": 10, "memory": 50},
                                                                      slack_limit=50),
                 pool("/a/z", share=3), pool("/b", reservation={"cpu": 20, "memory": 100}, share=1.5),
                 pool("/c", limit={"cpu": 40}), pool("/c/d"), pool("/c/d/e", reservation={"cpu": 5}),
                 pool("/c/f", reservation={"memory": 10}, reservation_type="static"),
                 resources=("cpu", "memory"), capacity={"cpu": 97.3, "memory": 1003.7},
                 revocable={"cpu": 11.1}, policy=policy, allocation_slack=allocation_slack)


@pytest.mark.parametrize("policy", ["per_resource", "dominant", "hdrf"])
@pytest.mark.parametrize("allocation_slack", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_cycle_publishes_what_a_fresh_validated_computation_gives(policy: str, allocation_slack: bool,
                                                                         seed: int) -> None:
    rng = random.Random(seed)
    log = _world(policy, allocation_slack)
    admitted: list[str] = []
    running: list[str] = []
    made = 0
    for step in range(40):
        now = float(step)
        for _ in range(rng.randrange(0, 6)):  # gangs come
            made += 1
            cpu = rng.choice([0.5, 1.0, 2.5, 1 / 3, 7.0])
            need = {"cpu": cpu} if rng.random() < 0.5 else {"cpu": cpu, "memory": rng.choice([1.0, 10.0, 33.3])}
            log.feed(gang(f"g{made}", rng.choice(LEAVES), tasks=rng.randrange(1, 3), resources=need,
                          job=f"j{made % 4}", revocable=rng.random() < 0.2, priority=rng.randrange(3)), at=now)
        for gang_id in list(admitted):  # some start, some are preempted or cancelled
            g = log.gang(gang_id)
            if g.state != "admitted":
                admitted.remove(gang_id)
                continue
            roll = rng.random()
            if roll < 0.3:
                for t in g.tasks:
                    log.feed(task(t.id, "running", gang_id), at=now)
                admitted.remove(gang_id)
                running.append(gang_id)
            elif roll < 0.35:
                log.feed(preempt(gang_id, g.pool, *[t.id for t in g.tasks]), at=now)
            elif roll < 0.4:
                log.feed(cancel(gang_id), at=now)
        for gang_id in list(running):  # some finish
            g = log.gang(gang_id)
            if g.state != "admitted" or rng.random() < 0.2:
                running.remove(gang_id)
                for t in g.tasks:
                    if g.state == "admitted" and t.state == "running":
                        log.feed(task(t.id, "succeeded", gang_id), at=now)
        got = entitle.compute_for(log.state, TREE)
        want = reference(log, TREE)
        assert got == want
        assert _bytes(got) == _bytes(want)
        assert entitle.compute_for(log.state, TREE) == want  # asked again with nothing changed
        decided = log.tick(at=now)
        admitted += [e.gang for e in decided if isinstance(e, GangAdmitted)]
    assert made > 50


def test_a_quiet_tree_gets_the_same_event_until_a_ledger_changes() -> None:
    log = _world("per_resource", False)
    first = entitle.compute_for(log.state, TREE)
    assert entitle.compute_for(log.state, TREE) is first
    log.feed(gang("g1", "/b", cpu=2.0))
    second = entitle.compute_for(log.state, TREE)
    assert second is not first and second == reference(log, TREE)


def test_every_change_of_a_ledger_counts() -> None:
    ledger = Ledger()
    g = Gang("g", TREE, "/b", "j", "u", 1, 0, True, False, False, 30.0, 0.0, resources={"cpu": 1.0})
    seen = [ledger.changes]
    ledger.want(g, 1.0)
    seen.append(ledger.changes)
    ledger.hold(g, {"cpu": 1.0}, 1.0)
    seen.append(ledger.changes)
    ledger.hold_all(g, [{"cpu": 1.0}], -1.0)
    seen.append(ledger.changes)
    assert seen == sorted(set(seen))  # strictly growing
    assert Ledger() == Ledger(changes=5)  # not part of a ledger's value


def test_set_usages_is_set_usage_of_each() -> None:
    given = entitle_engine.tree_input(_world("per_resource", False).state, TREE)
    one, many = EntitlementEngine(given), EntitlementEngine(given)
    rows = {"/a/x": ([3.0, 10.0], [1.5, 0.0], [0.0, 0.0], [2.0, 4.0]), "/c/f": ([0.0, 0.0], [9.0, 1.0], [1.0, 0.0],
                                                                              [0.0, 0.0])}
    for path, (allocation, demand, revocable, revocable_demand) in rows.items():
        one.set_usage(path, LeafUsage(allocation=dict(zip(given.kinds, allocation, strict=True)),
                                      demand=dict(zip(given.kinds, demand, strict=True)),
                                      revocable_allocation=dict(zip(given.kinds, revocable, strict=True)),
                                      revocable_demand=dict(zip(given.kinds, revocable_demand, strict=True))))
    many.set_usages(list(rows), list(rows.values()))
    a, b = one.compute(), many.compute()
    assert list(a.rows()) == list(b.rows())
    with pytest.raises(ValueError, match="not a leaf"):
        many.set_usages(["/a"], [([0.0, 0.0],) * 4])
