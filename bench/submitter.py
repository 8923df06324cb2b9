"""The end-to-end benchmark's submitter, in a process of its own (so that it does not share the
services' event loop): publish gangs, watch for each gang's decision, then wait until the
services' durable consumers have folded, projected and acknowledged everything.

    python -m bench.submitter '<json spec>'     # prints one JSON line of results

Spec keys: `url`, `workload` (fields of `bench.workload.Workload`), `prefix`, `start`, `count`,
`mode` (`burst`: everything at once, pipelined and acknowledged; `paced`: `rate` gangs per
second in slices of `interval` seconds), `timeout` (seconds, for each wait), `consumers`
(durable names to wait for).

Times are `time.perf_counter()` of this process, from the first publish:
- `publish_s`: every publish acknowledged by JetStream;
- `decided_s`: the last gang's `GangAdmitted` or `GangMovedToQueue` seen on the decision subject
  (a core NATS subscription: a message reaches it when JetStream stores it);
- `projected_s`: the consumers have nothing pending nor unacknowledged (admission and preemption
  acknowledge a batch after its decisions are published and their projections committed), and
  the tree service's read models have committed the whole log (it acknowledges a batch once
  folded and writes its projections behind: its `checkpoints` table is asked, over
  `poolwise.cmd.tree.sql`, until every projection's checkpoint reaches the stream's last
  sequence). `projection_lag_s`: how much of `projected_s` came after the consumers drained.
Per gang, latency = its decision's arrival - the moment its publish was handed to the client,
split in two: `cycle` = its decision's arrival - the last clock tick seen before it (the cycle that
decided it: tick stored, read back, cycle run, decisions stored), and `wait` = the rest (until a
tick came after it: the previous cycle still in flight, the clock's debounce, the fold).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import json
import math
import os
import re
import sys
import time
from typing import Any

from nats.aio.msg import Msg
from nats.js.errors import NotFoundError

from bench.workload import Workload, envelope, gang_events
from events import derived_id
from events.codec import pack_parts
from events.subjects import STREAM, clock, command, decision
from services.common.jetstream import JetStreamLog
from services.common.nats_client import new_client
from services.common.supervisor import die_with_parent

_DECIDED = re.compile(rb'"type":"(GangAdmitted|GangMovedToQueue)"')
_GANG = re.compile(rb'"gang":"([^"]+)"')
_OTHER = re.compile(rb'"type":"(EntitlementsComputed|CycleCompleted)"')


def percentile(values: list[float], q: float) -> float:
    """The `q` quantile (0..1) by nearest rank; 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
    return ordered[index]


class Watcher:
    """Receives the decisions of one tree; notes when each awaited gang's first decision came."""

    def __init__(self, wanted: set[str]) -> None:
        self.wanted = wanted
        self.seen: dict[str, float] = {}
        self.done = asyncio.Event()
        self.cycles = 0
        self.entitlement_bytes = 0
        self.entitlement_max = 0
        self.moved = 0
        self.ticks: list[float] = []  # arrival of each clock tick (perf_counter), in order
        if not wanted:
            self.done.set()

    async def on_tick(self, msg: Msg) -> None:
        self.ticks.append(time.perf_counter())

    def cycle_of(self, decided: float) -> float:
        """Seconds from the last tick seen before `decided` to `decided` (0 if none was seen)."""
        index = bisect.bisect_right(self.ticks, decided)
        return decided - self.ticks[index - 1] if index else 0.0

    async def on_msg(self, msg: Msg) -> None:
        now = time.perf_counter()
        data = msg.data
        if data[:1] == b"[":  # a pack of decisions (events.encode_pack)
            for part in pack_parts(data):
                self.on_event(part, now)
        else:
            self.on_event(data, now)

    def on_event(self, data: bytes, now: float) -> None:
        head = data[:600]
        found = _DECIDED.search(head)
        if found is None:
            other = _OTHER.search(head)
            if other is not None:
                if other.group(1) == b"CycleCompleted":
                    self.cycles += 1
                else:
                    self.entitlement_bytes += len(data)
                    self.entitlement_max = max(self.entitlement_max, len(data))
            return
        gang_match = _GANG.search(data, found.end())
        if gang_match is None:
            return
        gang = gang_match.group(1).decode()
        if gang in self.wanted and gang not in self.seen:
            self.seen[gang] = now
            if found.group(1) == b"GangMovedToQueue":
                self.moved += 1
            if len(self.seen) == len(self.wanted):
                self.done.set()


async def _drained(js: Any, consumers: list[str], deadline: float) -> bool:
    """Every consumer has delivered and had acknowledged all it matches (False at the deadline).
    A consumer not found is asked again: under load a service makes its consumer again (after a
    reconnect, or out of order delivery) and it is briefly gone."""
    while time.perf_counter() < deadline:
        quiet = True
        for name in consumers:
            try:
                info = await js.consumer_info(STREAM, name)
            except NotFoundError:
                quiet = False
                break
            if info.num_pending or info.num_ack_pending:
                quiet = False
                break
        if quiet:
            return True
        await asyncio.sleep(0.005)
    return False


async def _projected(nc: Any, last_seq: int, deadline: float) -> bool:
    """The tree service's projections have committed everything up to `last_seq` (False at the
    deadline)."""
    query = json.dumps({"sql": "SELECT min(last_seq) FROM checkpoints"}).encode()
    while time.perf_counter() < deadline:
        with contextlib.suppress(Exception):  # no answer yet (starting, busy): ask again
            reply = json.loads((await nc.request(command("tree", "sql"), query, timeout=1.0)).data)
            rows = reply.get("data", {}).get("rows") or [[None]]
            if rows[0][0] is not None and int(rows[0][0]) >= last_seq:
                return True
        await asyncio.sleep(0.02)  # each question costs the tree service a query: not too often
    return False


def sampled(index: int, ratio: float) -> bool:
    """Whether gang `index` is among the `ratio` of gangs a ratio sampler records (every 1/ratio-th):
    the SDK carries a context for those only (`POOLWISE_BENCH_TRACED`)."""
    return ratio > 0 and int(index * ratio) != int((index + 1) * ratio)


def carried(index: int, ratio: float) -> dict[str, str]:
    """The W3C context the SDK carries for gang `index` (its sampled flag as `sampled` says)."""
    ids = derived_id("bench-trace", index)
    return {"traceparent": f"00-{ids}-{ids[:16]}-{'01' if sampled(index, ratio) else '00'}"}


async def submit(spec: dict[str, Any]) -> dict[str, Any]:
    w = Workload(**spec["workload"])
    prefix, start, count = spec["prefix"], int(spec["start"]), int(spec["count"])
    timeout = float(spec.get("timeout", 120.0))
    now = time.time()
    events = list(gang_events(w, prefix=prefix, start=start, count=count))
    envelopes = [envelope(e, f"{prefix}-{start + i}", now, source="sdk:bench") for i, e in enumerate(events)]
    if os.environ.get("POOLWISE_BENCH_TRACED"):  # (docs/performance.md, "Metrics on and off")
        ratio = float(os.environ["POOLWISE_BENCH_TRACED"])
        envelopes = [e.model_copy(update={"trace": carried(start + i, ratio)}) if sampled(start + i, ratio) else e
                     for i, e in enumerate(envelopes)]
    ids = [e.gang for e in events]
    nc = new_client()  # as the submitter SDK connects (services.common.connection)
    await nc.connect(spec["url"], name="poolwise-bench-submitter")
    try:
        log = JetStreamLog(nc)
        js = nc.jetstream()
        watcher = Watcher(set(ids))
        sub = await nc.subscribe(decision(w.tree, "admission"), cb=watcher.on_msg)
        ticks = await nc.subscribe(clock("*"), cb=watcher.on_tick)
        await nc.flush()
        sent: dict[str, float] = {}
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        if spec["mode"] == "burst":
            for gang in ids:
                sent[gang] = t0
            await asyncio.wait_for(log.append(envelopes), timeout)
        else:
            rate, interval = float(spec["rate"]), float(spec.get("interval", 0.005))
            per_slice = max(1, round(rate * interval))
            tasks: list[asyncio.Task[Any]] = []
            for index, first in enumerate(range(0, len(envelopes), per_slice)):
                delay = t0 + index * per_slice / rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                stamp = time.perf_counter()
                for gang in ids[first:first + per_slice]:
                    sent[gang] = stamp
                tasks.append(asyncio.create_task(log.append(envelopes[first:first + per_slice])))
            await asyncio.wait_for(asyncio.gather(*tasks), timeout)
        publish_s = time.perf_counter() - t0
        offered_s = max(sent.values()) - t0 if sent else 0.0
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(watcher.done.wait(), timeout)
        decided_s = (max(watcher.seen.values()) - t0) if watcher.seen else 0.0
        consumers = list(spec.get("consumers", ["admission", "preemption"]))
        drained = await _drained(js, consumers, time.perf_counter() + timeout)
        drained_s = time.perf_counter() - t0
        if "tree" in consumers:
            stream_seq = (await js.stream_info(STREAM)).state.last_seq
            drained = await _projected(nc, stream_seq, time.perf_counter() + timeout) and drained
        projected_s = time.perf_counter() - t0
        await sub.unsubscribe()
        await ticks.unsubscribe()
        latencies = [watcher.seen[g] - sent[g] for g in ids if g in watcher.seen]
        cycles = [watcher.cycle_of(watcher.seen[g]) for g in ids if g in watcher.seen]
        waits = [max(0.0, total - cycle) for total, cycle in zip(latencies, cycles, strict=True)]
        last_seq = (await js.stream_info(STREAM)).state.last_seq
        return {
            "mode": spec["mode"], "count": count, "publish_s": publish_s, "offered_s": offered_s,
            "decided": len(watcher.seen), "missing": count - len(watcher.seen), "moved": watcher.moved,
            "decided_s": decided_s, "projected_s": projected_s, "drained": drained,
            "projection_lag_s": projected_s - drained_s,
            "p50_ms": percentile(latencies, 0.50) * 1e3, "p90_ms": percentile(latencies, 0.90) * 1e3,
            "p99_ms": percentile(latencies, 0.99) * 1e3, "max_ms": max(latencies, default=0.0) * 1e3,
            "wait_p50_ms": percentile(waits, 0.50) * 1e3, "wait_p99_ms": percentile(waits, 0.99) * 1e3,
            "cycle_p50_ms": percentile(cycles, 0.50) * 1e3, "cycle_p99_ms": percentile(cycles, 0.99) * 1e3,
            "ticks": len(watcher.ticks),
            "cycles": watcher.cycles, "entitlement_bytes": watcher.entitlement_bytes,
            "entitlement_max_bytes": watcher.entitlement_max, "stream_last_seq": last_seq,
            "submitter_cpu_us_per_gang": round((time.process_time() - cpu0) * 1e6 / max(count, 1), 1),
        }
    finally:
        await nc.drain()


def main(argv: list[str]) -> None:
    die_with_parent()  # started by `bench.pipeline` (`PARENT_ENV`): it goes when that goes, even killed
    spec = json.loads(argv[0])
    result = asyncio.run(submit(spec))
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
