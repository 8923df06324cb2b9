"""Soak (issue 18, "Numbers"): what running costs as the history grows. Nothing runs at import.

`await soak(sizes)` runs, for each history size (gangs), on a system of its own:

1. a private nats-server (`EmbeddedNats`, loopback, in a temporary directory) and `poolwise up`
   on it (`--nats-url`, a data dir of its own): the tree, admission and preemption services, each
   in a process of its own, as a user runs them (with their modules' compiled bytecode kept, as an
   installed poolwise has it, whatever PYTHONDONTWRITEBYTECODE says: `_child_env`);
2. one tree of `leaves` leaf pools over one host, its options with a small `gang_retention`
   (seconds of log time after which a finished gang is forgotten) and gang timeout;
3. the whole life of `gangs` gangs of two tasks, through the submitter SDK
   (`services.sdk.Submitter.publish`, events built by its `enqueue_event`/`task_state_event`):
   rounds of `per_round` gangs enqueued as one pack, and, once admission has admitted a round,
   each of its tasks reported `running` then `succeeded` (admission then finishes the gang),
   `window` rounds in flight. Events are stamped with a log time that advances `log_rate` gangs
   per second from the start (the services' clock is the log's: retention and timers follow it),
   so a history of N gangs spans N / log_rate seconds of log time whatever the machine's speed.
   While the history is made every service runs at niceness 0 (`Up.niceness`): the tree and
   preemption lower theirs to 10 once they lead (`serve_cmd.yield_cpu`), which on a machine
   loaded by other work left the tree's read models far behind and made a 1M-gang history take
   hours; what is measured afterwards runs at the niceness the services give themselves;
4. once every gang has finished and the services are caught up (each durable consumer has
   nothing pending nor unacknowledged, the tree's projections have committed the end of the
   log), the RSS of each service process (`/proc/<pid>/status` VmRSS);
5. `poolwise replay --verify --json` as a child process on the stream: events/s (its report's
   events over its wall time) and peak RSS (its process tree, sampled every 20 ms from /proc,
   summed; and the largest single process from `wait4`'s rusage); run last, after 6 and 7 (the
   longest step at a large size: a run stopped during it keeps the other figures);
6. a restart: `poolwise up` stopped (SIGTERM) and started again on the same data dir and server;
   the seconds from the new process's start until it says ready (each service leading, its
   rebuild fold done), until admission answers an `explain` of the last gang, and until the
   services are caught up (as in 4) and answering: restart-to-answer is the last of those;
   then the RSS of each service again;
7. a failover: a standby `poolwise serve admission` (a data dir of its own, as on another
   machine) is started and stands by; the active admission process (`up`'s child) is killed
   with SIGKILL and a new gang is submitted at once; failover is the seconds from the kill
   until that gang's `GangAdmitted` is seen (whoever took over: the standby, or the admission
   `up` restarted meanwhile, which one is told).

`soak_rows` turns the results into rows, with the ratio large / small of each figure and the
goals of issue 18: ratios <= 1.2 for restart, failover, the services' RSS and replay's peak RSS;
restart and failover <= 3 s.

    python -m bench.soak 2000,4000      # a quick look: a JSON line per size, as each is done;
                                        # stderr: what it does, timed, with the load average
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import Process

import bench
from events import (
    Envelope,
    Event,
    HostRegistered,
    PoolConfig,
    PoolConfigChanged,
    TreeConfigured,
    TreeOptions,
)
from events.codec import decode_all, pack_parts
from events.commands import Reply
from events.config import GangTimeoutOptions
from events.subjects import STREAM, command, decision
from services.admission.commands import ExplainQuery
from services.common.jetstream import JetStreamLog
from services.common.nats_client import new_client
from services.common.natsserver import EmbeddedNats
from services.common.supervisor import PARENT_ENV
from services.sdk import PublishError, Submitter
from services.sdk.build import enqueue_event, envelope, task_state_event

TREE = "soak"
SERVICES: tuple[str, ...] = ("tree", "admission", "preemption")
RESTART_GOAL_S = 3.0
FAILOVER_GOAL_S = 3.0
RATIO_GOAL = 1.2
MB = 1024 * 1024

_TYPE = re.compile(rb'"type":"(GangAdmitted|GangFinished)"')
_GANG = re.compile(rb'"gang":"([^"]+)"')


@dataclass(frozen=True)
class Shape:
    """The workload, the same at every size (only the number of gangs changes)."""

    leaves: int = 20
    per_round: int = 500  # gangs enqueued per pack
    window: int = 4  # rounds enqueued and not yet reported
    log_rate: float = 100.0  # gangs per second of log time
    retention: float = 60.0  # TreeOptions.gang_retention, seconds of log time
    gang_timeout: float = 120.0  # seconds of log time: placement timers of a finished gang go with it
    timeout: float = 600.0  # seconds, for each wait


@dataclass
class SizeResult:
    gangs: int
    messages: int = 0  # stream messages at the end of the run
    generate_s: float = 0.0  # the whole history: first enqueue until every gang finished and caught up
    rss_run: dict[str, int] = field(default_factory=dict)  # bytes, per service, after the run
    rss_restart: dict[str, int] = field(default_factory=dict)  # bytes, per service, after the restart
    cpu_us_per_gang: dict[str, float] = field(default_factory=dict)  # while generating, per process
    restart_leading_s: dict[str, float] = field(default_factory=dict)  # each service's `leading` line
    empty_start_s: float = 0.0  # `poolwise up` ready on a log holding only the tree's configuration
    restart_ready_s: float = 0.0
    restart_answer_s: float = 0.0  # explain of the last gang answered
    restart_s: float = 0.0  # caught up and answering
    failover_s: float = 0.0
    failover_by: str = ""
    standby_warm_s: float = 0.0  # the standby's start until its /readyz said 200 (before the kill)
    replay_s: float = 0.0
    replay_events: int = 0
    replay_ok: bool = False
    replay_peak_rss: int = 0  # bytes, the replay's process tree, summed
    replay_max_process_rss: int = 0  # bytes, its largest single process (wait4)
    notes: list[str] = field(default_factory=list)

    @property
    def replay_events_per_s(self) -> float:
        return self.replay_events / self.replay_s if self.replay_s > 0 else 0.0


# --- processes ------------------------------------------------------------------------------------


def _child_env() -> dict[str, str]:
    root = str(Path(bench.__file__).resolve().parent.parent)
    env = dict(os.environ)
    env.pop("NATS_URL", None)
    # Compiled modules kept, as an installed poolwise has them (pip compiles a wheel's modules): with
    # PYTHONDONTWRITEBYTECODE=1, as this machine's environment sets it, every start of a service
    # compiles its modules from source (restarts after a 1,000-gang history, alternated, load 19-21:
    # CPU until ready over up and its three services 2.96-3.05 s -> 2.33-2.51 s; caught up and
    # answering 12.5-12.7 s -> 10.3-10.5 s). The first start writes them; the restart reads them.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env[PARENT_ENV] = str(os.getpid())  # dies with the benchmark, even killed
    return env


def _poolwise(*args: str) -> list[str]:
    return [sys.executable, "-m", "services.tools.cli.main", *args]


def rss_bytes(pid: int) -> int:
    """Resident set size of process `pid` now (0 if it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return 0
    return 0


def cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def niceness_of(pid: int) -> int | None:
    """The niceness of process `pid`'s main thread (None if it is gone)."""
    try:
        return os.getpriority(os.PRIO_PROCESS, pid)
    except OSError:
        return None


def set_niceness(pid: int, niceness: int) -> bool:
    """Every thread of process `pid` at `niceness` (on Linux a niceness is a thread's, and
    `os.nice` in a service changed only the thread that called it and the threads it made
    after). False where not allowed (lowering a niceness needs CAP_SYS_NICE) or gone."""
    try:
        threads = [int(t.name) for t in Path(f"/proc/{pid}/task").iterdir()]
    except OSError:
        return False
    done = True
    for tid in threads:
        try:
            os.setpriority(os.PRIO_PROCESS, tid, niceness)
        except ProcessLookupError:  # a thread that ended meanwhile
            continue
        except OSError:
            done = False
    return done


def children_of(pid: int) -> list[int]:
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                found += [int(p) for p in (task / "children").read_text().split()]
    return found


def process_tree(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        here = todo.pop()
        out.append(here)
        todo += children_of(here)
    return out


def cmdline(pid: int) -> list[str]:
    try:
        return [a.decode(errors="replace") for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
    except OSError:
        return []


class Up:
    """`poolwise up --nats-url URL --data-dir DIR` as a child process; its stderr is read on."""

    def __init__(self, url: str, data_dir: Path) -> None:
        self.url = url
        self.data_dir = data_dir
        self.process: Process | None = None
        self.lines: deque[str] = deque(maxlen=200)
        self.leading: dict[str, float] = {}  # service -> perf_counter of its `leading` line, this start
        self.ready = anyio.Event()
        self.started_at = 0.0
        self.ready_at = 0.0

    async def start(self, tg: Any) -> None:
        self.started_at = time.perf_counter()
        self.ready = anyio.Event()
        self.leading = {}
        self.process = await anyio.open_process(
            _poolwise("up", "--nats-url", self.url, "--data-dir", str(self.data_dir)),
            env=_child_env(), stdout=subprocess.DEVNULL)
        tg.start_soon(self._read, self.process)

    async def _read(self, process: Process) -> None:
        assert process.stderr is not None
        buffered = b""
        async for chunk in process.stderr:
            buffered += chunk
            *whole, buffered = buffered.split(b"\n")
            for raw in whole:
                line = raw.decode(errors="replace")
                self.lines.append(line)
                for name in SERVICES:
                    if f"poolwise: {name} leading (" in line:
                        self.leading.setdefault(name, time.perf_counter())
                if " ready on " in line and not self.ready.is_set():
                    self.ready_at = time.perf_counter()
                    self.ready.set()

    async def wait_ready(self, timeout: float) -> None:
        with anyio.fail_after(timeout):
            while not self.ready.is_set():
                if self.process is not None and self.process.returncode is not None:
                    raise RuntimeError(f"`poolwise up` exited ({self.process.returncode}): {self.tail()}")
                with anyio.move_on_after(0.2):
                    await self.ready.wait()

    def tail(self) -> str:
        return " | ".join(list(self.lines)[-8:])

    def service_pid(self, name: str) -> int | None:
        if self.process is None:
            return None
        for pid in children_of(self.process.pid):
            args = cmdline(pid)
            if "serve" in args and args[args.index("serve") + 1:args.index("serve") + 2] == [name]:
                return pid
        return None

    def cpu(self) -> dict[str, float]:
        """CPU seconds (user + system) of each service process so far."""
        return {name: cpu_seconds(pid) if (pid := self.service_pid(name)) else 0.0 for name in SERVICES}

    def rss(self) -> dict[str, int]:
        return {name: rss_bytes(pid) if (pid := self.service_pid(name)) else 0 for name in SERVICES}

    @contextlib.contextmanager
    def niceness(self, niceness: int) -> Any:
        """Every service process at `niceness` within the block, then back at its own (module
        doc, step 3); yields whether it could be set (lowering needs privileges)."""
        before = {pid: nice for name in SERVICES
                  if (pid := self.service_pid(name)) is not None and (nice := niceness_of(pid)) is not None}
        try:
            yield all([set_niceness(pid, niceness) for pid in before])
        finally:
            for pid, nice in before.items():
                set_niceness(pid, nice)

    async def stop(self) -> None:
        process = self.process
        if process is None:
            return
        with anyio.CancelScope(shield=True):
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
                with anyio.move_on_after(30):
                    await process.wait()
                if process.returncode is None:
                    process.kill()
                    await process.wait()
            await process.aclose()
        self.process = None


@contextlib.asynccontextmanager
async def standby_admission(url: str, data_dir: Path, timeout: float) -> AsyncIterator[dict[str, float]]:
    """`poolwise serve admission` as a second instance: yields once it stands by warm (its
    `/readyz` answers 200: its fold, from its snapshot and the log, is within the ready lag of the
    log's end; "standing by" alone is said before the snapshot is loaded, and a failover measured
    from there timed the load, not the takeover); the dict gets `warm` (seconds from the start to
    that) and `leading` (perf_counter) when it says it leads."""
    http_port = _free_port()
    began = time.perf_counter()
    process = await anyio.open_process(_poolwise("serve", "admission", "--nats-url", url, "--data-dir",
                                                 str(data_dir), "--http-port", str(http_port)),
                                       env=_child_env(), stdout=subprocess.DEVNULL)
    said: dict[str, float] = {}
    lines: list[str] = []
    standing = anyio.Event()

    async def read() -> None:
        assert process.stderr is not None
        buffered = b""
        async for chunk in process.stderr:
            buffered += chunk
            *whole, buffered = buffered.split(b"\n")
            for raw in whole:
                line = raw.decode(errors="replace")
                lines.append(line)
                if "admission standing by" in line:
                    standing.set()
                elif "admission leading (" in line:
                    said.setdefault("leading", time.perf_counter())
                    standing.set()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            with anyio.fail_after(timeout):
                await standing.wait()
                if "leading" in said:
                    raise RuntimeError(f"the second admission leads at once: {' | '.join(lines[-5:])}")
                while (await _readyz(http_port)) != 200:
                    await anyio.sleep(0.1)
            said["warm"] = time.perf_counter() - began
            yield said
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            if process.returncode is None:
                process.terminate()
                with anyio.move_on_after(15):
                    await process.wait()
                if process.returncode is None:
                    process.kill()
                    await process.wait()
            await process.aclose()


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _readyz(port: int) -> int:
    """The status of `/readyz` on the loopback `port` (0 while nothing answers there yet)."""
    from services.common.health_http import get

    try:
        status, _ = await get("127.0.0.1", port, "/readyz", timeout=2.0)
    except (OSError, TimeoutError):
        return 0
    return status


def run_replay(url: str, timeout: float) -> dict[str, Any]:
    """`poolwise replay --verify --json` on the stream at `url`, in a child process: its report,
    wall seconds, the peak of its process tree's summed RSS (sampled) and its largest process's
    peak RSS (wait4's rusage: the child and the children it waited for)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        began = time.perf_counter()
        child = subprocess.Popen(_poolwise("replay", "--verify", "--json", "--nats-url", url), env=_child_env(),
                                 stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        peak, status, usage = 0, 0, None
        deadline = began + timeout
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid == child.pid:
                break
            peak = max(peak, sum(rss_bytes(p) for p in process_tree(child.pid)))
            if time.perf_counter() > deadline:
                child.kill()
                _, status, usage = os.wait4(child.pid, 0)
                break
            time.sleep(0.02)
        child.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
        seconds = time.perf_counter() - began
        out.seek(0)
        err.seek(0)
        text = out.read().decode(errors="replace").strip()
        report: dict[str, Any] = {}
        if text:
            with contextlib.suppress(ValueError):
                report = json.loads(text.splitlines()[-1])
        largest = usage.ru_maxrss * 1024 if usage is not None else 0  # Linux: kilobytes
        return {"report": report, "seconds": seconds, "peak_rss": max(peak, largest), "max_process_rss": largest,
                "exit": child.returncode, "stderr": err.read().decode(errors="replace")[-2000:]}


# --- the workload ---------------------------------------------------------------------------------


class Decisions:
    """Admission's decisions of the tree on a core subscription: which gangs were admitted, how
    many finished."""

    def __init__(self) -> None:
        self.admitted: set[str] = set()
        self.finished = 0
        self.changed = anyio.Event()

    async def on_msg(self, msg: Any) -> None:
        for part in pack_parts(msg.data):
            found = _TYPE.search(part, 0, 600)
            if found is None:
                continue
            gang = _GANG.search(part, found.end())
            if found.group(1) == b"GangFinished":
                self.finished += 1
            elif gang is not None:
                self.admitted.add(gang.group(1).decode())
        self.changed.set()

    async def until(self, done: Any, timeout: float, what: str) -> None:
        with anyio.fail_after(timeout):
            while not done():
                self.changed = anyio.Event()
                if done():
                    return
                with anyio.move_on_after(0.5):
                    await self.changed.wait()
        if not done():
            raise TimeoutError(what)


def config_envelopes(shape: Shape, at: float) -> list[Envelope]:
    tasks_in_flight = 2 * shape.per_round * (shape.window + 2)
    cpu = float(4 * tasks_in_flight)
    options = TreeOptions(resources=["cpu", "memory"], gang_retention=shape.retention,
                          gang_timeout=GangTimeoutOptions(default=shape.gang_timeout, limit=shape.gang_timeout,
                                                          jitter=0.0))
    events: list[Event] = [TreeConfigured(tree=TREE, options=options),
                           HostRegistered(host="h1", resources={"cpu": cpu, "memory": 4.0 * cpu})]
    share = {"cpu": cpu / shape.leaves / 2, "memory": 4.0 * cpu / shape.leaves / 2}
    for i in range(shape.leaves):
        events.append(PoolConfigChanged(tree=TREE, path=f"/l{i}", created=True, config=PoolConfig(reservation=share)))
    return [Envelope(id=f"soak-setup-{i}", time=datetime.fromtimestamp(at, tz=UTC), source="tree", event=e)
            for i, e in enumerate(events)]


class Workload:
    """The gangs' whole lives, through the submitter SDK, at a log time of its own."""

    def __init__(self, submitter: Submitter, decisions: Decisions, shape: Shape, start: float) -> None:
        self.sdk = submitter
        self.decisions = decisions
        self.shape = shape
        self.start = start
        self.enqueued = 0
        self.last_gang = ""
        self.tag = ""  # in the ids of gangs made after the history (a kept history is measured again and again)

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.start + self.enqueued / self.shape.log_rate, tz=UTC)

    def gang(self, index: int, prefix: str = "g") -> dict[str, Any]:
        name = f"{prefix}{index}"
        return {"gang": name, "pool": f"/l{index % self.shape.leaves}", "job": f"j{index % 7}", "user": "u",
                "tasks": [{"id": f"{name}.{t}", "resources": {"cpu": 1.0, "memory": 4.0}} for t in range(2)],
                "tree": TREE}

    async def enqueue(self, specs: Sequence[dict[str, Any]]) -> None:
        at = self.now()
        await self._publish([envelope(enqueue_event(**spec), source="sdk:soak", time=at) for spec in specs])
        self.enqueued += len(specs)
        self.last_gang = specs[-1]["gang"]

    async def report(self, specs: Sequence[dict[str, Any]]) -> None:
        at = self.now()
        reports = [envelope(task_state_event(task=t["id"], gang=s["gang"], state=state, tree=TREE),
                            source="sdk:soak", time=at)
                   for state in ("running", "succeeded") for s in specs for t in s["tasks"]]
        await self._publish(reports)

    async def _publish(self, envelopes: list[Envelope], attempts: int = 6) -> None:
        """Publish, again when NATS acknowledged late (the SDK's deadline is 10 s; a nats-server
        on a loaded machine, an hour into a 1M-gang history, missed it once and ended the run):
        an event is stored once whatever the retries (its id is the message's id)."""
        for attempt in range(attempts):
            try:
                await self.sdk.publish(envelopes)
                return
            except PublishError:
                if attempt == attempts - 1:
                    raise
                await anyio.sleep(1.0)

    async def run(self, gangs: int) -> None:
        shape = self.shape
        in_flight: deque[list[dict[str, Any]]] = deque()
        for first in range(0, gangs, shape.per_round):
            specs = [self.gang(i) for i in range(first, min(gangs, first + shape.per_round))]
            await self.enqueue(specs)
            in_flight.append(specs)
            last = first + shape.per_round >= gangs
            while in_flight and (len(in_flight) >= shape.window or last):
                await self.finish(in_flight.popleft())
        await self.decisions.until(lambda: self.decisions.finished >= gangs, shape.timeout,
                                   f"{gangs} gangs finished")

    async def finish(self, specs: list[dict[str, Any]]) -> None:
        admitted = self.decisions.admitted
        await self.decisions.until(lambda: all(s["gang"] in admitted for s in specs), self.shape.timeout,
                                   f"gangs {specs[0]['gang']}..{specs[-1]['gang']} admitted")
        for s in specs:
            admitted.discard(s["gang"])
        await self.report(specs)


# --- waiting for the services ---------------------------------------------------------------------


async def caught_up(nc: Any, timeout: float) -> None:
    """Every service's durable consumer has nothing pending nor unacknowledged, the tree's
    projections have committed the end of the stream, and the stream did not move meanwhile."""
    js = nc.jetstream()
    query = json.dumps({"sql": "SELECT min(last_seq) FROM checkpoints"}).encode()
    with anyio.fail_after(timeout):
        while True:
            last = (await js.stream_info(STREAM)).state.last_seq
            quiet = True
            for name in SERVICES:
                try:
                    info = await js.consumer_info(STREAM, name)
                except Exception:  # not made yet (a service still folding on start)
                    quiet = False
                    break
                if info.num_pending or info.num_ack_pending:
                    quiet = False
                    break
            if quiet:
                projected = None
                with contextlib.suppress(Exception):
                    reply = json.loads((await nc.request(command("tree", "sql"), query, timeout=2.0)).data)
                    projected = (reply.get("data", {}).get("rows") or [[None]])[0][0]
                if projected is not None and int(projected) >= last \
                        and (await js.stream_info(STREAM)).state.last_seq == last:
                    return
            await anyio.sleep(0.05)


async def explain_answers(nc: Any, gang: str, timeout: float) -> dict[str, Any]:
    """Ask admission `explain GANG` until it answers with the gang known (or forgotten)."""
    query = ExplainQuery(gang=gang, tree=TREE).model_dump_json().encode()
    with anyio.fail_after(timeout):
        while True:
            with contextlib.suppress(Exception):  # no responder yet, or busy folding: ask again
                reply = Reply.model_validate_json((await nc.request(command("admission", "explain"), query,
                                                                    timeout=1.0)).data)
                if reply.ok and isinstance(reply.data, dict) and (
                        reply.data.get("state") != "unknown" or "forgotten" in str(reply.data.get("summary"))):
                    return reply.data  # (a gang forgotten by retention is known: explain says so)
            await anyio.sleep(0.05)


# --- one size -------------------------------------------------------------------------------------


async def soak_one(gangs: int, shape: Shape, log: Any = None, keep: Path | None = None) -> SizeResult:
    """The whole soak at one history size (module doc, steps 1-7). With `keep`, only steps 1-4,
    the server's store left in `keep` (`EmbeddedNats(keep)` serves it again) and the services'
    data dir beside it (`keep.parent / "data"`): a history to measure again and again
    (`python -m bench.soak --keep DIR/server GANGS`, then `--measure DIR GANGS`)."""
    say = log or (lambda text: None)
    result = SizeResult(gangs=gangs)
    with tempfile.TemporaryDirectory(prefix="poolwise-soak-") as tmp:
        root = Path(tmp)
        async with EmbeddedNats(keep or root / "server") as server, anyio.create_task_group() as tg:
            url = server.url
            start = time.time()
            setup = await JetStreamLog.connect(url)
            try:
                await setup.ensure_stream()
                await setup.append(config_envelopes(shape, start))
            finally:
                await setup.close()
            nc = new_client()
            await nc.connect(url, name="poolwise-soak")
            decisions = Decisions()
            await nc.subscribe(decision(TREE, "admission"), cb=decisions.on_msg)
            await nc.flush()
            # a kept history keeps its data dir beside the server's store: `--measure` then starts
            # on the tree's read models as they were made, not on a rebuild of them from the log
            # (at 1M gangs, an hour or more on a loaded machine)
            up = Up(url, keep.parent / "data" if keep is not None else root / "data")
            sdk = Submitter(url, source="sdk:soak", tree=TREE)
            try:
                await up.start(tg)
                await up.wait_ready(shape.timeout)
                result.empty_start_s = up.ready_at - up.started_at
                await sdk.connect()
                work = Workload(sdk, decisions, shape, start)
                began = time.perf_counter()
                cpu0 = {**up.cpu(), "nats-server": cpu_seconds(server._proc.pid) if server._proc else 0.0,
                        "submitter": time.process_time()}
                say(f"soak {gangs:,}: generating")
                ticking = anyio.CancelScope()  # entered by _progress, ended here
                with up.niceness(0) as reniced:
                    if not reniced:
                        result.notes.append("the services could not be set to niceness 0 while the history "
                                            "was made (not allowed here): the tree and preemption ran at 10")
                    tg.start_soon(_progress, work, gangs, say, ticking)
                    await work.run(gangs)
                    await caught_up(nc, shape.timeout + gangs / 200)
                    ticking.cancel()
                result.generate_s = time.perf_counter() - began
                cpu1 = {**up.cpu(), "nats-server": cpu_seconds(server._proc.pid) if server._proc else 0.0,
                        "submitter": time.process_time()}
                result.cpu_us_per_gang = {k: round((cpu1[k] - cpu0[k]) * 1e6 / gangs, 1) for k in cpu0}
                result.messages = (await nc.jetstream().stream_info(STREAM)).state.last_seq
                result.rss_run = up.rss()
                say(f"soak {gangs:,}: {result.messages:,} messages in {result.generate_s:.0f} s; "
                    f"RSS {_mb(result.rss_run)}; restarting")
                if keep is not None:
                    return result

                await restart_failover_replay(url, root, up, tg, nc, work, shape, result, say)
            finally:
                await _wind_down(sdk, up, nc, tg)
    return result


async def _wind_down(sdk: Submitter, up: Up, nc: Any, tg: Any) -> None:
    with anyio.CancelScope(shield=True):
        await sdk.close()
        await up.stop()
        await nc.close()
    tg.cancel_scope.cancel()


async def restart_failover_replay(url: str, root: Path, up: Up, tg: Any, nc: Any, work: Workload, shape: Shape,
                                  result: SizeResult, say: Any) -> None:
    """Steps 6, 7 and 5 of the module doc on a history that is made and caught up, `up` running."""
    gangs = result.gangs
    await up.stop()
    await up.start(tg)
    await up.wait_ready(shape.timeout)
    result.restart_ready_s = up.ready_at - up.started_at
    result.restart_leading_s = {k: round(v - up.started_at, 3) for k, v in up.leading.items()}
    await explain_answers(nc, work.last_gang, shape.timeout)
    result.restart_answer_s = time.perf_counter() - up.started_at
    await caught_up(nc, shape.timeout)
    result.restart_s = time.perf_counter() - up.started_at
    result.rss_restart = up.rss()
    say(f"soak {gangs:,}: restart {result.restart_s:.1f} s; RSS {_mb(result.rss_restart)}; failover")

    result.failover_s, result.failover_by = await failover(url, root / "standby", up, work, shape, result)
    say(f"soak {gangs:,}: failover {result.failover_s:.1f} s ({result.failover_by}); replaying")
    # bounded by the history's size too: 1M gangs are ~7M events, at 5k events/s ~1,400 s
    replay = await anyio.to_thread.run_sync(run_replay, url, shape.timeout * 2 + gangs / 500)
    report = replay["report"]
    result.replay_s = replay["seconds"]
    result.replay_events = int(report.get("events", 0))
    result.replay_ok = bool(report.get("ok"))
    result.replay_peak_rss = int(replay["peak_rss"])
    result.replay_max_process_rss = int(replay["max_process_rss"])
    if not result.replay_ok:
        result.notes.append(f"replay: exit {replay['exit']}, findings "
                            f"{len(report.get('findings', []))}: {replay['stderr'][-300:]}")
    say(f"soak {gangs:,}: replay {result.replay_events_per_s:,.0f} events/s, peak "
        f"{result.replay_peak_rss / MB:,.0f} MB")


async def soak_kept(directory: Path, gangs: int, shape: Shape, log: Any = None) -> SizeResult:
    """Steps 5-7 on a history kept by `--keep DIRECTORY/server GANGS`, with the code as it is now
    (the history is made once, in about an hour at 1M gangs, and measured after each change).
    `poolwise up` first runs once on it and catches up (untimed: a first start after an upgrade
    folds whatever its snapshots do not hold, and the tree's read models are made in
    DIRECTORY/data, kept for the next measure) and is stopped cleanly (its snapshots written);
    then the restart, failover and replay are measured as `soak_one` does. `rss_run` is the RSS
    after that first catch-up, not after making the history."""
    say = log or (lambda text: None)
    result = SizeResult(gangs=gangs)
    async with EmbeddedNats(directory / "server") as server, anyio.create_task_group() as tg:
        url = server.url
        nc = new_client()
        await nc.connect(url, name="poolwise-soak")
        js = nc.jetstream()
        result.messages = (await js.stream_info(STREAM)).state.last_seq
        last = decode_all((await js.get_msg(STREAM, result.messages)).data)[-1]
        decisions = Decisions()
        await nc.subscribe(decision(TREE, "admission"), cb=decisions.on_msg)
        await nc.flush()
        up = Up(url, directory / "data")
        sdk = Submitter(url, source="sdk:soak", tree=TREE)
        try:
            began = time.perf_counter()
            await up.start(tg)
            await up.wait_ready(shape.timeout + gangs / 100)
            await caught_up(nc, shape.timeout + gangs / 100)
            result.notes.append(f"first start on the kept history caught up in {time.perf_counter() - began:.0f} s")
            result.rss_run = up.rss()
            say(f"soak {gangs:,} (kept): caught up; RSS {_mb(result.rss_run)}; restarting")
            await sdk.connect()
            # new gangs come after the history's last log time
            start = last.time.timestamp() + 1.0
            work = Workload(sdk, decisions, shape, start)
            work.tag = f"-{int(time.time())}"
            work.last_gang = f"g{gangs - 1}"
            await restart_failover_replay(url, directory, up, tg, nc, work, shape, result, say)
        finally:
            await _wind_down(sdk, up, nc, tg)
    return result


async def _progress(work: Workload, gangs: int, say: Any, scope: anyio.CancelScope, every: float = 60.0) -> None:
    """A line every `every` seconds while a history is made: how far, and how fast lately."""
    with scope:
        began, done = time.perf_counter(), 0
        while True:
            await anyio.sleep(every)
            now, finished = time.perf_counter(), work.decisions.finished
            say(f"soak {gangs:,}: {finished:,} gangs finished after {now - began:.0f} s "
                f"({(finished - done) / every:,.0f} gangs/s lately)")
            done = finished


async def failover(url: str, data_dir: Path, up: Up, work: Workload, shape: Shape,
                   result: SizeResult | None = None) -> tuple[float, str]:
    """Kill -9 the active admission while a warm standby runs; seconds until a new gang is admitted."""
    async with standby_admission(url, data_dir, shape.timeout) as standby:
        if result is not None:
            result.standby_warm_s = round(standby["warm"], 3)
        active = up.service_pid("admission")
        if active is None:
            raise RuntimeError(f"no admission process under `poolwise up`: {up.tail()}")
        spec = work.gang(0, prefix=f"failover{work.tag}-")
        killed = time.perf_counter()
        os.kill(active, signal.SIGKILL)
        await work.enqueue([spec])
        await work.decisions.until(lambda: spec["gang"] in work.decisions.admitted, shape.timeout,
                                   "the gang submitted after the kill admitted")
        seconds = time.perf_counter() - killed
        taken = standby.get("leading")
        by = "the standby" if taken is not None and taken - killed <= seconds else "admission restarted by up"
        return seconds, by


def _mb(rss: dict[str, int]) -> str:
    return ", ".join(f"{k} {v / MB:,.0f} MB" for k, v in rss.items())


async def soak(sizes: Sequence[int], shape: Shape | None = None, log: Any = None,
               each: Any = None) -> list[SizeResult]:
    """`soak_one` at each size in turn; `each(result)` hears each size's result as soon as it is
    done (a long run keeps its smaller sizes' numbers if a larger one fails or is stopped)."""
    shape = shape or Shape()
    results = []
    for n in sizes:
        results.append(await soak_one(n, shape, log))
        if each is not None:
            each(results[-1])
    return results


def as_json(result: SizeResult) -> dict[str, Any]:
    return asdict(result) | {"replay_events_per_s": result.replay_events_per_s}


def main(argv: list[str]) -> None:
    if argv[:1] == ["--keep"]:  # --keep DIR GANGS: make one history and keep its server's store in DIR
        kept = anyio.run(lambda: soak_one(int(argv[2]), Shape(), lambda t: print(t, file=sys.stderr),
                                          Path(argv[1])), backend="asyncio")
        print(json.dumps(asdict(kept), indent=2))
        return
    if argv[:1] == ["--measure"]:  # --measure DIR GANGS: steps 5-7 on a history kept in DIR/server
        measured = anyio.run(lambda: soak_kept(Path(argv[1]), int(argv[2]), Shape(),
                                               lambda t: print(f"{datetime.now(UTC):%H:%M:%S} load "
                                                               f"{os.getloadavg()[0]:.1f}: {t}", file=sys.stderr,
                                                               flush=True)), backend="asyncio")
        print(json.dumps(as_json(measured)), flush=True)
        return
    sizes = [int(s) for s in (argv[0] if argv else "2000,4000").split(",")]

    def stamped(text: str) -> None:
        print(f"{datetime.now(UTC):%H:%M:%S} load {' '.join(f'{x:.1f}' for x in os.getloadavg())}: {text}",
              file=sys.stderr, flush=True)

    def each(result: SizeResult) -> None:  # one JSON line per size, as each is done
        print(json.dumps(as_json(result)), flush=True)

    anyio.run(lambda: soak(sizes, log=stamped, each=each), backend="asyncio")


if __name__ == "__main__":
    main(sys.argv[1:])
