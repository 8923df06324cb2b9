"""Replay speed (issue 18): `poolwise replay --verify --json` on a kept history, codes alternated.

    python -m bench.replay_speed STORE [NAME=CODE ...] [--rounds N]

STORE is a nats-server store as `python -m bench.soak --keep DIR/server N` keeps it (its `nats`
directory inside): it is copied into a temporary directory (the kept one is never written) and
served by a private nats-server for all the runs. Each NAME=CODE is a source tree (a worktree of
another commit, say) run with PYTHONPATH=CODE; default: this one, as `new`. The codes run in
turn, their order reversed each round (old, new, new, old, ...), since the machine may be shared
and its load moves: compare CPU seconds within a round, read wall times as the load's.

Per run, a JSON line on stdout: the report's events and findings, each process's CPU seconds
(user + system, from /proc, last sample: `parent` the CLI's process, `child` its derivation's,
`others` any more), the peak of the process tree's summed RSS (sampled every 20 ms), wall
seconds, events per wall second, the 1-minute load average (least and most, sampled every 5 s).
At the end, per code, the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.soak import cpu_seconds, process_tree, rss_bytes
from services.common.natsserver import EmbeddedNats

HERE = str(Path(__file__).resolve().parent.parent)


def run_once(url: str, code: str, name: str) -> dict[str, Any]:
    """One replay of the stream at `url` with the source tree `code`, measured."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # (compiled modules kept, as an installed poolwise has them)
    env.pop("NATS_URL", None)
    env["PYTHONPATH"] = code
    loads = [os.getloadavg()[0]]
    began = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "services.tools.cli.main", "replay", "--verify", "--json",
                                "--nats-url", url], cwd=code, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    cpu: dict[int, float] = {}
    peak, sampled = 0, began
    while process.poll() is None:
        pids = process_tree(process.pid)
        peak = max(peak, sum(rss_bytes(pid) for pid in pids))
        for pid in pids:
            seconds = cpu_seconds(pid)
            if seconds:
                cpu[pid] = seconds
        if time.perf_counter() - sampled >= 5.0:
            loads.append(os.getloadavg()[0])
            sampled = time.perf_counter()
        time.sleep(0.02)
    wall = time.perf_counter() - began
    out, err = process.communicate()
    report: dict[str, Any] = {}
    lines = out.decode(errors="replace").strip().splitlines()
    if lines:
        report = json.loads(lines[-1])
    parent = cpu.pop(process.pid, 0.0)
    rest = sorted(cpu.values(), reverse=True)
    events = int(report.get("events", 0))
    result: dict[str, Any] = {
        "code": name, "ok": report.get("ok"), "findings": len(report.get("findings", [])), "events": events,
        "parent_cpu_s": round(parent, 2), "child_cpu_s": round(rest[0], 2) if rest else 0.0,
        "others_cpu_s": [round(c, 2) for c in rest[1:]], "peak_rss_mb": round(peak / 1e6),
        "wall_s": round(wall, 1), "events_per_s": round(events / wall) if wall else 0,
        "load": [round(min(loads), 1), round(max(loads), 1)], "exit": process.returncode,
    }
    if process.returncode:
        result["stderr"] = err.decode(errors="replace")[-2000:]
    return result


def medians(results: list[dict[str, Any]]) -> dict[str, Any]:
    keys = ("parent_cpu_s", "child_cpu_s", "peak_rss_mb", "wall_s", "events_per_s")
    return {key: statistics.median(r[key] for r in results) for key in keys} | {"runs": len(results)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("store", type=Path, help="a kept nats-server store (holding `nats/`)")
    parser.add_argument("codes", nargs="*", help="NAME=CODE: a source tree to run (default: new=this one)")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    codes = [tuple(c.split("=", 1)) for c in args.codes] or [("new", HERE)]
    if not (args.store / "nats").is_dir():
        parser.error(f"{args.store} holds no `nats` store")
    results: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in codes}
    with tempfile.TemporaryDirectory(prefix="replay-speed-") as directory:
        served = Path(directory) / "server"
        shutil.copytree(args.store, served, symlinks=True)
        with EmbeddedNats(served) as server:
            for round_ in range(args.rounds):
                for name, code in (codes if round_ % 2 == 0 else codes[::-1]):
                    result = run_once(server.url, code, name)
                    results[name].append(result)
                    print(json.dumps(result), flush=True)
    for name, runs in results.items():
        print(json.dumps({"code": name, "medians": medians(runs)}), flush=True)


if __name__ == "__main__":
    main()
