"""A log written before `EntitlementsComputed` v3 verifies clean (services/tools/replay/entitlements.py).

The log: a share-lending tree of 1,101 pools (50 parents of 21 leaves, most of each reserved, the
rest of the host lent by share) through rounds of demand changes, made by the services' own
folders, so that v3 writes factors and lent parts. Its pre-v3 twin is the same inputs through the
same folders with the cycle's entitlement events written as the code before v3 wrote them
(`as_before_v3`): the pools whose numbers changed since the tree's previous computation (all of
them, replacing the map, the first time), in parts of at most 1,000 pools, version 2; the cycle's
`CycleCompleted.decisions` counts those parts. The replay re-derives v3's parts; the maps they
fold to are the same, so the old log verifies clean, and a number changed in an old part is
reported, naming the pool.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import anyio
import pytest

from events import (
    ClockTicked,
    EntitlementsComputed,
    Event,
    GangEnqueued,
    HostRegistered,
    PoolConfig,
    PoolConfigChanged,
    PoolEntitlement,
    TaskSpec,
    TaskStateChanged,
    TreeConfigured,
    TreeOptions,
    decode_all,
)
from events.codec import encode_pack, pack_parts
from events.config import GangTimeoutOptions
from events.decisions import ENTITLEMENT_PART_POOLS
from services.admission.domain import decide, entitle
from services.admission.domain.state import AdmissionState
from services.common.log import Stored
from services.common.memlog import MemoryLog
from services.tools.replay import verify
from tests.replay.biglog import TREE, Builder

PARENTS, LEAVES = 50, 21


class AsBeforeV3:
    """`entitle.compute_cycle` as the code before v3 wrote its events (the map it decides on is
    the same)."""

    def __init__(self) -> None:
        self.written: dict[str, dict[str, PoolEntitlement]] = {}  # tree -> the pools as last written

    def __call__(self, state: AdmissionState, tree: str) -> entitle.CycleEntitlements:
        computed = entitle.compute_cycle(state, tree)
        whole = {path: computed.entitlements[path] for path in computed.entitlements}
        last = self.written.get(tree)
        pools = [pool for path, pool in whole.items() if last is None or _numbers(last.get(path)) != _numbers(pool)]
        removed = [] if last is None else sorted(set(last) - set(whole))
        self.written[tree] = whole
        cuts = [pools[i:i + ENTITLEMENT_PART_POOLS] for i in range(0, len(pools), ENTITLEMENT_PART_POOLS)] or [[]]
        first = computed.events[0]
        events = [EntitlementsComputed(tree=tree, capacity=first.capacity, slack_capacity=first.slack_capacity,
                                       pools=cut, alerts=first.alerts if n == 1 else [],
                                       removed=removed if n == 1 else [], replace=last is None and n == 1,
                                       part=n, parts=len(cuts))
                  for n, cut in enumerate(cuts, start=1)]
        return replace(computed, events=events)


def _numbers(pool: PoolEntitlement | None) -> Any:
    if pool is None:
        return None
    return (dict(pool.entitlement), dict(pool.non_slack_entitlement), dict(pool.slack_entitlement), pool.fair_share,
            pool.usage_share, pool.demand_share, pool.dominant_kind)


def as_version_2(messages: list[Stored]) -> list[Stored]:
    """The entitlement events of `messages` labelled v2 (they hold nothing v2 did not)."""
    current, old = b'"type":"EntitlementsComputed","version":3', b'"type":"EntitlementsComputed","version":2'
    return [Stored(m.seq, m.subject, m.data.replace(current, old), m.msg_id) if current in m.data else m
            for m in messages]


async def _shared_log() -> list[Stored]:
    log = MemoryLog()
    builder = Builder(log)
    options = TreeOptions(resources=["cpu", "memory"],
                          gang_timeout=GangTimeoutOptions(default=3600.0, limit=3600.0, jitter=0.0))
    config: list[Event] = [TreeConfigured(tree=TREE, options=options),
                           HostRegistered(host="h1", resources={"cpu": 2000.0, "memory": 8000.0})]
    for a in range(PARENTS):
        config.append(PoolConfigChanged(tree=TREE, path=f"/p{a}", created=True, config=PoolConfig(
            reservation={"cpu": 30.0, "memory": 120.0}, share=float(1 + a % 3))))
        for b in range(LEAVES):
            config.append(PoolConfigChanged(tree=TREE, path=f"/p{a}/l{b}", created=True, config=PoolConfig(
                reservation={"cpu": 1.0, "memory": 4.0}, share=float(1 + b % 3))))
    await builder.put(config, source="tree")
    running: list[tuple[str, list[str]]] = []
    for round_ in range(5):
        builder.now += 1.0
        gangs = []
        for i in range(4):  # a few leaves' demand changes each round
            name = f"g{round_}-{i}"
            leaf = f"/p{(7 * round_ + 3 * i) % PARENTS}/l{(round_ + i) % LEAVES}"
            gangs.append(GangEnqueued(tree=TREE, gang=name, pool=leaf, size=2, job="j", user="u",
                                      tasks=[TaskSpec(id=f"{name}.{t}", resources={"cpu": 3.0, "memory": 4.0})
                                             for t in range(2)]))
        await builder.put(gangs)
        seen = (await log.last_seq()) + 1
        await builder.put([ClockTicked(tree=TREE)], source="clock")
        for gang, tasks in running:
            for state in ("running", "succeeded"):
                await builder.put([TaskStateChanged(tree=TREE, gang=gang, task=task, state=state) for task in tasks])
        running = [(e.event.gang, [t.id for t in e.event.tasks]) for m in await log.read(seen)
                   if m.subject.endswith(".admission") for e in decode_all(m.data) if e.type == "GangAdmitted"]
    return await log.read(1)


@pytest.fixture(scope="module")
def logs() -> tuple[list[Stored], list[Stored]]:
    current = anyio.run(_shared_log, backend="asyncio")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(decide, "compute_cycle", AsBeforeV3())
        before = anyio.run(_shared_log, backend="asyncio")
    return current, as_version_2(before)


def _computations(messages: list[Stored]) -> list[dict[str, Any]]:
    return [json.loads(part)["event"] for m in messages for part in _parts(m.data)
            if b'"type":"EntitlementsComputed"' in part]


def _parts(data: bytes) -> list[bytes]:
    return pack_parts(data)


def test_the_log_lends_by_share_and_its_twin_is_pre_v3(logs: tuple[list[Stored], list[Stored]]) -> None:
    current, before = logs
    written = _computations(current)
    assert any(e.get("lent") for e in written) and any(e.get("factors") for e in written)
    assert all(e["version"] == 3 for e in written)
    old = _computations(before)
    assert old and all(e["version"] == 2 and "lent" not in e and "factors" not in e for e in old)
    assert len(old) != len(written)  # other parts: v2 wrote every moved pool
    assert verify(current).ok


def test_a_log_written_before_v3_verifies_clean(logs: tuple[list[Stored], list[Stored]]) -> None:
    _, before = logs
    report = verify(before)
    assert report.ok, [f.line() for f in report.findings[:5]]
    counts = report.counts["EntitlementsComputed"]
    assert counts.recorded == counts.matched == len(_computations(before))
    assert report.counts["CycleCompleted"].matched == report.counts["CycleCompleted"].recorded


def test_a_number_that_differs_in_a_pre_v3_log_is_reported(logs: tuple[list[Stored], list[Stored]]) -> None:
    _, before = logs
    # the last computation's first part: one pool's cpu entitlement raised
    index = max(i for i, m in enumerate(before) if b'"type":"EntitlementsComputed","version":2' in m.data)
    parts = _parts(before[index].data)
    at = next(i for i, p in enumerate(parts) if b'"EntitlementsComputed"' in p and json.loads(p)["event"]["pools"])
    envelope = json.loads(parts[at])
    pool = envelope["event"]["pools"][0]
    pool["entitlement"]["cpu"] += 1.0
    parts[at] = json.dumps(envelope, separators=(",", ":")).encode()
    tampered = list(before)
    tampered[index] = Stored(before[index].seq, before[index].subject, encode_pack(parts), before[index].msg_id)
    report = verify(tampered)
    assert not report.ok
    found = [f for f in report.findings if f.type == "EntitlementsComputed"]
    assert [f.kind for f in found] == ["differs"], [f.line() for f in report.findings]
    assert f"pools.{pool['path']}.entitlement.cpu" in found[0].detail, found[0].detail
    assert "v2 computation" in found[0].detail


def test_a_cycle_count_that_differs_in_a_pre_v3_log_is_reported(logs: tuple[list[Stored], list[Stored]]) -> None:
    _, before = logs
    index = max(i for i, m in enumerate(before) if b'"type":"CycleCompleted"' in m.data
                and b'"service":"admission"' in m.data)
    parts = _parts(before[index].data)
    at = next(i for i, p in enumerate(parts) if b'"type":"CycleCompleted"' in p)
    envelope = json.loads(parts[at])
    envelope["event"]["decisions"] = envelope["event"].get("decisions", 0) + 1
    parts[at] = json.dumps(envelope, separators=(",", ":")).encode()
    tampered = list(before)
    tampered[index] = Stored(before[index].seq, before[index].subject, encode_pack(parts), before[index].msg_id)
    report = verify(tampered)
    assert [(f.kind, f.type) for f in report.findings] == [("differs", "CycleCompleted")], \
        [f.line() for f in report.findings]
    assert "event.decisions" in report.findings[0].detail


@pytest.mark.parametrize("field, forged", [("time", "2001-01-01T00:00:00Z"), ("causation", "forged")])
def test_a_forged_envelope_field_of_a_pre_v3_part_is_reported(logs: tuple[list[Stored], list[Stored]],
                                                              field: str, forged: str) -> None:
    """A pre-v3 computation is compared by the map its parts fold to; what its parts' envelopes
    carry beside the event (time, causation, ...) is compared too (review: both went unreported)."""
    _, before = logs
    index = max(i for i, m in enumerate(before) if b'"type":"EntitlementsComputed","version":2' in m.data)
    parts = _parts(before[index].data)
    at = max(i for i, p in enumerate(parts) if b'"EntitlementsComputed"' in p)
    envelope = json.loads(parts[at])
    envelope[field] = forged
    parts[at] = json.dumps(envelope, separators=(",", ":")).encode()
    tampered = list(before)
    tampered[index] = Stored(before[index].seq, before[index].subject, encode_pack(parts), before[index].msg_id)
    report = verify(tampered)
    found = [f for f in report.findings if f.type == "EntitlementsComputed"]
    assert [f.kind for f in found] == ["differs"], [f.line() for f in report.findings]
    assert f"{field} (part " in found[0].detail, found[0].detail
