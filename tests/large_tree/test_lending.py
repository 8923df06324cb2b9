"""`EntitlementsComputed` v3 on trees that lend by share (`per_resource`'s step 3): a
differential test against the engine's whole computation.

Random "shared" trees (most of the capacity reserved, the rest lent by share, few limits: one
leaf's demand moves every pool's entitlement) go through 24 cycles of random demand changes.
Three admission states fold the same inputs: one writes every computation whole (the engine's
numbers, as v1 did), one as v3 deltas (`WHOLE_POOLS = 0`), and one as v3 deltas after
forgetting what it published (as after a restart from a snapshot, or in a replay: the map is
compared pool by pool). After every cycle:

- the deltas, read back from their bytes (pydantic's decode and msgspec's views) and folded
  (`fold_entitlements`), give exactly the whole computation's pools, lent ones included;
- the forgetful state wrote the same events, byte for byte;
- the `pool_status` projection, fed the deltas (and started again from its tables half-way),
  holds the whole computation's numbers;
- a cycle in which one leaf's demand changed wrote few pools (not the tree) and lent most.
"""

from __future__ import annotations

import pickle
import random
from pathlib import Path
from typing import Any

import pytest

from events import (
    ClockTicked,
    EntitlementsComputed,
    Envelope,
    Event,
    GangEnqueued,
    HostRegistered,
    PoolConfig,
    PoolConfigChanged,
    TaskSpec,
    TaskStateChanged,
    TreeConfigured,
    TreeOptions,
    at_seconds,
    decode,
    decode_all,
    encode,
)
from events.config import GangTimeoutOptions
from events.entitlement_map import EntitlementMap, fold_entitlements
from events.views import read_envelope
from projections import ProjectionStore
from projections.pool_status import PoolStatusProjection
from services.admission.domain import entitle
from services.admission.domain.decide import run_cycles
from services.admission.domain.state import AdmissionState
from services.common.log import Stored
from tests.projections.make import stored

TREE = "default"


class Twin:
    """One admission state; its cycles written whole, or as v3 deltas (`forget`: the previous
    parts' numbers dropped before each cycle, so every pool is compared with the map)."""

    def __init__(self, whole: bool, forget: bool = False) -> None:
        self.state = AdmissionState()
        self.whole, self.forget = whole, forget
        self.seq = 0
        self.marks: dict[str, int] = {}  # each leaf's `Ledger.changes` when the last cycle computed
        self.moved: set[str] = set()  # the leaves whose ledger changed between the last two computations

    def apply(self, event: Event) -> None:
        self.seq += 1
        self.state.apply(event, self.seq, 1_767_225_600.0 + self.seq)

    def cycle(self) -> list[EntitlementsComputed]:
        self.apply(ClockTicked(tree=TREE))
        if self.forget:
            found = self.state.config.cache.get(("entitlement_engine", TREE))
            if found is not None:
                found.published = None  # type: ignore[attr-defined]
        marks = {leaf: ledger.changes for leaf, ledger in self.state.runtime(TREE).ledgers.items()}
        self.moved = {leaf for leaf, n in marks.items() if self.marks.get(leaf) != n}  # since the last computation
        self.marks = marks
        before = entitle.WHOLE_POOLS
        entitle.WHOLE_POOLS = 10**9 if self.whole else 0
        try:
            decided = [o.event for o in run_cycles(self.state, self.seq)]
        finally:
            entitle.WHOLE_POOLS = before
        self.seq += 1000
        return [e for e in decided if isinstance(e, EntitlementsComputed)]


def _shared_tree(rng: random.Random) -> list[tuple[str, PoolConfig]]:
    """Parents of leaves (a few of them parents again), 80% of each reserved, shares 1-3, a
    limit now and then."""
    out: list[tuple[str, PoolConfig]] = []

    def config(size: float) -> PoolConfig:
        limit = {"cpu": round(size * rng.uniform(1.0, 2.0), 1)} if rng.random() < 0.1 else None
        return PoolConfig(reservation={"cpu": size * 0.8, "memory": size * 3.2}, limit=limit,
                          share=rng.choice([1.0, 2.0, 3.0]))

    for a in range(rng.randrange(3, 7)):
        leaves = rng.randrange(4, 13)
        out.append((f"/p{a}", config(10.0 * leaves)))
        for b in range(leaves):
            out.append((f"/p{a}/l{b}", config(10.0)))
            if rng.random() < 0.15:
                out += [(f"/p{a}/l{b}/m{c}", config(5.0)) for c in range(2)]
    return out


def _leaves(state: AdmissionState) -> list[str]:
    tree = state.config.tree(TREE)
    return sorted(p for p, node in tree.pools.items() if p != "/" and node.is_leaf)


def _read_back(event: EntitlementsComputed, seq: int) -> list[Any]:
    data = encode(Envelope(id=f"e{seq}-{event.part}", time=at_seconds(0.0), source="admission", basis=seq,
                           event=event))
    assert decode(data).event == event
    return [decode(data).event, read_envelope(data).event]


def _numbers(pools: Any) -> dict[str, Any]:
    return {path: (dict(p.entitlement), dict(p.non_slack_entitlement), dict(p.slack_entitlement), p.fair_share,
                   p.usage_share, p.demand_share, p.dominant_kind) for path, p in pools.items()}


def _projected(store: ProjectionStore) -> dict[str, tuple[Any, ...]]:
    _, rows = store.query("SELECT path, kind, entitlement, non_slack_entitlement, fair_share "
                          "FROM pool_entitlements ORDER BY path, kind")
    return {f"{path} {kind}": (e, n, f) for path, kind, e, n, f in rows}


def _wanted(full: EntitlementsComputed) -> dict[str, tuple[Any, ...]]:
    out: dict[str, tuple[Any, ...]] = {}
    for p in full.pools:
        for kind in sorted(full.capacity.keys() | p.entitlement.keys()):
            out[f"{p.path} {kind}"] = (p.entitlement.get(kind, 0.0), p.non_slack_entitlement.get(kind, 0.0),
                                       p.fair_share)
    return out


@pytest.mark.parametrize("seed", range(3))
def test_v3_deltas_rebuild_the_engines_numbers_exactly(seed: int, tmp_path: Path) -> None:
    rng = random.Random(seed)
    whole, delta, forgetful = Twin(True), Twin(False), Twin(False, forget=True)
    twins = (whole, delta, forgetful)
    options = TreeOptions(resources=["cpu", "memory"],
                          gang_timeout=GangTimeoutOptions(default=3600.0, limit=3600.0, jitter=0.0))
    setup: list[Event] = [TreeConfigured(tree=TREE, options=options)]
    setup += [PoolConfigChanged(tree=TREE, path=path, created=True, config=config)
              for path, config in _shared_tree(rng)]
    setup.append(HostRegistered(host="h0", resources={"cpu": 400.0, "memory": 1600.0}))
    for event in setup:
        for twin in twins:
            twin.apply(event)
    folded: list[Any] = [{}, {}]  # a reader of the deltas: by pydantic, by views
    path = tmp_path / "pool_status.duckdb"
    projection = ProjectionStore(path, [PoolStatusProjection()])
    log_seq = 0
    made = lent_seen = small_cycles = 0
    for step in range(24):
        leaves = _leaves(whole.state)
        inputs: list[Event] = []
        for _ in range(rng.randrange(1, 3)):  # demand changes on random leaves
            made += 1
            inputs.append(GangEnqueued(tree=TREE, gang=f"g{made}", pool=rng.choice(leaves), job=f"j{made}", size=1,
                                       tasks=[TaskSpec(id=f"g{made}.0", resources={
                                           "cpu": rng.choice([1.0, 2.5, 1 / 3]), "memory": rng.choice([0.0, 4.0])})]))
        rt = whole.state.runtime(TREE)
        for gang in [g for g in rt.gangs.values() if g.state == "admitted"][:rng.randrange(0, 2)]:
            inputs += [TaskStateChanged(tree=TREE, gang=gang.id, task=t.id, state="succeeded") for t in gang.tasks]
        for event in inputs:
            for twin in twins:
                twin.apply(event)
        (full,) = whole.cycle()
        pieces, again = delta.cycle(), forgetful.cycle()
        assert [p.model_dump_json() for p in again] == [p.model_dump_json() for p in pieces]  # however compared
        messages: list[Stored] = []
        for piece in pieces:
            log_seq += 1
            messages.append(stored(log_seq, piece, source="admission"))
            for i, read in enumerate(_read_back(piece, delta.seq)):
                folded[i] = fold_entitlements(folded[i], read)
        want = _numbers({p.path: p for p in full.pools})
        for reader in folded:
            assert _numbers(reader) == want
        assert _numbers(delta.state.runtime(TREE).entitlements) == want
        assert _numbers(forgetful.state.runtime(TREE).entitlements) == want
        copy = pickle.loads(pickle.dumps(delta.state.runtime(TREE).entitlements))  # as a snapshot holds it
        assert isinstance(copy, EntitlementMap) and _numbers(copy) == want
        projection.apply(messages)
        assert _projected(projection) == _wanted(full)
        if step == 12:  # the projection starts again from its tables
            projection.close()
            projection = ProjectionStore(path, [PoolStatusProjection()])
        if step and not pieces[0].replace:
            written = {p.path for piece in pieces for p in piece.pools}
            lent_seen += sum(len(p.lent or []) for p in pieces)
            # only the leaves whose holdings or demand changed, and their ancestors (their shares)
            assert written <= {"/"} | {leaf[:cut] or "/" for leaf in delta.moved
                                       for cut in range(len(leaf) + 1) if cut == len(leaf) or leaf[cut] == "/"}
            small_cycles += 1
    projection.close()
    assert lent_seen and small_cycles >= 18  # what the test is about happened


def test_one_leafs_demand_writes_its_path_and_the_factors_not_the_tree() -> None:
    """The bench's shared shape, small: 10 parents of 20 leaves."""
    from bench.large_tree import capacity, pool_specs

    twin = Twin(False)
    options = TreeOptions(resources=["cpu", "memory"],
                          gang_timeout=GangTimeoutOptions(default=3600.0, limit=3600.0, jitter=0.0))
    twin.apply(TreeConfigured(tree=TREE, options=options))
    for path, reservation, limit in pool_specs(10, 20, "shared"):
        twin.apply(PoolConfigChanged(tree=TREE, path=path, created=True,
                                     config=PoolConfig(reservation=reservation, limit=limit)))
    twin.apply(HostRegistered(host="h", resources=capacity(10, 20)))
    (first,) = twin.cycle()
    assert first.replace and len(first.pools) == 211 and len(first.lent or []) == 210  # all but the root
    assert [f.group for f in first.factors or []] == ["/", *(f"/p{p:03d}" for p in range(10))]
    twin.apply(GangEnqueued(tree=TREE, gang="g", pool="/p003/l007", job="j", size=1,
                            tasks=[TaskSpec(id="g.0", resources={"cpu": 1.0, "memory": 2.0})]))
    (changed,) = twin.cycle()
    assert not changed.replace
    assert [p.path for p in changed.pools] == ["/", "/p003", "/p003/l007"]  # its demand share moved
    assert len(changed.factors or []) == 11  # what every group lends moved
    rt = twin.state.runtime(TREE)
    # not written, computed: /p003 now claims 1 cpu, so the root lends (2000 - 1) / 10 per share,
    # and /p007 its 199.9 / 20 to each leaf (10 before)
    assert rt.entitlements["/p007/l001"].entitlement["cpu"] == 9.995
    assert rt.entitlements["/p003"].entitlement["cpu"] == 200.9


def test_a_log_of_lent_pools_verifies_clean(tmp_path: Path) -> None:
    """`poolwise replay --verify`'s check on a log whose entitlements were written as v3 deltas
    (every tree written so: `WHOLE_POOLS = 0`), its shared tree's demand changing at every step."""
    import json

    import anyio

    from bench.large_tree import leaf_path, scenario_text
    from services.common.memlog import MemoryLog
    from services.tools.replay import verify
    from services.tools.scenario.format import load_scenario
    from services.tools.scenario.runner import run_on

    doc = json.loads(scenario_text(4, 6, "shared"))
    doc["steps"] = [{"at": 5 * i, "do": [{"enqueue": {"gang": f"g{i}", "pool": leaf_path(i % 4, i % 6), "tasks": 1,
                                                      "resources": {"cpu": 1 + i % 3, "memory": 2}}},
                                         *([{"task": {"gang": f"g{i - 2}", "state": "succeeded"}}] if i >= 2 else [])]}
                    for i in range(6)]
    path = tmp_path / "shared.json"
    path.write_text(json.dumps(doc))

    async def run() -> list[Stored]:
        log = MemoryLog()
        await run_on(log, load_scenario(path), "lending")
        return await log.read(1)

    before = entitle.WHOLE_POOLS
    entitle.WHOLE_POOLS = 0
    try:
        messages = anyio.run(run, backend="asyncio")
        written = [e.event for m in messages for e in decode_all(m.data)
                   if isinstance(e.event, EntitlementsComputed)]
        assert any(e.lent for e in written) and any(e.factors and not e.replace for e in written)
        report = verify(messages)
    finally:
        entitle.WHOLE_POOLS = before
    assert report.ok, [f.line() for f in report.findings]
    assert report.counts["EntitlementsComputed"].matched == len(written)
