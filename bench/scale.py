"""Admission cycles on shapes a long-running cluster reaches and the throughput benchmarks do not:
what one cycle costs as the history, a fair_share queue or the gangs held back by running-job
limits grow. Each shape is measured at two sizes, so that a cost that grows with them shows as a
ratio (linear: the size ratio; flat: about 1). Nothing runs at import; it prints nothing.

1. `history`: a fair_share leaf that has run `n` gangs to the end (each enqueued, admitted, its
   tasks succeeded), then 100 gangs pending: one cycle. The finished gangs are no part of a
   cycle's work (`TreeRuntime.live`), so this stays flat.
2. `fair_share`: one fair_share leaf with `n` gangs of 7 jobs enqueued at once, more than fit: the
   cycle that orders and admits them (`cycle.in_order`: O(n log n)), then one with nothing new.
3. `job_limits`: 1,000 leaves with `max_running_jobs` 2 and 20 jobs each, `n` gangs: one cycle
   admits what the limits let through, then a cycle with every other gang held back (each is
   judged: the checks come in DOMAIN's order; linear in them).

Every cycle is a `ClockTicked` folded and `run_cycles` (which applies each decision as it makes
it, as in the service). Run directly for a quick look: `python -m bench.scale [small] [large]`.
"""

from __future__ import annotations

import gc
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from events import (
    ClockTicked,
    Event,
    GangEnqueued,
    HostRegistered,
    PoolConfig,
    PoolConfigChanged,
    TaskSpec,
    TaskStateChanged,
    TreeConfigured,
    TreeOptions,
)
from events.config import GangTimeoutOptions
from services.admission.domain.decide import run_cycles
from services.admission.domain.state import AdmissionState

TREE = "scale"


@dataclass
class Fold:
    """One admission state fed as a log would feed it: positions and times go up."""

    state: AdmissionState = field(default_factory=AdmissionState)
    seq: int = 0
    now: float = 1_767_225_600.0  # 2026-01-01T00:00:00Z

    def apply(self, event: Event) -> None:
        self.seq += 1
        for outcome in self.state.apply(event, self.seq, self.now):
            self.apply(outcome.event)

    def cycle(self) -> tuple[float, int]:
        """A tick and the cycle it starts (its decisions applied as they are made, at the tick:
        the service skips them when it reads them back): (seconds, decisions)."""
        self.now += 0.01
        self.seq += 1
        start = time.perf_counter()
        self.state.apply(ClockTicked(), self.seq, self.now)
        decided = run_cycles(self.state, self.seq)
        seconds = time.perf_counter() - start
        self.seq += len(decided)  # where they land
        return seconds, len(decided)


def _tree(*pools: PoolConfigChanged, cpu: float) -> Fold:
    fold = Fold()
    options = TreeOptions(resources=["cpu"], gang_timeout=GangTimeoutOptions(default=3600.0, limit=3600.0, jitter=0.0))
    for event in (TreeConfigured(tree=TREE, options=options), *pools,
                  HostRegistered(host="cluster", resources={"cpu": cpu})):
        fold.apply(event)
    return fold


def _pool(path: str, **config: object) -> PoolConfigChanged:
    return PoolConfigChanged(tree=TREE, path=path, created=True, config=PoolConfig.model_validate(config))


def _gang(name: str, pool: str, job: str) -> GangEnqueued:
    return GangEnqueued(tree=TREE, gang=name, pool=pool, job=job, size=1,
                        tasks=[TaskSpec(id=f"{name}.0", resources={"cpu": 1.0})])


def history(n: int) -> dict[str, float]:
    fold = _tree(_pool("/a", mode="fair_share"), cpu=1000.0)
    for start in range(0, n, 500):
        names = [f"d{i}" for i in range(start, min(n, start + 500))]
        for name in names:
            fold.apply(_gang(name, "/a", f"j{len(name) % 7}"))
        fold.cycle()
        for name in names:
            fold.apply(TaskStateChanged(tree=TREE, gang=name, task=f"{name}.0", state="succeeded"))
    for i in range(100):
        fold.apply(_gang(f"p{i}", "/a", f"j{i % 7}"))
    seconds, _ = fold.cycle()
    rt = fold.state.runtime(TREE)
    return {"finished": n, "cycle_ms": seconds * 1e3, "gangs": len(rt.gangs), "live": len(rt.live)}


def fair_share(n: int) -> dict[str, float]:
    fold = _tree(_pool("/a", mode="fair_share"), cpu=n * 0.5)
    for i in range(n):
        fold.apply(_gang(f"g{i}", "/a", f"j{i % 7}"))
    first, decided = fold.cycle()
    again, _ = fold.cycle()
    return {"pending": n, "first_cycle_ms": first * 1e3, "decisions": decided, "next_cycle_ms": again * 1e3}


def job_limits(n: int, leaves: int = 1000) -> dict[str, float]:
    fold = _tree(*[_pool(f"/l{i}", max_running_jobs=2) for i in range(leaves)], cpu=float(n))
    for i in range(n):
        fold.apply(_gang(f"g{i}", f"/l{i % leaves}", f"j{i // leaves % 20}"))
    first, decided = fold.cycle()
    again, _ = fold.cycle()
    return {"gangs": n, "first_cycle_ms": first * 1e3, "decisions": decided, "held_back_cycle_ms": again * 1e3}


SHAPES: dict[str, Callable[[int], dict[str, float]]] = {
    "history": history, "fair_share": fair_share, "job_limits": job_limits}


def measure(sizes: dict[str, tuple[int, int]]) -> dict[str, list[dict[str, float]]]:
    """Each shape at its (small, large) sizes, the garbage collector off while a shape runs (as the
    services fold)."""
    out: dict[str, list[dict[str, float]]] = {}
    for name, (small, large) in sizes.items():
        runs = []
        for n in (small, large):
            gc.collect()
            gc.disable()
            try:
                runs.append(SHAPES[name](n))
            finally:
                gc.enable()
        out[name] = runs
    return out


if __name__ == "__main__":
    small = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    large = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
    for shape, runs in measure({name: (small, large) for name in SHAPES}).items():
        print(shape, runs)
