"""The demo's last words: what happened (admissions, preemptions, refusals, waits per pool and per
class of job, cluster usage), what it cost (wall and CPU seconds), and the replay's verdict."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from services.tools.demo.driver import DemoResult

MANY_POOLS = 12  # more leaf pools than this: the summary's table is per top-level pool


def result_document(result: DemoResult) -> dict[str, Any]:
    """The run as one JSON-ready document (`poolwise demo --json`)."""
    report = result.replay
    recorded = sum(c.recorded for c in report.counts.values())
    return {"workload": result.workload.name, "jobs": len(result.workload.jobs), **result.summary,
            "steps": result.steps, "log_positions": result.log_positions, "stopped_early": result.stopped_early,
            "wall_seconds": round(result.wall_seconds, 2), "cpu_seconds": round(result.cpu_seconds, 2),
            "cpu_run": round(result.cpu_run, 2), "cpu_replay": round(result.cpu_replay, 2),
            "cpu_nats": None if result.cpu_nats is None else round(result.cpu_nats, 2),
            "replay": {"ok": report.ok, "decisions": recorded, "findings": len(report.findings)}}


def print_summary(result: DemoResult, echo: Callable[[str], None]) -> None:
    doc = result_document(result)
    echo("")
    echo(f"{doc['workload']}: {doc['jobs']:,} jobs, {doc['enqueued']:,} submitted in {doc['log_seconds']:,.1f} s of "
         f"log time ({doc['steps']:,} ticks, {doc['log_positions']:,} log positions)"
         + ("; the wall-clock budget ended it early" if doc["stopped_early"] else ""))
    refused = ", ".join(f"{rule} {n}" for rule, n in doc["rejected"].items()) or "none"
    finished = ", ".join(f"{outcome} {n}" for outcome, n in doc["finished"].items()) or "none"
    echo(f"admitted {doc['admitted_gangs']:,} gangs ({doc['admissions']:,} admissions with re-admissions after "
         f"preemption); preempted {doc['preempted_gangs']:,} gangs ({doc['preempted_tasks']:,} tasks); "
         f"refused: {refused}; finished: {finished}")
    echo(f"cluster usage: {doc['usage']:.1%} of the cpu over the run")
    if len(doc["pools"]) > MANY_POOLS:
        echo(f"per top-level pool (each of the {len(doc['pools'])} pools in --json):")
        _table(echo, "pool", [(p["pool"], p) for p in doc["top_pools"]], with_counts=True)
    else:
        _table(echo, "pool", [(p["pool"], p) for p in doc["pools"]], with_counts=True)
    _table(echo, "class", [(c["class"], c) for c in doc["classes"]], with_counts=False)
    nats = "" if doc["cpu_nats"] is None else f", nats-server {doc['cpu_nats']:.1f} s"
    echo(f"took {doc['wall_seconds']:.1f} s of wall time, {doc['cpu_seconds']:.1f} CPU seconds: the run "
         f"{doc['cpu_run']:.1f} s (services, driver, executor, reader: one process){nats}, the replay "
         f"{doc['cpu_replay']:.1f} s")


def _table(echo: Callable[[str], None], what: str, rows: list[tuple[str, dict[str, Any]]], *,
           with_counts: bool) -> None:
    if not rows:
        return
    width = max(len(what), *(len(name) for name, _ in rows))
    extra = f"  {'admissions':>10}  {'preempted':>9}" if with_counts else ""
    echo(f"  {what:<{width}}  {'admitted':>8}  {'mean wait':>9}  {'p50 wait':>8}  {'p95 wait':>8}{extra}")
    for name, row in rows:
        waits = [_seconds(row[k]) for k in ("mean_wait", "p50_wait", "p95_wait")]
        counts = f"  {row['admissions']:>10,}  {row['preempted']:>9,}" if with_counts else ""
        echo(f"  {name:<{width}}  {row['admitted']:>8,}  {waits[0]:>9}  {waits[1]:>8}  {waits[2]:>8}{counts}")


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f} s"
