"""What a rebuild's snapshots cost: admission's fold of a whole-lifecycle log from the start
(`folding.rebuild`), without snapshots and saving one every `EVERY` positions as it goes.

    python -m bench.rebuild_snapshots [GANGS] [EVERY] [PAIRS]

The log is `tests/replay/biglog`'s (about 5 messages per gang), in memory; the snapshots go to a
`MemorySnapshots` (no network: what is measured is the fold's side, the fork and the pickling).
Alternated, `PAIRS` pairs; per run: the parent's CPU seconds, the forked children's (the
pickling), wall seconds and the snapshots saved. Prints one JSON line per run.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import anyio


async def one(log: Any, every: int | None) -> dict[str, Any]:
    from services.admission.folder import SUBJECTS, AdmissionFolder
    from services.common.folding import rebuild
    from services.common.snapshots import MemorySnapshots, SnapshotPolicy

    store = MemorySnapshots()
    policy = SnapshotPolicy(store, every=every) if every else None
    before, wall, cpu = os.times(), time.perf_counter(), time.process_time()
    folded = await rebuild(log, AdmissionFolder(), SUBJECTS, store, policy=policy)
    after = os.times()
    return {"every": every, "folded": folded, "cpu_s": time.process_time() - cpu,
            "children_cpu_s": after.children_user + after.children_system
            - before.children_user - before.children_system,
            "wall_s": time.perf_counter() - wall, "snapshots": len(await store.candidates("admission")),
            "load": os.getloadavg()[0]}


async def main() -> None:
    from services.common.memlog import MemoryLog
    from tests.replay.biglog import build

    args = sys.argv[1:]
    gangs = int(args[0]) if args else 40_000
    every = int(args[1]) if len(args) > 1 else 50_000
    pairs = int(args[2]) if len(args) > 2 else 3
    log = MemoryLog()
    await build(log, gangs)
    print(json.dumps({"gangs": gangs, "messages": await log.last_seq()}), flush=True)
    for _ in range(pairs):
        for chosen in (None, every):
            print(json.dumps(await one(log, chosen)), flush=True)


if __name__ == "__main__":
    anyio.run(main)
