"""A large tree's entitlements go on the log as the pools that changed, in parts
(`entitle.compute_cycle`, `EntitlementsComputed` v2, and v3 lending pools their share of step 3):
a differential test against the whole map.

Two admission states fold the same random inputs (pools made and deleted, hosts coming and
going, gangs enqueued, tasks running and finishing, ticks): one writes every computation whole
(v1's way), the other as deltas in parts of at most 3 pools (`WHOLE_POOLS = 0`, `PART_POOLS =
3`). After every cycle:

- the delta's events, read back from their bytes (pydantic's decode and msgspec's views), folded
  into the map the previous cycles left (`fold_entitlements`), give the whole computation's map;
- both states hold that map (`TreeRuntime.entitlements`), and every other decision is the same;
- no part holds more than 3 pools and removed paths, only a first part replaces, parts count up.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from events import (
    ClockTicked,
    EntitlementsComputed,
    Envelope,
    Event,
    GangEnqueued,
    HostRegistered,
    HostRemoved,
    PoolConfig,
    PoolConfigChanged,
    PoolDeleted,
    TaskSpec,
    TaskStateChanged,
    TreeConfigured,
    TreeOptions,
    at_seconds,
    decode,
    encode,
)
from events.config import GangTimeoutOptions
from events.entitlement_map import fold_entitlements
from events.views import read_envelope
from services.admission.domain import entitle, entitle_parts
from services.admission.domain.decide import run_cycles
from services.admission.domain.state import AdmissionState

TREE = "t"


@contextmanager
def written(whole: int, part: int) -> Iterator[None]:
    before = entitle.WHOLE_POOLS, entitle_parts.PART_POOLS
    entitle.WHOLE_POOLS, entitle_parts.PART_POOLS = whole, part
    try:
        yield
    finally:
        entitle.WHOLE_POOLS, entitle_parts.PART_POOLS = before


class Twin:
    """One state folding the inputs; its cycles written whole or in parts."""

    def __init__(self, whole: int, part: int) -> None:
        self.state = AdmissionState()
        self.mode = (whole, part)
        self.seq = 0
        self.now = 1_767_225_600.0

    def apply(self, event: Event) -> list[Event]:
        self.seq += 1
        out: list[Event] = []
        for outcome in self.state.apply(event, self.seq, self.now):
            out.append(outcome.event)
        return out

    def cycle(self) -> list[Event]:
        self.now += 1.0
        self.seq += 1
        self.state.apply(ClockTicked(tree=TREE), self.seq, self.now)
        with written(*self.mode):
            decided = [o.event for o in run_cycles(self.state, self.seq)]
        self.seq += 1000  # the same positions in both twins, whatever they decided
        return decided


def _random_tree(rng: random.Random) -> list[tuple[str, PoolConfig]]:
    pools: list[tuple[str, PoolConfig]] = []
    for a in range(rng.randrange(2, 5)):
        pools.append((f"/a{a}", _config(rng, 40.0)))
        for b in range(rng.randrange(0, 5)):
            pools.append((f"/a{a}/b{b}", _config(rng, 10.0)))
            if rng.random() < 0.3:
                for c in range(rng.randrange(1, 3)):
                    pools.append((f"/a{a}/b{b}/c{c}", _config(rng, 3.0)))
    return pools


def _config(rng: random.Random, size: float) -> PoolConfig:
    reservation = {"cpu": round(rng.uniform(0, size), 1)} if rng.random() < 0.7 else {}
    if reservation and rng.random() < 0.5:
        reservation["memory"] = round(rng.uniform(0, size * 10), 1)
    limit = {"cpu": round(size * rng.uniform(1.0, 3.0), 1)} if rng.random() < 0.4 else None
    return PoolConfig(reservation=reservation, limit=limit, share=rng.choice([1.0, 2.0, 0.5]),
                      reservation_type="static" if rng.random() < 0.15 else None)


def _leaves(state: AdmissionState) -> list[str]:
    tree = state.config.tree(TREE)
    return sorted(p for p, node in tree.pools.items() if p != "/" and node.is_leaf)


def _inputs(rng: random.Random, state: AdmissionState, step: int, made: list[int]) -> list[Event]:
    """A few inputs for one step, chosen from the state as it is."""
    out: list[Event] = []
    leaves = _leaves(state)
    rt = state.runtime(TREE)
    for _ in range(rng.randrange(0, 4)):
        if not leaves:
            break
        made[0] += 1
        name = f"g{made[0]}"
        tasks = rng.randrange(1, 3)
        resources = {"cpu": rng.choice([0.5, 1.0, 2.0, 1 / 3])}
        if rng.random() < 0.4:
            resources["memory"] = rng.choice([1.0, 5.0])
        out.append(GangEnqueued(tree=TREE, gang=name, pool=rng.choice(leaves), job=f"j{made[0] % 3}", size=tasks,
                                revocable=rng.random() < 0.1,
                                tasks=[TaskSpec(id=f"{name}.{i}", resources=resources) for i in range(tasks)]))
    admitted = [g for g in rt.gangs.values() if g.state == "admitted"]
    for gang in rng.sample(admitted, min(len(admitted), rng.randrange(0, 4))):
        state_ = rng.choice(["running", "succeeded", "running"])
        for task in gang.tasks:
            if task.state not in ("succeeded", "failed", "lost", "killed"):
                out.append(TaskStateChanged(tree=TREE, gang=gang.id, task=task.id, state=state_))
    roll = rng.random()
    if roll < 0.12:  # a new pool under an existing one (or at the top)
        parent = rng.choice(["", *[p for p in leaves if p.count("/") < 3]])
        out.append(PoolConfigChanged(tree=TREE, path=f"{parent}/n{step}", created=True,
                                     config=_config(rng, 5.0)))
    elif roll < 0.22:  # a leaf without gangs goes
        busy = {g.pool for g in rt.gangs.values()}
        idle = [p for p in leaves if p not in busy]
        if idle:
            out.append(PoolDeleted(tree=TREE, path=rng.choice(idle)))
    elif roll < 0.3:
        out.append(HostRegistered(host=f"h{step}", resources={"cpu": rng.choice([5.0, 20.0]), "memory": 50.0},
                                  revocable={"cpu": rng.choice([0.0, 2.0])}))
    elif roll < 0.34:
        out.append(HostRemoved(host="h0"))
    return out


def _read_back(event: EntitlementsComputed, seq: int) -> list[Any]:
    data = encode(Envelope(id=f"e{seq}-{event.part}", time=at_seconds(0.0), source="admission", basis=seq,
                           event=event))
    assert len(data) < 512 * 1024
    return [decode(data).event, read_envelope(data).event]


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("policy", ["per_resource", "dominant"])
def test_folding_the_parts_gives_the_whole_map_and_the_same_decisions(seed: int, policy: str) -> None:
    rng = random.Random(seed)
    whole, parts = Twin(10_000, 10_000), Twin(0, 3)
    options = TreeOptions(resources=["cpu", "memory"], policy=policy,
                          gang_timeout=GangTimeoutOptions(default=30.0, limit=60.0, jitter=0.0))
    setup: list[Event] = [TreeConfigured(tree=TREE, options=options)]
    setup += [PoolConfigChanged(tree=TREE, path=path, created=True, config=config)
              for path, config in _random_tree(rng)]
    setup.append(HostRegistered(host="h0", resources={"cpu": 60.0, "memory": 400.0}, revocable={"cpu": 4.0}))
    for event in setup:
        assert whole.apply(event) == parts.apply(event)
    folded: list[Any] = [{}, {}]  # what a reader of the parts holds: by pydantic, by views
    made = [0]
    seen_parts = seen_delta = 0
    for step in range(40):
        for event in _inputs(rng, whole.state, step, made):
            assert whole.apply(event) == parts.apply(event)
        a, b = whole.cycle(), parts.cycle()
        (full,) = [e for e in a if isinstance(e, EntitlementsComputed)]
        assert full.replace and full.parts == 1
        pieces = [e for e in b if isinstance(e, EntitlementsComputed)]
        assert [p.part for p in pieces] == list(range(1, len(pieces) + 1))
        assert all(p.parts == len(pieces) for p in pieces)
        assert not any(p.replace for p in pieces[1:])
        assert all(len(p.pools) + len(p.removed) <= 3 for p in pieces)
        seen_parts += len(pieces) > 1
        seen_delta += not pieces[0].replace
        for piece in pieces:
            for i, read in enumerate(_read_back(piece, parts.seq)):
                folded[i] = fold_entitlements(folded[i], read)
        want = {p.path: p for p in full.pools}
        for reader in folded:
            assert {path: p.to_model() if hasattr(p, "to_model") else p for path, p in reader.items()} == want
        assert dict(whole.state.runtime(TREE).entitlements) == want
        assert dict(parts.state.runtime(TREE).entitlements) == want
        others_a = [e for e in a if not isinstance(e, EntitlementsComputed)]
        others_b = [e for e in b if not isinstance(e, EntitlementsComputed)]
        assert [e.type for e in others_a] == [e.type for e in others_b]
        assert [e for e in others_a if e.type != "CycleCompleted"] == \
               [e for e in others_b if e.type != "CycleCompleted"]
    assert seen_parts and seen_delta  # the test saw what it is about
    if seed < 6:
        assert made[0] > 20


def test_a_deleted_pool_is_removed_and_only_what_changed_is_written() -> None:
    """Hard quotas (static reservations, limits at them): a pool deleted leaves the map by
    `removed`, and one leaf's demand writes that leaf and its ancestors only."""
    twin = Twin(0, 1000)
    options = TreeOptions(resources=["cpu"], gang_timeout=GangTimeoutOptions(default=30.0, limit=60.0, jitter=0.0))
    twin.apply(TreeConfigured(tree=TREE, options=options))
    for a in range(3):
        twin.apply(PoolConfigChanged(tree=TREE, path=f"/a{a}", created=True, config=PoolConfig(
            reservation={"cpu": 30.0}, limit={"cpu": 30.0}, reservation_type="static")))
        for b in range(3):
            twin.apply(PoolConfigChanged(tree=TREE, path=f"/a{a}/b{b}", created=True, config=PoolConfig(
                reservation={"cpu": 10.0}, limit={"cpu": 10.0}, reservation_type="static")))
    twin.apply(HostRegistered(host="h0", resources={"cpu": 90.0}))
    first = [e for e in twin.cycle() if isinstance(e, EntitlementsComputed)]
    assert len(first) == 1 and first[0].replace and len(first[0].pools) == 13  # with the root
    (quiet,) = [e for e in twin.cycle() if isinstance(e, EntitlementsComputed)]
    assert quiet.pools == [] and not quiet.replace
    twin.apply(GangEnqueued(tree=TREE, gang="g", pool="/a1/b2", job="j", size=1,
                            tasks=[TaskSpec(id="g.0", resources={"cpu": 2.0})]))
    (changed,) = [e for e in twin.cycle() if isinstance(e, EntitlementsComputed)]
    assert not changed.replace and "/a1/b2" in [p.path for p in changed.pools]
    assert {p.path for p in changed.pools} <= {"/", "/a1", "/a1/b2"}  # the leaf and its ancestors at most
    twin.apply(PoolDeleted(tree=TREE, path="/a2/b0"))
    (gone,) = [e for e in twin.cycle() if isinstance(e, EntitlementsComputed)]
    assert not gone.replace and gone.removed == ["/a2/b0"]
    rt = twin.state.runtime(TREE)
    assert "/a2/b0" not in rt.entitlements and len(rt.entitlements) == 12
