"""Showing the demo: the tree's numbers live (a rich table redrawn in place on a terminal), or
plain lines now and then when stdout is not a terminal, then the summary.

The numbers are those of admission's state as folded from the log by the demo's reader
(`services.admission.domain.views.pool_numbers`): each pool's reservation, limit, entitlement
(the last cycle's), allocation (held by admitted tasks) and demand (complete gangs waiting), in
cpu, and its gangs running and waiting.
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from services.admission.domain.model import ADMITTED, PENDING
from services.admission.domain.views import pool_numbers
from services.tools.demo.reader import LogReader
from services.tools.demo.record import Recorder
from services.tools.demo.workload import Workload

TREE = "default"
REDRAW = 0.25  # wall seconds between two redraws of the live table


def gang_counts(reader: LogReader) -> dict[str, tuple[int, int]]:
    """Per pool (and every ancestor): gangs admitted and gangs waiting in its queues."""
    counts: dict[str, list[int]] = {}
    rt = reader.state.trees.get(TREE)
    for gang in rt.gangs.values() if rt is not None else ():
        column = 0 if gang.state == ADMITTED else 1 if gang.state == PENDING else None
        if column is None:
            continue
        path = gang.pool
        while path:
            counts.setdefault(path, [0, 0])[column] += 1
            path = path.rsplit("/", 1)[0]
    return {path: (c[0], c[1]) for path, c in counts.items()}


def headline(now_ms: int, recorder: Recorder) -> str:
    rejected = sum(recorder.rejected.values())
    return (f"log time {now_ms / 1000:,.1f} s | submitted {len(recorder.enqueued):,} | admitted "
            f"{len(recorder.waits):,} gangs ({sum(recorder.admissions.values()):,} admissions) | preempted "
            f"{sum(recorder.preempted_gangs.values()):,} | refused {rejected:,} | done {recorder.outcomes['done']:,}")


def pool_table(reader: LogReader, title: str, max_rows: int = 40) -> Table:
    table = Table("pool", "resv", "limit", "entitled", "holds", "wants", "run", "wait", title=title,
                  title_justify="left")
    numbers = pool_numbers(reader.state, TREE) if TREE in reader.state.config.trees else {}
    counts = gang_counts(reader)
    for path, pool in list(numbers.items())[:max_rows]:
        def cpu(name: str, p: dict[str, Any] = pool) -> str:
            value = p.get(name, {}).get("cpu", 0.0) + (p.get("slack_allocation", {}).get("cpu", 0.0)
                                                         if name == "allocation" else 0.0)
            return f"{value:,.0f}" if value < 1e15 else "-"
        running, waiting = counts.get(path, (0, 0))
        table.add_row(path, cpu("reservation"), cpu("limit"), cpu("entitlement"), cpu("allocation"),
                      cpu("demand"), str(running), str(waiting))
    return table


class LiveView:
    """A rich table redrawn in place (at most every `REDRAW` seconds)."""

    def __init__(self, workload: Workload, console: Console) -> None:
        self.workload = workload
        self.console = console
        self.live: Live | None = None
        self.last = 0.0

    def applied(self, outcome: dict[str, Any]) -> None:
        self.console.print(_applied_line(outcome))
        self.live = Live(Text("starting..."), console=self.console, auto_refresh=False, transient=False)
        self.live.start()

    def step(self, now_ms: int, reader: LogReader, recorder: Recorder) -> None:
        if self.live is None or time.monotonic() - self.last < REDRAW:
            return
        self.last = time.monotonic()
        self.live.update(Group(Text(headline(now_ms, recorder)),
                               pool_table(reader, f"{self.workload.name}: cpu per pool")), refresh=True)

    def finished(self) -> None:
        if self.live is not None:
            self.live.stop()


class PlainLines:
    """A line now and then (every `every_ms` of log time), for logs and pipes."""

    def __init__(self, workload: Workload, echo: Any, every_ms: int | None = None) -> None:
        self.workload = workload
        self.echo = echo
        last_job = workload.jobs[-1].at_ms if workload.jobs else 0
        self.every_ms = every_ms or max(workload.step_ms, (max(workload.horizon_ms, last_job) // 10))
        self.next_ms = 0

    def applied(self, outcome: dict[str, Any]) -> None:
        self.echo(_applied_line(outcome))

    def step(self, now_ms: int, reader: LogReader, recorder: Recorder) -> None:
        if now_ms < self.next_ms:
            return
        self.next_ms = now_ms + self.every_ms
        counts = gang_counts(reader)
        tops = sorted(p for p in counts if p.count("/") == 1)
        shown = ", ".join(f"{p} {counts[p][0]} running {counts[p][1]} waiting" for p in tops)
        self.echo(headline(now_ms, recorder) + (f" | {shown}" if shown else ""))

    def finished(self) -> None:
        pass


def _applied_line(outcome: dict[str, Any]) -> str:
    return (f"applied {outcome['file']}: {len(outcome['changes'])} change(s) in {outcome['commands']} "
            "command(s) (poolwise apply)")
