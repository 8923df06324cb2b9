"""What `poolwise export --parquet` costs: `event_log` of a store of N events, from a stopped data
dir (the CLI reads the file) and from a running tree service (pages over NATS), in CPU seconds of
the CLI process and of the service's process (this one), and wall seconds.

    python -m bench.export_speed [events]        # default 50,000

The store is built here (`bench.projection_speed.synthetic_log`'s N events projected into `<tmp>/tree/tree.duckdb`); the
running case starts a private nats-server and the tree service on it, in this process.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import anyio

from bench.projection_speed import synthetic_log
from projections import EventLogProjection, ProjectionStore

POOLWISE = str(Path(sys.executable).parent / "poolwise")


@dataclass(frozen=True)
class Cost:
    wall: float
    cli_cpu: float
    service_cpu: float = 0.0


def _children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def _export(data_dir: Path, out: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "NATS_URL"}
    done = subprocess.run([POOLWISE, "export", "--parquet", str(out), "--tables", "event_log", "--data-dir",
                           str(data_dir)], env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(done.stderr)


def build(data_dir: Path, events: int) -> None:
    (data_dir / "tree").mkdir(parents=True)
    with ProjectionStore(data_dir / "tree" / "tree.duckdb", [EventLogProjection()]) as store:
        log = synthetic_log(events)
        for start in range(0, len(log), 5_000):
            store.apply(log[start : start + 5_000])


def stopped(data_dir: Path, out: Path) -> Cost:
    cpu, wall = _children_cpu(), time.monotonic()
    _export(data_dir, out)
    return Cost(time.monotonic() - wall, _children_cpu() - cpu)


def running(data_dir: Path, out: Path) -> Cost:
    from services.common.jetstream import JetStreamLog
    from services.common.natsserver import EmbeddedNats, remove_url_file, write_url_file
    from services.tree.service import serve_tree

    async def main() -> Cost:
        with EmbeddedNats(data_dir / "nats") as server:
            log = await JetStreamLog.connect(server.url)
            await log.ensure_stream()
            try:
                async with anyio.create_task_group() as tg:
                    await tg.start(lambda task_status: serve_tree(log, data_dir / "tree", task_status=task_status))
                    write_url_file(data_dir, server.url)
                    cpu, mine, wall = _children_cpu(), time.process_time(), time.monotonic()
                    await anyio.to_thread.run_sync(_export, data_dir, out)
                    cost = Cost(time.monotonic() - wall, _children_cpu() - cpu, time.process_time() - mine)
                    remove_url_file(data_dir)
                    tg.cancel_scope.cancel()
                    return cost
            finally:
                await log.close()

    return anyio.run(main)


def main() -> None:
    events = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "data"
        build(data_dir, events)
        print(f"event_log of {events:,} events")
        for name, measure in (("stopped data dir", stopped), ("running system", running)):
            cost = measure(data_dir, Path(tmp) / name.replace(" ", "-"))
            print(f"  {name}: {cost.wall:.2f} s wall, CLI {cost.cli_cpu:.2f} s CPU, "
                  f"service {cost.service_cpu:.2f} s CPU")


if __name__ == "__main__":
    main()
