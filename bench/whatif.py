"""The what-if and time travel on a long history (issue 21): `poolwise bench whatif`.

The history is `tests/replay/biglog.py`'s whole-lifecycle log (one tree, 20 leaf pools, rounds of
500 two-task gangs enqueued, admitted, run and finished: ~5 messages and ~7 events per gang),
built in memory and copied onto a private nats-server. Admission's snapshot is saved where the
service would have saved its newest one (every `POOLWISE_SNAPSHOT_EVERY` = 100,000 positions:
the last multiple of it in the log; in a shorter log, --quick's, every 10,000), made by the
service's own fold and snapshot code, so that the what-if starts from it and folds the tail
after it, as it would on a live system.

Measured, in this process (wall seconds, and CPU seconds of this process: the nats-server's
are not counted):
- the what-if of `apply --dry-run` / `whatif`: the fold (snapshot, then the tail), then the plan,
  the copy of the state, the entitlements before and after and the outlook of each (the next
  cycle and the preemption passes): one pool's reservation changed;
- `--at` (time travel): the fold up to a position after the snapshot (half-way through the
  tail), and up to a position before it (half-way through the log: no snapshot at or before it
  is kept there, so the fold starts from the log's start);
- the snapshot alone, as the what-if loads it (admission's state) and as admission's restart
  loads it (the state and explain's notes: issue 18's restart starts there).

The goal (issue 21): the what-if answers in at most 2 s on the 100k-gang history.
"""

from __future__ import annotations

import tempfile
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.report import Row, Section

GOAL_S = 2.0
SNAPSHOT_EVERY = 100_000  # the services' default (`services.common.snapshots.policy_for`)
# Log time per round of 500 gangs: the trees' default `gang_retention` (an hour of log time) keeps
# the last 12 rounds, 6,000 finished gangs, as the soak's history keeps (bench/soak.py: 100 gangs/s
# and a retention of 60 s); 50.0 keeps 36,000, 1.0 every gang
SECONDS_PER_ROUND = 300.0


@dataclass(frozen=True)
class Timing:
    wall: float
    cpu: float


@dataclass(frozen=True)
class WhatIfResult:
    gangs: int
    messages: int
    snapshot_seq: int  # 0: none
    gangs_held: int  # gangs in admission's state at the end (finished ones are kept an hour of log time)
    load: Timing  # the snapshot alone: fetched from the object store, decoded, loaded (the state)
    restart: Timing  # the same with explain's notes, as the admission service loads it
    fold: Timing
    predict: Timing
    at_tail: Timing
    at_head: Timing
    at_tail_seq: int
    at_head_seq: int

    @property
    def total(self) -> Timing:
        return Timing(self.fold.wall + self.predict.wall, self.fold.cpu + self.predict.cpu)


async def _timed(work: Callable[[], Any]) -> tuple[Any, Timing]:
    wall, cpu = time.perf_counter(), time.process_time()
    found = await work()
    return found, Timing(time.perf_counter() - wall, time.process_time() - cpu)


async def measure(gangs: int, on_progress: Callable[[str], None] | None = None,
                  seconds: float = SECONDS_PER_ROUND) -> WhatIfResult:
    from services.common.memlog import MemoryLog
    from services.common.natsserver import EmbeddedNats
    from tests.replay.biglog import build, copy

    say = on_progress or (lambda _text: None)
    memory = MemoryLog()
    say(f"whatif: building a {gangs:,}-gang history in memory")
    await build(memory, gangs, seconds=seconds)
    messages = await memory.read(1)
    with tempfile.TemporaryDirectory(prefix="poolwise-whatif-") as tmp:
        async with EmbeddedNats(Path(tmp)) as server:
            say(f"whatif: copying {len(messages):,} messages to a private nats-server")
            await copy(messages, server.url)
            # a history shorter than the default interval (--quick): as with POOLWISE_SNAPSHOT_EVERY=10000
            every = SNAPSHOT_EVERY if len(messages) >= SNAPSHOT_EVERY else SNAPSHOT_EVERY // 10
            snapshot = (len(messages) // every) * every
            if snapshot:
                say(f"whatif: admission's snapshot at {snapshot:,}")
                await _save_snapshot(server.url, messages, snapshot)
            return await _measure_on(server.url, gangs, len(messages), snapshot, say)


async def _measure_on(url: str, gangs: int, last: int, snapshot: int, say: Callable[[str], None]) -> WhatIfResult:
    from services.admission.folder import AdmissionFolder
    from services.admission.queries import ExplainingFolder
    from services.tools.cli.dry_run import live_state, what_if
    from services.tools.cli.folds import fold_admission
    from services.tree.domain.cluster import config_of

    say("whatif: the snapshot alone, then the what-if (fold from the snapshot, then predict)")
    _, load = await _timed(lambda: _load_snapshot(url, last, AdmissionFolder()))
    _, restart = await _timed(lambda: _load_snapshot(url, last, ExplainingFolder()))
    state, fold = await _timed(lambda: live_state(url))
    held = sum(len(rt.gangs) for rt in state.trees.values())
    target = config_of(state.config)
    assert target.pools is not None
    key = next(iter(target.pools))
    config = target.pools[key]
    target.pools[key] = config.model_copy(update={"reservation": {k: v / 2 for k, v in
                                                                  (config.reservation or {}).items()}})

    async def predict() -> Any:
        return what_if(state, target, prune=False)

    found, predicted = await _timed(predict)
    assert found.plan.ok and len(found.plan.changes) == 1, found.plan
    tail_at = snapshot + max(1, (last - snapshot) // 2) if snapshot else last // 2
    head_at = max(1, snapshot // 2) if snapshot else max(1, last // 4)
    say(f"whatif: --at {tail_at:,} and --at {head_at:,}")
    _, at_tail = await _timed(lambda: fold_admission(url, str(tail_at)))
    _, at_head = await _timed(lambda: fold_admission(url, str(head_at)))
    return WhatIfResult(gangs, last, snapshot, held, load, restart, fold, predicted, at_tail, at_head, tail_at,
                        head_at)


async def _load_snapshot(url: str, last: int, folder: Any) -> int:
    """Admission's newest snapshot fetched and loaded into `folder`, nothing folded (the fold's
    first part; an `ExplainingFolder` loads explain's notes too, an `AdmissionFolder` the state alone)."""
    from services.common.jetstream import JetStreamLog
    from services.tools.cli.folds import restore

    log = await JetStreamLog.connect(url, name="bench-whatif")
    try:
        return await restore(log, folder, last)
    finally:
        await log.close()


async def _save_snapshot(url: str, messages: list[Any], seq: int) -> None:
    """Admission's snapshot at `seq`, as the service saves it (its fold, its snapshot code)."""
    from nats.js import JetStreamContext

    from events import read_envelope
    from services.admission.folder import SUBJECTS
    from services.admission.queries import ExplainingFolder
    from services.common.folding import fold_batch
    from services.common.jetstream import JetStreamLog
    from services.common.memlog import subject_filter
    from services.common.snapshots import ObjectStoreSnapshots, Snapshot, code_fingerprint

    folder = ExplainingFolder()
    wanted = subject_filter(SUBJECTS)
    fold_batch(folder, [m for m in messages[:seq] if wanted(m.subject)], 0, read_envelope)
    data = Snapshot("admission", seq, code_fingerprint(), folder.export(),
                    anchor=zlib.crc32(messages[seq - 1].data)).encode()
    log = await JetStreamLog.connect(url, name="bench-whatif")
    try:
        assert isinstance(log.stream, str)
        await ObjectStoreSnapshots(JetStreamContext(log.nc), log.stream).save("admission", seq, data)
    finally:
        await log.close()


def rows(result: WhatIfResult) -> Section:
    """The section of docs/performance.md."""
    r = result
    s = Section("whatif", "What-if (issue 21): `apply --dry-run` / `whatif` and `--at` on a long history "
                          "(bench/whatif.py)",
                params={"gangs": f"{r.gangs:,}", "messages": f"{r.messages:,}",
                        "snapshot at": f"{r.snapshot_seq:,}" if r.snapshot_seq else "none",
                        "gangs in the state": f"{r.gangs_held:,}"})
    total = r.total
    s.add(Row("what-if, whole (fold + predict)", total.wall, "s", goal=f"<= {GOAL_S:g} s", met=total.wall <= GOAL_S))
    s.add(Row("what-if, whole, CPU of this process", total.cpu, "CPU s"))
    s.add(Row("  fold: snapshot, then the tail", r.fold.wall, "s"))
    s.add(Row("  fold, CPU", r.fold.cpu, "CPU s"))
    s.add(Row("    of which the snapshot alone (fetched, decoded, loaded)", r.load.wall, "s"))
    s.add(Row("    the snapshot alone, CPU", r.load.cpu, "CPU s"))
    s.add(Row("admission's restart: its snapshot with explain's notes", r.restart.wall, "s"))
    s.add(Row("  the same, CPU", r.restart.cpu, "CPU s"))
    s.add(Row("  predict: plan, copy, entitlements, cycles and passes", r.predict.wall, "s"))
    s.add(Row("  predict, CPU", r.predict.cpu, "CPU s"))
    s.add(Row(f"--at {r.at_tail_seq:,} (after the snapshot)", r.at_tail.wall, "s"))
    s.add(Row(f"--at {r.at_head_seq:,} (before it: from the start)", r.at_head.wall, "s"))
    s.notes.append("In the benchmark's process (the CLI's): wall seconds, and its CPU seconds (the nats-server's "
                   f"not counted). {SECONDS_PER_ROUND:g} s of log time per round of 500 gangs: the state keeps "
                   "the gangs finished in the last hour of log time (`gang_retention`).")
    return s
