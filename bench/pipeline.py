"""End to end: gangs published on a real JetStream log, decided by the admission service (its
clock on), folded by preemption, projected into DuckDB by the tree service (gangs, tasks,
event_log) and preemption; nothing runs or prints at import.

`await bench_pipeline(...)` returns a `PipelineSpeed`:

1. a private nats-server (`EmbeddedNats` in a temporary directory, loopback only);
2. the raw JetStream speeds for the gang payload size on that server (`bench.raw_nats`), before
   anything else runs on it, and for the size of a pack of `PACK_EVENTS` gangs (the submitter's
   `enqueue_many` packs a burst that way: `services/common/packs.py`), in gangs per second;
3. the tree of `bench.workload` appended as config events; the tree, admission and preemption
   services started as `poolwise up` starts them: each in a process of its own (`poolwise
   serve`), or with `processes=False` all in this process (`services.launcher.start_services`),
   projections in the temporary directory, admission's clock on;
4. `burst`: a submitter process (`bench.submitter`) publishes `gangs` gangs at once, pipelined
   and acknowledged, and times when the last one was decided and when every service had
   folded, projected and acknowledged everything;
5. `paced`: for each of `rates`, the same submitter offers that many gangs per second for
   `paced_seconds` seconds and reports each gang's publish-to-decision latency.

Run directly for a quick look: `python -m bench.pipeline [gangs] [leaves] [processes|inline]`.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import anyio

import bench
from bench.baseline import harmonic, measure_nats
from bench.raw_nats import measure_raw_only
from bench.workload import Workload, config_events, envelope, gang_payload_size
from services.common.jetstream import JetStreamLog
from services.common.natsserver import EmbeddedNats
from services.common.packs import PACK_EVENTS
from services.common.supervisor import PARENT_ENV
from services.launcher import start_services

# Every service `poolwise up` runs: the tree service projects the gangs, tasks and event_log read models
# that "projected" means to a user (`poolwise sql`), so its durable consumer is waited for too.
SERVICES = ["tree", "admission", "preemption"]


@dataclass(frozen=True)
class PipelineSpeed:
    workload: Workload
    payload_size: int
    raw: dict[str, float] = field(default_factory=dict)
    burst: dict[str, Any] = field(default_factory=dict)
    paced: list[dict[str, Any]] = field(default_factory=list)  # one per offered rate, in order
    rates: tuple[float, ...] = ()
    paced_seconds: float = 0.0

    @property
    def burst_gangs(self) -> int:
        return int(self.burst.get("count", 0))

    @property
    def e2e_per_s(self) -> float:
        """Gangs per second from the first publish until both services acknowledged everything."""
        s = float(self.burst.get("projected_s", 0.0))
        return self.burst_gangs / s if s > 0 else 0.0

    @property
    def decided_per_s(self) -> float:
        s = float(self.burst.get("decided_s", 0.0))
        return int(self.burst.get("decided", 0)) / s if s > 0 else 0.0

    @property
    def publish_per_s(self) -> float:
        s = float(self.burst.get("publish_s", 0.0))
        return self.burst_gangs / s if s > 0 else 0.0

    @property
    def raw_publish_consume(self) -> float:
        """Messages per second, one gang's payload each: publish (pipelined, acked) then consume."""
        return harmonic(self.raw.get("raw_publish_pipelined", 0.0), self.raw.get("raw_consume_pull_callback", 0.0))

    @property
    def raw_packed_publish_consume(self) -> float:
        """Gangs per second, `PACK_EVENTS` gangs' payload per message, as a burst is submitted."""
        per_message = self.raw.get("packed_gangs_per_message", 0.0)
        return per_message * harmonic(self.raw.get("packed_publish_pipelined", 0.0),
                                      self.raw.get("packed_consume_pull_callback", 0.0))


def _child_env() -> dict[str, str]:
    root = str(Path(bench.__file__).resolve().parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


async def run_submitter(spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    """`python -m bench.submitter SPEC` in a child process; its one JSON line of results. The
    child dies with this process (`PARENT_ENV`), as the services' do: a benchmark killed midway
    leaves no submitter publishing and waiting for its whole timeout."""
    env = {**_child_env(), PARENT_ENV: str(os.getpid())}
    with anyio.fail_after(timeout):
        done = await anyio.run_process([sys.executable, "-m", "bench.submitter", json.dumps(spec)],
                                       env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"submitter failed ({done.returncode}): {done.stderr.decode()[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return result


def cpu_seconds(pid: int | None = None) -> float:
    """CPU time (user + system) of process `pid` so far (this process's when None), in seconds:
    a per-gang cost that does not depend on what else the machine is doing."""
    if pid is None:
        return time.process_time()
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.asynccontextmanager
async def serve_process(name: str, url: str, data_dir: Path, timeout: float) -> AsyncIterator[int]:
    """`poolwise serve NAME` in a child process, as `poolwise up` runs it (supervised: the same CPU
    priorities, and it dies with this process): yields once it leads (its pid), stops it (SIGTERM,
    then kill) on the way out."""
    command = [sys.executable, "-m", "services.tools.cli.main", "serve", name, "--nats-url", url,
               "--data-dir", str(data_dir)]
    env = {**_child_env(), PARENT_ENV: str(os.getpid())}  # supervised, as `up`'s children: the same priorities
    process = await anyio.open_process(command, env=env, stdout=subprocess.DEVNULL)
    said: list[str] = []
    try:
        assert process.stderr is not None
        with anyio.fail_after(timeout):
            buffered = b""
            async for chunk in process.stderr:
                buffered += chunk
                said.append(chunk.decode(errors="replace"))
                if f"poolwise: {name} leading (".encode() in buffered:  # as `up` sees its children ready
                    break
            else:
                raise RuntimeError(f"`poolwise serve {name}` ended before it was ready: {''.join(said)[-2000:]}")
        yield process.pid
    finally:
        with anyio.CancelScope(shield=True):
            if process.returncode is None:
                process.terminate()
                with anyio.move_on_after(10):
                    await process.wait()
                if process.returncode is None:
                    process.kill()
                    await process.wait()
            await process.aclose()


async def bench_pipeline(gangs: int = 50_000, *, leaves: int = 100, rates: Sequence[float] = (5000.0,),
                         paced_seconds: float = 4.0, raw_n: int = 50_000, timeout: float = 180.0,
                         workload: Workload | None = None, processes: bool = True) -> PipelineSpeed:
    """See the module doc. `timeout` bounds each wait of each phase (seconds). With `processes`,
    each service runs in its own process (`poolwise serve`), as on a machine with a core for each;
    otherwise both run in this process (as `poolwise up` runs them)."""
    counts = [max(0, round(rate * paced_seconds)) for rate in rates]
    base = workload or Workload(leaves=leaves)
    w = replace(base, gangs=gangs + sum(counts), fill=max(base.fill, 1.5))  # every gang fits: each is decided
    payload = gang_payload_size(w)
    paced: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="poolwise-bench-") as tmp:
        async with EmbeddedNats(tmp) as server:
            url = server.url
            raw = await measure_nats(url, raw_n, payload) if raw_n > 0 else {}
            if raw_n > 0:
                packed = await measure_raw_only(url, max(10, raw_n // PACK_EVENTS), PACK_EVENTS * (payload + 2))
                raw["packed_gangs_per_message"] = PACK_EVENTS
                raw.update({f"packed_{k[4:]}": v for k, v in packed.items() if k.startswith("raw_")})
            log = await JetStreamLog.connect(url)
            try:
                await log.ensure_stream()
                setup = [envelope(e, f"setup-{i}", 1_767_225_600.0, source="tree")
                         for i, e in enumerate(config_events(w))]
                await log.append(setup)
                spec = {"url": url, "workload": asdict(w), "timeout": timeout, "consumers": SERVICES}
                async with anyio.create_task_group() as tg, contextlib.AsyncExitStack() as children:
                    pids: dict[str, int | None] = {"services": None}
                    if processes:
                        pids = {name: await children.enter_async_context(serve_process(name, url,
                                                                                       Path(tmp) / "data", timeout))
                                for name in SERVICES}
                    else:
                        await start_services(tg, log, SERVICES, Path(tmp) / "data")
                    server_pid = server._proc.pid if server._proc is not None else None
                    if server_pid is not None:
                        pids["nats-server"] = server_pid
                    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
                    burst = await run_submitter({**spec, "mode": "burst", "prefix": "b", "start": 0,
                                                 "count": gangs}, timeout * 3)
                    burst["cpu_us_per_gang"] = {name: round((cpu_seconds(pid) - before[name]) * 1e6 / max(gangs, 1), 1)
                                                for name, pid in pids.items()}
                    start = gangs
                    for index, (rate, count) in enumerate(zip(rates, counts, strict=True)):
                        if count:
                            before = {name: cpu_seconds(pid) for name, pid in pids.items()}
                            paced.append(await run_submitter({**spec, "mode": "paced", "prefix": f"p{index}-",
                                                              "start": start, "count": count, "rate": rate},
                                                             timeout * 3))
                            paced[-1]["cpu_us_per_gang"] = {
                                name: round((cpu_seconds(pid) - before[name]) * 1e6 / count, 1)
                                for name, pid in pids.items()}
                        else:
                            paced.append({"count": 0})
                        start += count
                    tg.cancel_scope.cancel()
            finally:
                with anyio.CancelScope(shield=True):
                    await log.close()
    return PipelineSpeed(workload=w, payload_size=payload, raw={k: float(v) for k, v in raw.items()},
                         burst=burst, paced=paced, rates=tuple(rates), paced_seconds=paced_seconds)


def main(argv: list[str]) -> None:
    gangs = int(argv[0]) if argv else 20_000
    leaves = int(argv[1]) if len(argv) > 1 else 100
    processes = not (len(argv) > 2 and argv[2] == "inline")
    speed = anyio.run(lambda: bench_pipeline(gangs, leaves=leaves, raw_n=min(gangs, 20_000), processes=processes),
                      backend="asyncio")
    print(json.dumps({"e2e_per_s": speed.e2e_per_s, "decided_per_s": speed.decided_per_s,
                      "publish_per_s": speed.publish_per_s, "raw_publish_consume": speed.raw_publish_consume,
                      "raw_packed_publish_consume": speed.raw_packed_publish_consume,
                      "burst": speed.burst, "paced": speed.paced, "raw": speed.raw}, indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
