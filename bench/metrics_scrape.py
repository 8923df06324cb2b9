"""What one `/metrics` scrape costs a service: admission's fold of a workload (LEAVES leaf pools,
GANGS gangs, a tick every 2,000), then the reading of the fold on the loop (`READING.refresh`) and
the page made from it (what `Metrics.render_async` runs on a worker thread), three times each:
wall and CPU time (the process's), and the page's CPU per series.

    python -m bench.metrics_scrape [LEAVES] [GANGS]      # default 100 5000
"""

from __future__ import annotations

import sys
import time

from bench.workload import Workload, config_events, envelope, gang_event
from events import ClockTicked
from services.admission.folder import AdmissionFolder
from services.common import metrics

T0 = 1_767_225_600.0


def fold(leaves: int, gangs: int) -> tuple[AdmissionFolder, int]:
    """Admission's fold of the workload, its cycles run every 2,000 gangs and at the end."""
    w = Workload(leaves=leaves, gangs=gangs, fill=0.6)
    folder, seq = AdmissionFolder(), 0
    for i, event in enumerate(config_events(w)):
        seq += 1
        folder.step(envelope(event, f"setup-{i}", T0), seq)
    for i in range(gangs):
        seq += 1
        folder.step(envelope(gang_event(w, i), f"g{i}", T0 + i * 1e-3), seq)
        if i % 2000 == 1999 or i == gangs - 1:
            seq += 1
            folder.step(envelope(ClockTicked(), f"tick-{i}", T0 + i * 1e-3), seq)
    return folder, seq


def main(argv: list[str]) -> None:
    leaves = int(argv[0]) if argv else 100
    gangs = int(argv[1]) if len(argv) > 1 else 5000
    folder, seq = fold(leaves, gangs)
    installed = metrics.install("bench")
    watched = metrics.status("admission")
    watched.folder, watched.folded = folder, seq
    try:
        for _ in range(3):
            began, cpu = time.perf_counter(), time.process_time()
            metrics.READING.refresh()
            read, read_cpu = time.perf_counter() - began, time.process_time() - cpu
            metrics.READING.frozen = True
            began, cpu = time.perf_counter(), time.process_time()
            page = installed._page()
            made, made_cpu = time.perf_counter() - began, time.process_time() - cpu
            metrics.READING.frozen = False
            series = page.count(b"{")
            # CPU time is what a scrape costs the process (the wall time on a loaded machine is mostly waiting)
            print(f"series {series}: read on the loop {read * 1e3:.1f} ms ({read_cpu * 1e3:.1f} CPU), page "
                  f"{made * 1e3:.1f} ms ({made_cpu * 1e3:.1f} CPU, {made_cpu / series * 1e6:.0f} µs a series)")
    finally:
        installed.shutdown()
        metrics.reset()


if __name__ == "__main__":
    main(sys.argv[1:])
