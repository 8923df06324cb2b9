"""Every benchmark as a `Section` of rows with ratios against the raw speeds of the same run
(`bench.baseline`), at full or quick (CI smoke) sizes. Nothing runs at import.

    sections = await run_benchmarks(["admission", "pipeline"], quick=True)

Full sizes (`poolwise bench all`, about 5 minutes on 2 cores): entitlement trees of 1k, 10k,
100k pools (and 1k, 10k with the dominant policy); admission with 100k gangs over 1k leaves;
the pipeline with 50k gangs over 100 leaves, then 5k and 1k gangs/s offered for 4 s each;
projections of 100k events; raw JetStream on 50k messages of a gang's size.
Quick sizes run in well under 30 s. Not in `all`, run only when named: `soak` (bench/soak.py),
the whole system at 100k and 1M gangs of history (10k and 100k quick: about 10 minutes).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from bench.admission import bench_admission
from bench.baseline import Baseline, harmonic, measure_baseline
from bench.entitlement import bench_entitlement
from bench.pipeline import bench_pipeline
from bench.projection_speed import measure
from bench.report import Row, Section, machine_facts
from bench.scale import measure as measure_scale
from bench.workload import Workload, gang_payload_size
from services.common.natsserver import EmbeddedNats
from services.common.packs import PACK_EVENTS

NAMES: tuple[str, ...] = ("raw", "entitlement", "admission", "scale", "large-tree", "projection", "pipeline")
# Run only when named (not part of `bench all`): the soak takes ~10 minutes even with --quick; the
# what-if builds a 100k-gang history first (minutes).
EXTRA: tuple[str, ...] = ("soak", "whatif")
NEEDS_BASELINE = frozenset({"raw", "admission", "projection"})

ENTITLEMENT_GOALS: dict[int, float] = {10_000: 0.050, 100_000: 1.0}  # pools -> seconds
PIPELINE_GOAL_PER_S = 20_000.0
PIPELINE_GOAL_SHARE = 0.5
LATENCY_GOAL_MS = 50.0
LATENCY_GOAL_RATE = 5000.0


@dataclass(frozen=True)
class Sizes:
    """How big each benchmark runs; every count and time is bounded here."""

    raw_n: int
    duck_n: int
    entitlement: tuple[int, ...]
    entitlement_dominant: tuple[int, ...]
    entitlement_repeat: int
    admission: Workload
    projection_n: int
    pipeline_gangs: int
    pipeline_leaves: int
    pipeline_rates: tuple[float, ...]
    pipeline_seconds: float
    pipeline_raw_n: int
    pipeline_processes: bool = True  # each service in its own process, as `poolwise up` runs them
    scale: tuple[tuple[str, tuple[int, int]], ...] = (("history", (5000, 100_000)), ("fair_share", (5000, 20_000)),
                                                      ("job_limits", (20_000, 90_000)))
    large_tree: tuple[tuple[int, int], ...] = ((100, 100), (100, 1000))  # (parents, leaves per parent)
    soak: tuple[int, int] = (100_000, 1_000_000)  # gangs of history, small and large
    whatif: int = 100_000  # gangs of history (bench/whatif.py)

    @classmethod
    def full(cls) -> Sizes:
        return cls(raw_n=50_000, duck_n=50_000, entitlement=(1000, 10_000, 100_000),
                   entitlement_dominant=(1000, 10_000), entitlement_repeat=5,
                   admission=Workload(gangs=100_000, leaves=1000), projection_n=100_000,
                   pipeline_gangs=50_000, pipeline_leaves=100, pipeline_rates=(LATENCY_GOAL_RATE, 1000.0),
                   pipeline_seconds=4.0, pipeline_raw_n=50_000)

    @classmethod
    def quick(cls) -> Sizes:
        return cls(raw_n=3000, duck_n=5000, entitlement=(1000, 10_000), entitlement_dominant=(),
                   entitlement_repeat=2, admission=Workload(gangs=3000, leaves=100, hosts=20),
                   projection_n=5000, pipeline_gangs=1500, pipeline_leaves=20,
                   pipeline_rates=(LATENCY_GOAL_RATE,), pipeline_seconds=0.4, pipeline_raw_n=2000,
                   scale=(("history", (200, 800)), ("fair_share", (200, 800)), ("job_limits", (2000, 4000))),
                   large_tree=((30, 100),), soak=(10_000, 100_000), whatif=10_000)


def _share(value: float, reference: float) -> float | None:
    return value / reference if reference > 0 else None


# --- raw ------------------------------------------------------------------------------------------


def raw_section(base: Baseline) -> Section:
    s = Section("raw", "Raw speeds: JetStream from Python, the log adapter, DuckDB",
                params={"messages": base.n, "payload_bytes": base.payload_size})
    n = base.nats
    pub, cons = base.publish, base.consume
    s.add(Row("JetStream publish, pipelined (acks in one callback)", pub, "msg/s"))
    s.add(Row("JetStream publish_async (nats-py futures)", n.get("raw_publish_async", 0.0), "msg/s",
              _share(n.get("raw_publish_async", 0.0), pub), "pipelined publish"))
    s.add(Row("JetStream consume, pull + one callback", cons, "msg/s"))
    s.add(Row("JetStream consume, fetch()", n.get("raw_consume_fetch", 0.0), "msg/s",
              _share(n.get("raw_consume_fetch", 0.0), cons), "pull + callback"))
    s.add(Row("JetStream consume, ordered push + callback", n.get("raw_consume_push_callback", 0.0), "msg/s",
              _share(n.get("raw_consume_push_callback", 0.0), cons), "pull + callback"))
    s.add(Row("publish then consume, one process", base.publish_consume, "msg/s"))
    s.add(Row("JetStreamLog.append (adapter)", n.get("adapter_append", 0.0), "msg/s",
              _share(n.get("adapter_append", 0.0), pub), "pipelined publish"))
    s.add(Row("JetStreamLog.read (adapter)", n.get("adapter_read", 0.0), "msg/s",
              _share(n.get("adapter_read", 0.0), cons), "pull + callback"))
    s.add(Row("JetStreamLog.consume (adapter)", n.get("adapter_consume", 0.0), "msg/s",
              _share(n.get("adapter_consume", 0.0), cons), "pull + callback"))
    s.add(Row("DuckDB Arrow insert, event-log rows", base.duckdb_arrow_rows_per_s, "rows/s"))
    s.add(Row("events.decode (pydantic)", base.decode_per_s, "events/s", _share(base.decode_per_s, cons),
              "pull + callback"))
    s.notes.append("Each JetStream number is one run on a private nats-server on this machine (loopback); "
                   "publisher and consumer share one Python process, the server takes the other core.")
    return s


# --- entitlement ----------------------------------------------------------------------------------


def entitlement_section(sizes: Sizes) -> Section:
    s = Section("entitlement", "Entitlement engine (bench/entitlement.py)",
                params={"pools": "/".join(f"{n // 1000}k" for n in sizes.entitlement), "kinds": 4,
                        "repeat": sizes.entitlement_repeat})
    runs: list[dict[str, Any]] = bench_entitlement(sizes.entitlement, repeat=sizes.entitlement_repeat)
    for contended in (False, True):  # dominant and hdrf side by side, as generated and contended
        for policy in ("dominant", "hdrf") if sizes.entitlement_dominant else ():
            runs += bench_entitlement(sizes.entitlement_dominant, policy=policy, repeat=sizes.entitlement_repeat,
                                      contended=contended)
    for row in runs:
        n, policy = int(row["pools"]), str(row["label"])
        tag = f"{n // 1000}k pools, {policy}"
        goal = ENTITLEMENT_GOALS.get(n)
        for key, label in (("compute_s", "compute (prepared engine)"),
                           ("update_compute_s", "1% leaves changed + compute"),
                           ("build_s", "build engine from TreeInput"),
                           ("end_to_end_s", "compute_entitlements (build + compute: what a cycle pays)"),
                           ("read_all_s", "read every PoolEntitlement")):
            value = float(row[key])
            judged = goal is not None and key in ("compute_s", "end_to_end_s")
            s.add(Row(f"{tag}: {label}", value * 1e3, "ms",
                      ratio=value / goal if judged and goal else None,
                      against="of the goal's budget" if judged else "",
                      goal=f"<= {goal * 1e3:g} ms" if judged and goal else "",
                      met=(value <= goal) if judged and goal else None))
    s.notes.append("Goals: 10k pools within 50 ms, 100k within 1 s, judged on the engine's compute and on "
                   "compute_entitlements (services/admission/domain/entitle.py:compute_for calls it every cycle, "
                   "so the service pays build + compute + reading every pool).")
    return s


# --- admission (domain) ---------------------------------------------------------------------------


def admission_section(base: Baseline, sizes: Sizes) -> Section:
    w = sizes.admission
    speed = bench_admission(w)
    s = Section("admission", "Admission domain: fold and cycles (bench/admission.py)",
                params={"gangs": w.gangs, "leaf_pools": w.leaves, "hosts": w.hosts, "tasks_per_gang": w.tasks_per_gang,
                        "fill": w.fill, "non_preemptible": w.non_preemptible})
    cons, pub = base.consume, base.publish
    s.add(Row("decode GangEnqueued (events.decode)", speed.decode_per_s, "events/s", _share(speed.decode_per_s, cons),
              "raw JetStream consume"))
    s.add(Row("fold GangEnqueued (AdmissionState.apply)", speed.fold_per_s, "events/s",
              _share(speed.fold_per_s, cons), "raw JetStream consume"))
    from_bytes = harmonic(speed.decode_per_s, speed.fold_per_s)
    s.add(Row("decode + fold, per service", from_bytes, "events/s", _share(from_bytes, cons), "raw JetStream consume"))
    s.add(Row("entitlements for the tree (compute_for)", speed.entitlement_s * 1e3, "ms"))
    first = speed.cycles[0] if speed.cycles else None
    if first is not None:
        s.add(Row("first cycle: decide_tree", first.decide_s * 1e3, "ms"))
        s.add(Row("first cycle: gangs decided", first.admitted + first.moved, "count"))
        s.add(Row("first cycle: apply its decisions", first.readback_s * 1e3, "ms"))
        per_s = first.decisions / first.readback_s if first.readback_s > 0 else 0.0
        s.add(Row("applying a cycle's decisions", per_s, "events/s", _share(per_s, cons), "raw JetStream consume"))
    s.add(Row("wrap + encode decisions (envelope, derived id)", speed.wrap_encode_per_s, "events/s",
              _share(speed.wrap_encode_per_s, pub), "raw JetStream publish"))
    s.add(Row("cycles until nothing moves", len(speed.cycles), "count"))
    s.add(Row("gangs admitted", speed.admitted, "count"))
    s.add(Row("gangs moved to another queue", speed.moved, "count"))
    s.add(Row("gangs left pending (held back)", speed.pending_left, "count"))
    s.add(Row("cycle throughput (decide + apply)", speed.cycle_gangs_per_s, "gangs/s",
              _share(speed.cycle_gangs_per_s, pub), "raw JetStream publish"))
    s.add(Row("overall (fold + cycles)", speed.overall_gangs_per_s, "gangs/s",
              _share(speed.overall_gangs_per_s, base.publish_consume), "raw publish + consume"))
    s.notes.append(f"Building the {w.gangs} events took {speed.build_s:.1f} s (not counted). Moved gangs stay "
                   "pending in their new queue, so admitted + left pending = gangs.")
    s.notes.append("A ratio below 1 against raw consume means the fold, not NATS, bounds a service's input rate; "
                   "preemption folds every input again (PreemptionState holds an AdmissionState).")
    return s


# --- scale ----------------------------------------------------------------------------------------


SCALE_ROWS: dict[str, tuple[tuple[str, str], ...]] = {
    "history": (("cycle_ms", "a cycle with 100 gangs pending"),),
    "fair_share": (("first_cycle_ms", "the cycle that orders and admits them"),
                   ("next_cycle_ms", "the next cycle (nothing new)")),
    "job_limits": (("first_cycle_ms", "the cycle that admits what the limits let through"),
                   ("held_back_cycle_ms", "the next cycle, every other gang held back")),
}
SCALE_SIZE: dict[str, tuple[str, str]] = {
    "history": ("finished", "gangs finished before"), "fair_share": ("pending", "gangs pending in one fair_share leaf"),
    "job_limits": ("gangs", "gangs over 1,000 leaves with max_running_jobs 2"),
}


def scale_section(sizes: Sizes) -> Section:
    runs = measure_scale(dict(sizes.scale))
    s = Section("scale", "Admission cycles as the state grows (bench/scale.py)",
                params={name: f"{small:,} / {large:,}" for name, (small, large) in sizes.scale})
    for name, (small, large) in runs.items():
        count, what = SCALE_SIZE[name]
        for key, label in SCALE_ROWS[name]:
            s.add(Row(f"{name}: {int(small[count]):,} {what}: {label}", small[key], "ms"))
            growth = large[key] / small[key] if small[key] > 0 else None
            s.add(Row(f"{name}: {int(large[count]):,} {what}: {label}", large[key], "ms", ratio=growth,
                      against=f"the {int(small[count]):,} above (sizes x{large[count] / small[count]:g})"))
    s.notes.append("A ratio near 1 is a cost that does not grow with that size; near the sizes' ratio, one that "
                   "grows in proportion (the gangs held back by job limits: each is judged every cycle).")
    return s


# --- large trees ----------------------------------------------------------------------------------

LARGE_TREE_GOALS: dict[int, tuple[float, float | None]] = {10_100: (10.0, 10.0), 100_100: (50.0, None)}  # ms, KB


async def large_tree_section(sizes: Sizes) -> Section:
    from bench.large_tree import cycle_costs, run_live

    s = Section("large-tree", "Large trees: live on JetStream, and what a cycle costs (bench/large_tree.py)",
                params={"trees": ", ".join(f"{p} x {leaves}" for p, leaves in sizes.large_tree)})
    with tempfile.TemporaryDirectory(prefix="poolwise-bench-large-") as tmp:
        async with EmbeddedNats(Path(tmp)) as server:
            for parents, leaves in sizes.large_tree:
                run = await run_live(server.url, parents, leaves, "shared", 300.0)
                what = f"{run.pools:,} pools live on JetStream"
                s.add(Row(f"{what}: configured, a gang submitted and admitted", run.seconds, "s",
                          goal="gang admitted", met=run.admitted))
                s.add(Row(f"{what}: the gang's enqueue to its admission read back", run.decide_seconds * 1e3, "ms"))
                s.add(Row(f"{what}: EntitlementsComputed messages (first cycle: every pool)",
                          run.entitlement_messages, "msgs"))
                s.add(Row(f"{what}: largest message", run.largest_message_bytes / 1024, "KiB", goal="< 1024 KiB",
                          met=run.largest_message_bytes < 1024 * 1024))
    for parents, leaves in sizes.large_tree:
        for shape in ("quota", "shared"):
            costs = cycle_costs(parents, leaves, shape)
            goal_ms, goal_kb = LARGE_TREE_GOALS.get(costs.pools, (0.0, None)) if shape == "quota" else (0.0, None)
            what = f"{costs.pools:,} pools, {shape}"
            s.add(Row(f"{what}: first cycle (every pool written)", costs.first.seconds * 1e3, "ms",
                      note=f"{costs.first.appended_bytes / 1024:,.0f} KiB, {costs.first.entitlement_events} events"))
            s.add(Row(f"{what}: one leaf's demand changed: cycle (median of {len(costs.one_leaf)})",
                      costs.one_leaf_ms, "ms", goal=f"<= {goal_ms:g} ms" if goal_ms else "",
                      met=costs.one_leaf_ms <= goal_ms if goal_ms else None))
            kb = costs.one_leaf_bytes / 1024
            pools = sorted(c.entitlement_pools for c in costs.one_leaf)[len(costs.one_leaf) // 2]
            s.add(Row(f"{what}: one leaf's demand changed: appended ({pools:,} pools written)", kb, "KiB",
                      goal=f"<= {goal_kb:g} KiB" if goal_kb else "", met=kb <= goal_kb if goal_kb else None))
    s.notes.append("quota: static reservations, limits at them (hard quotas): one leaf's demand moves its own and "
                   "its ancestors' numbers only. shared: 80% reserved, the rest lent by share: one leaf's demand "
                   "moves every pool's entitlement, so the cycle writes every pool (the change is the tree).")
    s.notes.append("A cycle: the tick folded, run_cycles (entitlements, admission, decisions applied), the GC off "
                   "as in the service; appended: every decision of the cycle encoded in its envelope.")
    return s


# --- projection -----------------------------------------------------------------------------------


def projection_section(base: Baseline, sizes: Sizes) -> Section:
    speed = measure(sizes.projection_n)
    s = Section("projection", "Projections: DuckDB event log (bench/projection_speed.py)",
                params={"events": speed.events, "batch": speed.batch})
    arrow = speed.arrow_insert_rows_per_s
    s.add(Row("ProjectionStore.apply (decode + rows + insert + checkpoint)", speed.store_rows_per_s, "rows/s",
              _share(speed.store_rows_per_s, arrow), "DuckDB Arrow insert"))
    s.add(Row("  same, against raw JetStream consume", speed.store_rows_per_s, "rows/s",
              _share(speed.store_rows_per_s, base.consume), "raw JetStream consume"))
    s.add(Row("EventLogProjection.apply alone", speed.projection_rows_per_s, "rows/s",
              _share(speed.projection_rows_per_s, arrow), "DuckDB Arrow insert"))
    s.add(Row("events.decode alone", speed.decode_per_s, "events/s", _share(speed.decode_per_s, base.consume),
              "raw JetStream consume"))
    s.add(Row("DuckDB Arrow insert (ceiling)", arrow, "rows/s"))
    s.notes.append("The store decodes every message itself: in a service each event is decoded once by the "
                   "folder and again by the store.")
    return s


# --- pipeline -------------------------------------------------------------------------------------


async def pipeline_section(sizes: Sizes) -> Section:
    speed = await bench_pipeline(sizes.pipeline_gangs, leaves=sizes.pipeline_leaves, rates=sizes.pipeline_rates,
                                 paced_seconds=sizes.pipeline_seconds, raw_n=sizes.pipeline_raw_n,
                                 processes=sizes.pipeline_processes)
    w = speed.workload
    s = Section("pipeline", "End to end: submitter, JetStream, admission + preemption, DuckDB (bench/pipeline.py)",
                params={"gangs": sizes.pipeline_gangs, "leaf_pools": w.leaves, "hosts": w.hosts,
                        "tasks_per_gang": w.tasks_per_gang, "payload_bytes": speed.payload_size,
                        "offered": "/".join(f"{r:g}" for r in sizes.pipeline_rates) + " gangs/s",
                        "seconds_each": sizes.pipeline_seconds,
                        "services": "one process each" if sizes.pipeline_processes else "one process"})
    raw = speed.raw
    pub, cons = raw.get("raw_publish_pipelined", 0.0), raw.get("raw_consume_pull_callback", 0.0)
    both = speed.raw_publish_consume
    s.add(Row("raw JetStream publish, pipelined (same payload)", pub, "msg/s"))
    s.add(Row("raw JetStream consume, pull + callback", cons, "msg/s"))
    s.add(Row("raw publish then consume, one process", both, "msg/s"))
    packed = speed.raw_packed_publish_consume
    s.add(Row(f"raw publish then consume, {PACK_EVENTS:,} gangs' payload per message", packed, "gangs/s"))
    s.add(Row("submitter publish, acked (burst)", speed.publish_per_s, "gangs/s", _share(speed.publish_per_s, pub),
              "raw publish"))
    s.add(Row("decided: last GangAdmitted seen (burst)", speed.decided_per_s, "gangs/s",
              _share(speed.decided_per_s, both), "raw publish + consume"))
    e2e = speed.e2e_per_s
    s.add(Row("end to end: decided, folded, projected, acked", e2e, "gangs/s", _share(e2e, both),
              "raw publish + consume", goal=f">= {PIPELINE_GOAL_PER_S:,.0f} gangs/s", met=e2e >= PIPELINE_GOAL_PER_S))
    share = e2e / both if both > 0 else 0.0
    s.add(Row("end to end, share of raw publish + consume (one gang per message)", share * 100, "%"))
    # The submitter packs a burst (PACK_EVENTS gangs per message): the same payload, raw, is the
    # fair (and stricter) comparison, so the goal is judged on it.
    packed_share = e2e / packed if packed > 0 else 0.0
    s.add(Row(f"end to end, share of raw publish + consume ({PACK_EVENTS:,} gangs per message)",
              packed_share * 100, "%", goal=f">= {PIPELINE_GOAL_SHARE:.0%}", met=packed_share >= PIPELINE_GOAL_SHARE))
    burst = speed.burst
    if burst.get("missing"):
        s.notes.append(f"burst: {burst['missing']} gangs got no decision within the timeout")
    s.add(Row("log messages per gang (burst)", burst.get("stream_last_seq", 0) / max(1, speed.burst_gangs),
              "msg/gang"))
    s.add(Row("admission cycles in the burst", float(burst.get("cycles", 0)), "count"))
    for process, micros in dict(burst.get("cpu_us_per_gang", {})).items():
        s.add(Row(f"CPU per gang (burst): {process}", float(micros), "µs"))
    if "submitter_cpu_us_per_gang" in burst:
        s.add(Row("CPU per gang (burst): submitter", float(burst["submitter_cpu_us_per_gang"]), "µs"))
    s.add(Row("largest EntitlementsComputed event", float(burst.get("entitlement_max_bytes", 0)), "B"))
    for rate, paced in zip(sizes.pipeline_rates, speed.paced, strict=True):
        tag = f"offered {rate:,.0f} gangs/s"
        offered = float(paced.get("count", 0)) / max(float(paced.get("offered_s", 0.0)), 1e-9)
        s.add(Row(f"{tag}: offered rate achieved", offered, "gangs/s"))
        for key in ("p50_ms", "p90_ms", "p99_ms", "max_ms"):
            judged = key == "p99_ms" and rate == LATENCY_GOAL_RATE
            value = float(paced.get(key, 0.0))
            s.add(Row(f"{tag}: enqueue -> decision {key[:-3]}", value, "ms",
                      goal=f"<= {LATENCY_GOAL_MS:g} ms" if judged else "",
                      met=(value <= LATENCY_GOAL_MS and not paced.get("missing")) if judged else None))
        for part, what in (("wait", "waiting for a tick"), ("cycle", "tick -> decision")):
            for q in ("p50", "p99"):
                s.add(Row(f"{tag}: {what} {q}", float(paced.get(f"{part}_{q}_ms", 0.0)), "ms"))
        if paced.get("missing"):
            s.notes.append(f"{tag}: {paced['missing']} of {paced['count']} gangs got no decision in time")
    where = ("each service runs in a process of its own (`poolwise serve`, as `poolwise up` starts them)"
             if sizes.pipeline_processes else "the services share this process (one event loop, projections on "
             "worker threads)")
    s.notes.append(f"The submitter is a separate process (bench/submitter.py); {where}; nats-server and the "
                   "submitter share the same cores. CPU per gang: each process's user + system time over the "
                   "burst, divided by its gangs. Latency runs on the system left by the burst, each rate after "
                   "the previous one.")
    return s


# --- soak ---------------------------------------------------------------------------------------

SOAK_RSS = (("rss_run", "after the run"), ("rss_restart", "after a restart"))


def soak_figures(r: Any) -> list[tuple[str, float, str, bool]]:
    """One size's figures of the soak (a `bench.soak.SizeResult`): (name, value, unit, whether
    issue 18 asks its ratio between the sizes to stay <= 1.2)."""
    mb = 1024 * 1024
    out: list[tuple[str, float, str, bool]] = []
    for key, when in SOAK_RSS:
        for service, rss in getattr(r, key).items():
            out.append((f"RSS {service} {when}", rss / mb, "MB", True))
    out += [
        ("`poolwise up` ready on an empty log (config only)", r.empty_start_s, "s", False),
        ("restart: every service leading (rebuild folded)", r.restart_ready_s, "s", False),
        ("restart: `explain` of the last gang answered", r.restart_answer_s, "s", False),
        ("restart-to-answer: answering and caught up (consumers drained, projections at the end)",
         r.restart_s, "s", True),
        ("standby warm before the failover (its /readyz 200) after its start", r.standby_warm_s, "s", False),
        ("failover: kill -9 of the active admission -> a new gang admitted", r.failover_s, "s", True),
        ("replay --verify: events/s", r.replay_events_per_s, "events/s", False),
        ("replay --verify: peak RSS (its process tree)", r.replay_peak_rss / mb, "MB", True),
    ]
    return out



def soak_rows(results: Sequence[Any], params: dict[str, Any] | None = None) -> Section:
    """The soak's section: each size's figures, then the ratio of each between the last size and
    the first, with issue 18's goals (pure: `results` are `bench.soak.SizeResult`s)."""
    from bench.soak import FAILOVER_GOAL_S, RATIO_GOAL, RESTART_GOAL_S

    s = Section("soak", "Soak: a whole-lifecycle workload at two history sizes (bench/soak.py, issue 18)",
                params=dict(params or {}))
    goal_s = {"restart-to-answer": RESTART_GOAL_S, "failover": FAILOVER_GOAL_S}
    for r in results:
        tag = f"{r.gangs:,} gangs"
        s.add(Row(f"{tag}: history: log messages", r.messages, "count"))
        s.add(Row(f"{tag}: history: events (as replay counts them)", r.replay_events, "count"))
        for name, value, unit, _ in soak_figures(r):
            goal = next((g for prefix, g in goal_s.items() if name.startswith(prefix)), None)
            s.add(Row(f"{tag}: {name}", value, unit, goal=f"<= {goal:g} s" if goal is not None else "",
                      met=value <= goal if goal is not None else None))
    if len(results) >= 2:
        small, large = results[0], results[-1]
        for (name, a, unit, judged), (_, b, _, _) in zip(soak_figures(small), soak_figures(large), strict=True):
            ratio = b / a if a > 0 else None
            s.add(Row(f"ratio {large.gangs:,} / {small.gangs:,} gangs: {name}", ratio if ratio is not None else 0.0,
                      "x", against=f"{unit} at {small.gangs:,} gangs",
                      goal=f"<= {RATIO_GOAL:g}x" if judged else "",
                      met=(ratio is not None and ratio <= RATIO_GOAL) if judged else None))
    mb = 1024 * 1024
    for r in results:
        made = r.gangs / r.generate_s if r.generate_s else 0.0
        leading = ", ".join(f"{k} {v:.1f} s" for k, v in r.restart_leading_s.items())
        line = (f"{r.gangs:,} gangs: the history made in {r.generate_s:.0f} s ({made:,.0f} gangs/s); "
                f"replay {'verified ok' if r.replay_ok else 'NOT verified ok'} in {r.replay_s:.1f} s, its largest "
                f"process {r.replay_max_process_rss / mb:,.0f} MB; after the restart each service led at "
                f"{leading or '?'}; failover: taken over by {r.failover_by or '?'}")
        if r.cpu_us_per_gang:
            line += "; CPU per gang while the history was made: " + ", ".join(
                f"{k} {v:,.0f} µs" for k, v in r.cpu_us_per_gang.items())
        s.notes.append(line)
        s.notes += [f"{r.gangs:,} gangs: {n}" for n in r.notes]
    return s


async def soak_section(sizes: Sizes, on_progress: Callable[[str], None] | None = None) -> Section:
    from dataclasses import asdict as as_dict

    from bench.soak import Shape, soak

    shape = Shape()
    results = await soak(sizes.soak, shape, on_progress)
    params = {"gangs": " / ".join(f"{n:,}" for n in sizes.soak)}
    params.update({k: v for k, v in as_dict(shape).items() if k != "timeout"})
    return soak_rows(results, params)


async def whatif_section(sizes: Sizes, on_progress: Callable[[str], None] | None = None) -> Section:
    from bench.whatif import measure, rows

    return rows(await measure(sizes.whatif, on_progress))


# --- running --------------------------------------------------------------------------------------


async def _timed(section: Callable[[], Awaitable[Section]]) -> Section:
    facts = machine_facts()
    start = time.perf_counter()
    result = await section()
    result.seconds = time.perf_counter() - start
    result.machine = facts
    return result


async def run_benchmarks(names: Sequence[str], *, quick: bool = False,
                         on_section: Callable[[Section], None] | None = None,
                         single_process: bool = False, soak_sizes: tuple[int, int] | None = None,
                         on_progress: Callable[[str], None] | None = None) -> list[Section]:
    """Run the named benchmarks (in `NAMES` order, then `EXTRA`); `on_section` sees each as soon as
    it is done. `single_process`: the pipeline's services in this process (one event loop), not one
    each. `soak_sizes`: the soak's two history sizes (gangs); `on_progress` hears what it is doing."""
    unknown = [n for n in names if n not in NAMES + EXTRA]
    if unknown:
        raise ValueError(f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(NAMES + EXTRA)}")
    sizes = Sizes.quick() if quick else Sizes.full()
    if single_process:
        sizes = replace(sizes, pipeline_processes=False)
    if soak_sizes is not None:
        sizes = replace(sizes, soak=soak_sizes)
    wanted = [n for n in NAMES + EXTRA if n in names]
    base: Baseline | None = None
    if NEEDS_BASELINE & set(wanted):
        payload = gang_payload_size(sizes.admission)
        start = time.perf_counter()
        base = await measure_baseline(None, n=sizes.raw_n, payload_size=payload, duck_n=sizes.duck_n)
        base_s = time.perf_counter() - start
    out: list[Section] = []

    async def now(fn: Callable[[], Section]) -> Section:
        return fn()  # in this thread, so that a profiler of this thread sees it

    for name in wanted:
        if name == "raw":
            assert base is not None
            facts = machine_facts()
            section = raw_section(base)
            section.seconds, section.machine = base_s, facts
        elif name == "entitlement":
            section = await _timed(lambda: now(lambda: entitlement_section(sizes)))
        elif name == "admission":
            assert base is not None
            section = await _timed(lambda: now(partial(admission_section, base, sizes)))
        elif name == "scale":
            section = await _timed(lambda: now(lambda: scale_section(sizes)))
        elif name == "large-tree":
            section = await _timed(lambda: large_tree_section(sizes))
        elif name == "projection":
            assert base is not None
            section = await _timed(lambda: now(partial(projection_section, base, sizes)))
        elif name == "soak":
            section = await _timed(lambda: soak_section(sizes, on_progress))
        elif name == "whatif":
            section = await _timed(lambda: whatif_section(sizes, on_progress))
        else:
            section = await _timed(lambda: pipeline_section(sizes))
        out.append(section)
        if on_section is not None:
            on_section(section)
    return out
