"""Which services exist and how they start: the one table, wired in one place.

`run_system(names, data_dir, nats_url)` connects to NATS (or starts an embedded server when no
URL is given), makes sure the stream exists, and starts the named services in one task group,
in the table's order, each once the previous one is ready.

On JetStream, each service runs under a leadership lease (`services.common.leadership`): one
active instance per service and deployment, the others standing by, so `poolwise up` and any
number of `poolwise serve <service>` can share a server without deciding twice. On a log with
no key-value store (the in-memory log) the services simply run.

With an embedded server, the data directory is claimed first (`claim_data_dir`): a second
`poolwise up` on the same directory is refused, and a server left running by a `poolwise up`
that was killed (SIGKILL: no chance to stop its child) is stopped before a new one starts on
the same store. The embedded server is stopped on the way out even when cancelled.

`run_processes(names, data_dir, nats_url)` is `poolwise up`'s default: the same server handling,
then each named service in an OS process of its own (`service_process`: `poolwise serve <name>`,
the very code path of `run_system` with one name), kept running by a `Supervisor`
(`services.common.supervisor`: restarts with a backoff, stops them all on the way out, children
that die with this process even when it is killed), so the services use as many cores as the
machine has."""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import IO, Any

import anyio

from services.common import id_runs
from services.common.input_error import InputError
from services.common.jetstream import JetStreamLog
from services.common.leadership import OnChange, run_as_leader
from services.common.lease_bucket import BUCKET, lease_key, open_leases
from services.common.lease_renewer import connector, servers_of
from services.common.log import EventLog
from services.common.natsserver import (
    EmbeddedNats,
    NatsServerError,
    remember_port,
    remembered_port,
    remove_url_file,
    write_url_file,
)
from services.common.replicas import prepare
from services.common.runtime import give_back_memory
from services.common.supervisor import Child, Restarts, Supervisor, describe_exit
from services.common.tree_gate import OnTrees, run_per_tree
from services.common.tree_leases import PER_TREE, SERVICE_WIDE, per_tree_instances

Serve = Callable[..., Awaitable[None]]



def _entry(module: str, function: str) -> Serve:
    """A service's entry point, imported when it is first run: a process serving one service
    loads only that one (`serve admission` and `serve preemption` need neither DuckDB nor Arrow,
    about 40 MB of a process and a fifth of a second of its start)."""
    async def serve(*args: Any, **kwargs: Any) -> None:
        entry: Serve = getattr(importlib.import_module(module), function)
        await entry(*args, **kwargs)

    serve.__qualname__ = serve.__name__ = function
    return serve


class WarmStandby:
    """A service's warm standby (`services.common.leadership.Standby`): its `standby()` fold (in
    the service's module, imported when first needed), caught up from the newest snapshot and then
    with the log as it grows, so that on takeover it decides within moments, whatever the history."""

    def __init__(self, module: str, service: str) -> None:
        self.module = module
        self.service = service

    def new(self) -> Any:
        return importlib.import_module(self.module).standby()

    async def follow(self, warm: Any, log: Any) -> None:
        from services.common.snapshots import policy_for

        policy = policy_for(log, self.service)
        await warm.follow(log, policy.store if policy is not None else None)


# Services whose standby instances keep folding the log (the tree service's standby starts from
# its snapshot on takeover).
# Services that decide per tree with `--trees per-tree` (the tree service validates commands
# against the whole configuration and keeps the read models of every tree: one lease).
PER_TREE_SERVICES: tuple[str, ...] = ("admission", "preemption")

STANDBYS: dict[str, WarmStandby] = {
    "admission": WarmStandby("services.admission.service", "admission"),
    "preemption": WarmStandby("services.preemption.service", "preemption"),
}

SERVICES: dict[str, Serve] = {
    "tree": _entry("services.tree.service", "serve_tree"),
    "admission": _entry("services.admission.service", "serve_admission"),
    "preemption": _entry("services.preemption.service", "serve_preemption"),
}


async def start_services(tg: Any, log: EventLog, names: list[str], data_dir: Path | None, *,
                         leadership: bool = True, ready_on_standby: bool = False,
                         on_change: OnChange | None = None, nats_url: str | None = None,
                         leases: str = SERVICE_WIDE, on_trees: OnTrees | None = None,
                         **options: Any) -> list[Any]:
    """Start each named service in `tg` (in the table's order) and return what each reported ready.

    On a `JetStreamLog` (unless `leadership=False`) each runs under its lease (`run_as_leader`),
    renewed on a connection of its own to `nats_url` (default: the servers the log's connection
    knows): ready once it leads and is ready, or, with `ready_on_standby`, once it stands by (a
    `StandingBy`); `on_change(lease, state, holder)` hears of every change of role. `options`
    maps a service name to keyword arguments for its entry point.

    `leases=PER_TREE`: admission and preemption share the trees with their other instances
    (`services.common.tree_gate.run_per_tree`: ready once folded, whatever it holds; `on_trees`
    hears the trees held); the tree service keeps its one lease."""
    kv = await open_leases(log.nc) if leadership and isinstance(log, JetStreamLog) else None
    id_runs.install(data_dir)  # the id record's runs in files of the data dir, not in the heap
    started = []
    for name in SERVICES:
        if name in names:
            serve = SERVICES[name]
            sub = None if data_dir is None else data_dir / name
            extra = options.get(name, {})

            async def run(on: EventLog, *, task_status: Any, s: Serve = serve, d: Path | None = sub,
                          e: dict[str, Any] = extra, **term: Any) -> None:
                await s(on, d, task_status=task_status, **e, **term)  # term: a warm standby's fold

            if kv is None:
                started.append(await tg.start(lambda task_status, r=run: r(log, task_status=task_status)))
                continue
            assert isinstance(log, JetStreamLog)
            connect = connector(nats_url or servers_of(log.nc), name=f"poolwise-{name}-lease")
            if leases == PER_TREE and name in PER_TREE_SERVICES:
                started.append(await tg.start(partial(run_per_tree, name, run, log=log, bucket=BUCKET,
                                                      connect=connect, on_trees=on_trees)))
                continue
            # not while instances share its trees (started with --trees per-tree by mistake beside)
            yield_to = partial(per_tree_instances, log.nc, BUCKET, log.stream, name) \
                if name in PER_TREE_SERVICES else None
            started.append(await tg.start(partial(run_as_leader, lease_key(log.stream, name), run, log=log, kv=kv,
                                                  connect=connect, ready_on_standby=ready_on_standby,
                                                  on_change=on_change, standby=STANDBYS.get(name),
                                                  yield_to=yield_to)))
    return started


LOCK_FILE = "poolwise.lock"


@contextlib.contextmanager
def claim_data_dir(data_dir: Path) -> Iterator[None]:
    """Hold `<data_dir>/poolwise.lock` (an exclusive advisory lock, released by the kernel however
    the process ends) while running an embedded server on the data dir's store; stop a server
    that a killed `poolwise up` left running there."""
    data_dir.mkdir(parents=True, exist_ok=True)
    handle: IO[str] = (data_dir / LOCK_FILE).open("a")
    try:
        try:
            import fcntl

            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except ImportError:  # no advisory locks here (Windows): no guard
            pass
        except OSError:
            raise InputError(f"another `poolwise up` is running on data dir {data_dir}") from None
        stop_orphan_server(data_dir / "nats")
        yield
    finally:
        handle.close()


def stop_orphan_server(store_dir: Path, timeout: float = 10.0) -> int | None:
    """Stop the nats-server whose pid file is in `store_dir`, if it still runs on that store (a
    previous `poolwise up` was killed before it could stop it). Returns its pid, if one was stopped."""
    try:
        pid = int((store_dir / "nats.pid").read_text().strip())
    except (OSError, ValueError):
        return None
    if not serves_store(pid, store_dir):
        return None
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while serves_store(pid, store_dir) and time.monotonic() < deadline:
            time.sleep(0.05)
        if serves_store(pid, store_dir):
            os.kill(pid, signal.SIGKILL)
    return pid


def serves_store(pid: int, store_dir: Path) -> bool:
    """Whether process `pid` is a live nats-server with its store in `store_dir` (Linux /proc)."""
    proc = Path(f"/proc/{pid}")
    try:
        if (proc / "stat").read_text().rsplit(")", 1)[-1].split()[0] == "Z":
            return False  # exited, not reaped yet
        args = (proc / "cmdline").read_bytes().split(b"\0")
        cwd = os.readlink(proc / "cwd")
    except (OSError, IndexError):
        return False
    if not args or not Path(os.fsdecode(args[0])).name.startswith("nats-server") or b"-sd" not in args:
        return False
    index = args.index(b"-sd") + 1
    if index >= len(args):
        return False
    served = Path(cwd, os.fsdecode(args[index]))
    return os.path.realpath(served) == os.path.realpath(store_dir)


async def run_system(names: list[str], data_dir: Path, nats_url: str | None,
                     on_ready: Callable[[str], None] | None = None, *, ready_on_standby: bool = False,
                     on_change: OnChange | None = None, options: dict[str, dict[str, Any]] | None = None,
                     replicas: int = 1, leases: str = SERVICE_WIDE, on_trees: OnTrees | None = None) -> None:
    """Run the named services in this process until cancelled, on `nats_url` or an embedded server.
    Ready (`on_ready(url)`) once every service leads, or also stands by with `ready_on_standby`.
    `options`: keyword arguments of services' entry points, by service (`start_services`).
    `replicas`: of the stream and buckets (`services.common.replicas.prepare`). `leases`,
    `on_trees`: see `start_services`.

    The services keep their id runs in the data dir's files while they run (`id_runs.install`);
    once they stopped, the process's store is the one it had before (`id_runs.store_put_back`)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    with id_runs.store_put_back():
        async with nats_server(data_dir, nats_url) as server, anyio.create_task_group() as tg:
            tg.start_soon(watch_server, server)
            tg.start_soon(give_back_memory)  # what the services' peaks left free, back to the system
            await _run_on(names, data_dir, server.url, on_ready, ready_on_standby, on_change,
                          {**(options or {}), "leases": leases, "on_trees": on_trees}, replicas)
            tg.cancel_scope.cancel()


class ServerGone(Exception):
    """The embedded nats-server exited while poolwise was running on it."""


@dataclass(frozen=True, slots=True)
class Server:
    """The NATS server poolwise runs on: its URL, and the embedded server's handle (None: an
    outside server, `--nats-url`)."""

    url: str
    embedded: EmbeddedNats | None = None


async def watch_server(server: Server, every: float = 0.25) -> None:
    """Return never while the embedded server runs; raise `ServerGone` (with how it ended and
    the last line of its log) once it has exited. Nothing to watch for an outside server: the
    services reconnect to it on their own."""
    embedded = server.embedded
    if embedded is None:
        await anyio.sleep_forever()
        return
    while (code := embedded.exit_code()) is None:
        await anyio.sleep(every)
    raise ServerGone(f"the embedded nats-server exited ({describe_exit(code)}); the last line of its log "
                     f"({embedded.log_file}): {embedded.log_tail(1).strip() or '(empty)'}")


@contextlib.asynccontextmanager
async def nats_server(data_dir: Path, nats_url: str | None) -> AsyncIterator[Server]:
    """`nats_url`, or else an embedded server on the data dir's store (claimed first, its URL in
    the data dir while it runs, stopped on the way out even when cancelled)."""
    if nats_url is not None:
        yield Server(nats_url)
        return
    with claim_data_dir(data_dir):
        embedded = EmbeddedNats(data_dir, port=remembered_port(data_dir))  # the last port, if free
        try:
            with anyio.CancelScope(shield=True):  # a started server is always stopped below
                embedded.spawn()  # on this (the main) thread: the server dies with up (natsserver doc)
                try:
                    await anyio.to_thread.run_sync(embedded.wait_ready)
                except NatsServerError:
                    if embedded.port == -1:
                        raise
                    embedded = EmbeddedNats(data_dir)  # the port was taken meanwhile: any free one
                    embedded.spawn()
                    await anyio.to_thread.run_sync(embedded.wait_ready)
            write_url_file(data_dir, embedded.url)
            remember_port(data_dir, embedded.url)
            yield Server(embedded.url, embedded)
        finally:
            with anyio.CancelScope(shield=True):
                remove_url_file(data_dir)
                await anyio.to_thread.run_sync(embedded.stop)


def service_process(name: str, nats_url: str, data_dir: Path, args: Sequence[str] = ()) -> Child:
    """Service `name` as a process of its own: `poolwise serve NAME [ARGS]` with this interpreter."""
    return Child(name, (sys.executable, "-m", "services.tools.cli.main", "serve", name,
                        "--nats-url", nats_url, "--data-dir", str(data_dir), *args))


async def prepare_log(nats_url: str, replicas: int = 1) -> None:
    """Create the stream and the buckets once (with `replicas`), before several processes would race to."""
    log = await JetStreamLog.connect(nats_url)
    try:
        await prepare(log, replicas)
    finally:
        with anyio.CancelScope(shield=True):
            await log.close()


async def run_processes(names: list[str], data_dir: Path, nats_url: str | None,
                        on_ready: Callable[[str], None] | None = None, *, is_up: Callable[[str, str], bool],
                        on_line: Callable[[str, str], None], echo: Callable[[str], None],
                        restarts: Restarts | None = None, args: Mapping[str, Sequence[str]] | None = None,
                        replicas: int = 1) -> None:
    """Run each named service in a process of its own until cancelled (then stop them, then the
    embedded server), on `nats_url` or an embedded server. Ready (`on_ready(url)`) once every
    child is up (`is_up(name, line)` held for a line of its stderr); `on_line(name, line)` gets
    every line a child writes to stderr, `echo(text)` what the supervisor says. Raises
    `services.common.supervisor.GaveUp` if a service keeps failing before it is up. `args`: more
    arguments of `poolwise serve`, by service. `replicas`: of the stream and buckets (and each child's)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    async with nats_server(data_dir, nats_url) as server:
        url = server.url
        await prepare_log(url, replicas)
        children = [service_process(name, url, data_dir, (*(args or {}).get(name, ()), "--replicas", str(replicas)))
                    for name in SERVICES
                    if name in names]
        supervisor = Supervisor(children, is_up=is_up, on_line=on_line, echo=echo, restarts=restarts)
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch_server, server)  # the services cannot go on without it: neither can up
            await tg.start(supervisor.run)
            if on_ready is not None:
                on_ready(url)


async def _run_on(names: list[str], data_dir: Path, nats_url: str, on_ready: Callable[[str], None] | None,
                  ready_on_standby: bool, on_change: OnChange | None, options: dict[str, Any],
                  replicas: int = 1) -> None:
    log = await JetStreamLog.connect(nats_url)
    try:
        await prepare(log, replicas)
        async with anyio.create_task_group() as tg:
            await start_services(tg, log, names, data_dir, ready_on_standby=ready_on_standby, on_change=on_change,
                                 nats_url=nats_url, **options)
            if on_ready is not None:
                on_ready(nats_url)
    finally:
        with anyio.CancelScope(shield=True):
            await log.close()
