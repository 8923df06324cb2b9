"""Large trees: a tree of 10k or 100k pools, live on JetStream and cycle by cycle.

Two parts (`poolwise bench large-tree`; `python -m bench.large_tree [parents] [leaves-per-parent]`):

1. `live_run`: the tree, admission and preemption services on an embedded nats-server
   (JetStream, its own data dir) with a tree of `parents` x `leaves` leaf pools (plus the
   parents): every pool configured, a gang submitted to one leaf and admitted. Reports the wall
   time, the largest `EntitlementsComputed` message and how many there were (a tree of 10k pools
   was refused by NATS's 1 MiB payload limit before `EntitlementsComputed` v2).
   `scenario_text` writes the same tree as a scenario file (`poolwise scenario run --bus nats`:
   slower, since the runner sends each pool to the tree service as a command).
2. `cycle_costs`: admission's fold in this process (`AdmissionState` and `run_cycles`, as the
   service runs them, with the cyclic garbage collector off as in the service), on the same tree:
   the first cycle (every pool written), a quiet cycle, then cycles in which one leaf's demand
   changed (a gang enqueued on it): each one's seconds and the bytes it appends (every decision
   encoded as on the wire; `EntitlementsComputed` apart). Two shapes of tree:
   - `quota`: every pool's reservation is static and its limit is its reservation (hard quotas:
     whatever the demand, a pool is entitled to its reservation), so one leaf's demand moves only
     that leaf's and its ancestors' numbers (their usage and demand shares);
   - `shared`: the pools reserve 80% of the capacity and share the rest by weight, so one leaf's
     demand moves every pool's entitlement (entitlement is global there: the change is the tree).

Nothing runs at import; it prints nothing.
"""

from __future__ import annotations

import gc
import json
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from events import (
    ClockTicked,
    Event,
    GangEnqueued,
    HostRegistered,
    PoolConfig,
    PoolConfigChanged,
    TaskSpec,
    TreeConfigured,
    TreeOptions,
    at_seconds,
    encode,
)
from events.config import GangTimeoutOptions
from events.envelope import Envelope
from services.admission.domain.decide import run_cycles
from services.admission.domain.state import AdmissionState

TREE = "default"
CPU_PER_LEAF = 10.0
MEMORY_PER_LEAF = 40.0


def leaf_path(parent: int, leaf: int) -> str:
    return f"/p{parent:03d}/l{leaf:03d}"


def pool_specs(parents: int, leaves: int, shape: str) -> list[tuple[str, dict[str, float], dict[str, float] | None]]:
    """(path, reservation, limit or None) of every pool, parents first. `quota`: limit =
    reservation everywhere (and the reservations static); `shared`: 80% of the capacity
    reserved, no limits."""
    share = 1.0 if shape == "quota" else 0.8
    leaf = {"cpu": CPU_PER_LEAF * share, "memory": MEMORY_PER_LEAF * share}
    parent = {k: v * leaves for k, v in leaf.items()}
    out: list[tuple[str, dict[str, float], dict[str, float] | None]] = []
    for p in range(parents):
        out.append((f"/p{p:03d}", parent, dict(parent) if shape == "quota" else None))
    for p in range(parents):
        for j in range(leaves):
            out.append((leaf_path(p, j), leaf, dict(leaf) if shape == "quota" else None))
    return out


def capacity(parents: int, leaves: int) -> dict[str, float]:
    return {"cpu": CPU_PER_LEAF * parents * leaves, "memory": MEMORY_PER_LEAF * parents * leaves}


def scenario_text(parents: int, leaves: int, shape: str = "shared") -> str:
    """A scenario file (JSON, which the YAML reader reads too): the tree, one host, a gang on the
    first leaf at 0, which is admitted."""
    pools = []
    for path, reservation, limit in pool_specs(parents, leaves, shape):
        spec: dict[str, Any] = {"path": path, "reservation": reservation}
        if limit is not None:
            spec["limit"] = limit
            spec["reservation_type"] = "static"
        pools.append(spec)
    first = leaf_path(0, 0)
    doc = {
        "name": f"large-tree-{parents}x{leaves}-{shape}",
        "description": f"{parents} parents of {leaves} leaves each: {parents * (leaves + 1)} pools",
        "resources": ["cpu", "memory"],
        "capacity": capacity(parents, leaves),
        "trees": [{"name": TREE, "policy": "per_resource", "gang_timeout": {"default": 600, "limit": 600,
                                                                            "jitter": 0}}],
        "pools": pools,
        "steps": [{"at": 0, "do": [{"enqueue": {"gang": "g1", "pool": first, "tasks": 2,
                                                "resources": {"cpu": 1, "memory": 2}}}],
                   "expect": {"admitted": ["g1"]}}],
    }
    return json.dumps(doc)


@dataclass
class LiveRun:
    pools: int
    seconds: float  # from the first configuration event appended to the gang's admission read back
    admitted: bool
    entitlement_messages: int
    largest_entitlement_bytes: int
    largest_message_bytes: int
    decide_seconds: float = 0.0  # from the gang's enqueue to its admission read back


def live_run(parents: int, leaves: int, shape: str = "shared", nats_url: str | None = None,
             timeout: float = 120.0) -> LiveRun:
    """The tree on JetStream (an embedded nats-server, or `nats_url`), the real tree, admission and
    preemption services in this process (`services.tools.scenario.runner.run_on`'s way, admission
    without its clock): the configuration appended as events (a scenario file would send each
    pool to the tree service as a command, one round trip each), a gang enqueued on the first
    leaf, a tick; done when the gang's `GangAdmitted` is read back. Then every message of the
    stream is measured."""
    import anyio

    if nats_url is not None:
        return anyio.run(run_live, nats_url, parents, leaves, shape, timeout)
    from services.common.natsserver import EmbeddedNats

    with tempfile.TemporaryDirectory(prefix="poolwise-large-tree-") as tmp, EmbeddedNats(Path(tmp)) as server:
        return anyio.run(run_live, server.url, parents, leaves, shape, timeout)


def config_events(parents: int, leaves: int, shape: str) -> list[Event]:
    options = TreeOptions(resources=["cpu", "memory"],
                          gang_timeout=GangTimeoutOptions(default=600.0, limit=600.0, jitter=0.0))
    events: list[Event] = [TreeConfigured(tree=TREE, options=options)]
    for path, reservation, limit in pool_specs(parents, leaves, shape):
        events.append(PoolConfigChanged(tree=TREE, path=path, created=True, config=PoolConfig(
            reservation=reservation, limit=limit, reservation_type="static" if limit else None)))
    events.append(HostRegistered(host="h", resources=capacity(parents, leaves)))
    return events


async def run_live(url: str, parents: int, leaves: int, shape: str, timeout: float) -> LiveRun:
    import anyio

    from events import GangAdmitted, decode_all
    from services.admission.service import serve_admission
    from services.common.jetstream import JetStreamLog
    from services.preemption.service import serve_preemption
    from services.tree.service import serve_tree

    log = await JetStreamLog.connect(url)
    try:
        await log.delete_stream()
        await log.ensure_stream()
        async with anyio.create_task_group() as tg:
            await tg.start(lambda task_status: serve_tree(log, None, task_status=task_status))
            await tg.start(lambda task_status: serve_admission(log, None, clock=False, task_status=task_status))
            await tg.start(lambda task_status: serve_preemption(log, None, task_status=task_status))
            start = time.perf_counter()
            now = time.time()
            config = [Envelope(id=f"large-tree-config-{n}", time=at_seconds(now), source="bench", event=event)
                      for n, event in enumerate(config_events(parents, leaves, shape))]
            for i in range(0, len(config), 1000):
                await log.append(config[i:i + 1000])
            enqueued = time.perf_counter()
            gang = GangEnqueued(tree=TREE, gang="g1", pool=leaf_path(0, 0), job="j", size=2,
                                tasks=[TaskSpec(id=f"g1.{i}", resources={"cpu": 1.0, "memory": 2.0}) for i in range(2)])
            await log.append([Envelope(id="large-tree-g1", time=at_seconds(now), source="bench", event=gang),
                              Envelope(id="large-tree-tick", time=at_seconds(now + 1), source="bench",
                                       event=ClockTicked(tree=TREE))])
            admitted = False
            read_to = 0
            with anyio.move_on_after(timeout):
                while not admitted:
                    for stored in await log.read(read_to + 1):
                        read_to = stored.seq
                        if b"GangAdmitted" in stored.data:
                            admitted = any(isinstance(e.event, GangAdmitted) and e.event.gang == "g1"
                                           for e in decode_all(stored.data))
                    if not admitted:
                        await anyio.sleep(0.01)
            done = time.perf_counter()
            tg.cancel_scope.cancel()
        sizes: list[int] = []
        largest = 0
        for stored in await log.read(1):
            largest = max(largest, len(stored.data))
            if b'"type":"EntitlementsComputed"' in stored.data[:600]:
                sizes.append(len(stored.data))
        return LiveRun(parents * (leaves + 1), done - start, admitted, len(sizes), max(sizes, default=0), largest,
                       done - enqueued)
    finally:
        with anyio.CancelScope(shield=True):
            await log.close()


# -- cycle by cycle, in this process ---------------------------------------------------------------------


@dataclass
class Cycle:
    seconds: float
    decisions: int
    entitlement_events: int
    entitlement_pools: int
    appended_bytes: int
    cpu_seconds: float = 0.0  # this process's CPU time in the cycle (time.process_time: less noisy on a shared machine)
    lent_pools: int = 0  # pools written with their part of step 3 (`EntitlementsComputed` v3's `lent`)
    factors: int = 0  # sibling groups' factors written


@dataclass
class CycleCosts:
    pools: int
    shape: str
    config_seconds: float
    first: Cycle
    quiet: Cycle
    one_leaf: list[Cycle]

    @property
    def one_leaf_ms(self) -> float:
        """The median one-leaf cycle, in milliseconds."""
        values = sorted(c.seconds for c in self.one_leaf)
        return values[len(values) // 2] * 1e3

    @property
    def one_leaf_cpu_ms(self) -> float:
        """The median one-leaf cycle's CPU time, in milliseconds."""
        values = sorted(c.cpu_seconds for c in self.one_leaf)
        return values[len(values) // 2] * 1e3

    @property
    def one_leaf_bytes(self) -> int:
        values = sorted(c.appended_bytes for c in self.one_leaf)
        return values[len(values) // 2]


class _Fold:
    """Admission's state fed as the log feeds it: positions and times go up."""

    def __init__(self) -> None:
        self.state = AdmissionState()
        self.seq = 0
        self.now = 1_767_225_600.0

    def apply(self, event: Event) -> None:
        self.seq += 1
        for outcome in self.state.apply(event, self.seq, self.now):
            self.apply(outcome.event)

    def cycle(self) -> Cycle:
        self.now += 0.01
        self.seq += 1
        start, cpu = time.perf_counter(), time.process_time()
        self.state.apply(ClockTicked(), self.seq, self.now)
        decided = run_cycles(self.state, self.seq)
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        trigger = self.seq
        self.seq += len(decided)
        when = at_seconds(self.now)
        size = pools = ents = lent = factors = 0
        for n, outcome in enumerate(decided):  # the bytes the log gets: each decision in its envelope
            event = outcome.event
            size += len(encode(Envelope(id=f"{trigger}-{n:08d}-{'x' * 20}", time=when, source="admission",
                                        causation=f"{trigger}", basis=trigger, event=event)))
            if event.type == "EntitlementsComputed":
                ents += 1
                pools += len(event.pools)  # type: ignore[attr-defined]
                lent += len(getattr(event, "lent", None) or [])
                factors += len(getattr(event, "factors", None) or [])
        return Cycle(seconds, len(decided), ents, pools, size, cpu, lent, factors)


def cycle_costs(parents: int, leaves: int, shape: str, changes: int = 7) -> CycleCosts:
    """The cycles of one tree (see the module doc); the cyclic collector is off while they run."""
    fold = _Fold()
    options = TreeOptions(resources=["cpu", "memory"],
                          gang_timeout=GangTimeoutOptions(default=3600.0, limit=3600.0, jitter=0.0))
    start = time.perf_counter()
    fold.apply(TreeConfigured(tree=TREE, options=options))
    for path, reservation, limit in pool_specs(parents, leaves, shape):
        fold.apply(PoolConfigChanged(tree=TREE, path=path, created=True,
                                     config=PoolConfig(reservation=reservation, limit=limit,
                                                       reservation_type="static" if limit else None)))
    fold.apply(HostRegistered(host="h", resources=capacity(parents, leaves)))
    config_seconds = time.perf_counter() - start
    made = 0

    def gang(leaf: str) -> GangEnqueued:
        nonlocal made
        made += 1
        name = f"g{made}"
        return GangEnqueued(tree=TREE, gang=name, pool=leaf, job=name, size=1,
                            tasks=[TaskSpec(id=f"{name}.0", resources={"cpu": 1.0, "memory": 2.0})])

    # some leaves hold work already (one in ten of the first parent's, and one leaf of each parent)
    busy = [leaf_path(0, j) for j in range(0, leaves, 10)] + [leaf_path(p, 1 % leaves) for p in range(parents)]
    for leaf in busy:
        fold.apply(gang(leaf))
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        first = fold.cycle()
        quiet = fold.cycle()
        one_leaf: list[Cycle] = []
        for i in range(changes):
            fold.apply(gang(busy[i % len(busy)]))  # a leaf that holds work already: its demand changes
            one_leaf.append(fold.cycle())
    finally:
        if enabled:
            gc.enable()
    return CycleCosts(parents * (leaves + 1), shape, config_seconds, first, quiet, one_leaf)


@dataclass
class LargeTree:
    live: list[LiveRun]
    cycles: list[CycleCosts]

    def to_dict(self) -> dict[str, Any]:
        return {"live": [asdict(r) for r in self.live],
                "cycles": [{**asdict(c), "one_leaf_ms": c.one_leaf_ms, "one_leaf_cpu_ms": c.one_leaf_cpu_ms,
                            "one_leaf_bytes": c.one_leaf_bytes}
                           for c in self.cycles]}


def bench_large_tree(sizes: tuple[tuple[int, int], ...] = ((100, 100), (100, 1000)), live: bool = True,
                     progress: Callable[[str], None] | None = None) -> LargeTree:
    """For each (parents, leaves per parent): a live run on JetStream (`live`) and the cycle costs
    of both shapes."""
    say = progress or (lambda _: None)
    runs: list[LiveRun] = []
    cycles: list[CycleCosts] = []
    for parents, leaves in sizes:
        if live:
            say(f"live on JetStream: {parents} x {leaves}")
            runs.append(live_run(parents, leaves))
        for shape in ("quota", "shared"):
            say(f"cycles: {parents} x {leaves}, {shape}")
            cycles.append(cycle_costs(parents, leaves, shape))
    return LargeTree(runs, cycles)


def main(argv: list[str]) -> None:
    parents = int(argv[0]) if argv else 100
    leaves = int(argv[1]) if len(argv) > 1 else 100
    result = bench_large_tree(((parents, leaves),), live="--no-live" not in argv, progress=print)
    print(json.dumps(result.to_dict(), indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
