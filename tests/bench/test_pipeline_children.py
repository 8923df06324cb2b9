"""A killed `bench.pipeline` leaves no child behind: its nats-server, its `poolwise serve`
services and its submitter all die with it (the kernel's parent-death signal, asked for by each
child), even killed with SIGKILL, which no handler of its own can see."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.pipeline import _child_env

PARENT = """
import sys
from dataclasses import asdict
from pathlib import Path

import anyio

from bench.pipeline import run_submitter, serve_process
from bench.workload import Workload
from services.common.jetstream import JetStreamLog
from services.common.natsserver import EmbeddedNats


async def main(tmp: str) -> None:
    async with EmbeddedNats(tmp) as server:
        log = await JetStreamLog.connect(server.url)
        await log.ensure_stream()
        async with serve_process("preemption", server.url, Path(tmp) / "data", 120.0):
            print("ready", flush=True)
            # no admission runs: the submitter waits for decisions until its timeout
            spec = {"url": server.url, "workload": asdict(Workload(gangs=5, leaves=2)), "prefix": "k", "start": 0,
                    "count": 5, "mode": "burst", "timeout": 600.0, "consumers": []}
            await run_submitter(spec, 900.0)


anyio.run(main, sys.argv[1])
"""


def children(pid: int) -> dict[int, str]:
    """The live (not zombie) children of `pid`: pid -> command line."""
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if int(stat[1]) == pid and stat[0] != "Z":
            found[int(entry.name)] = command
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
@pytest.mark.timeout(300)
def test_no_child_outlives_a_killed_pipeline(tmp_path: Path) -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(tmp_path)], env=_child_env(),
                              stdout=subprocess.PIPE, start_new_session=True)
    started: dict[int, str] = {}
    try:
        assert parent.stdout is not None
        assert parent.stdout.readline().strip() == b"ready"
        deadline = time.monotonic() + 120
        while not any("bench.submitter" in c for c in started.values()) and time.monotonic() < deadline:
            started = children(parent.pid)
            time.sleep(0.1)
        kinds = sorted(("nats-server" if "nats-server" in c else "submitter" if "bench.submitter" in c
                        else "serve" if " serve " in c else c) for c in started.values())
        assert kinds == ["nats-server", "serve", "submitter"]
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 60
        while any(alive(pid) for pid in started) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert {pid: started[pid] for pid in started if alive(pid)} == {}
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        for pid in started:  # only what this test started
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
