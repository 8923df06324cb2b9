"""Running the real `poolwise` CLI: in this process (fast) or as a subprocess, and `poolwise up` as a
subprocess that is always stopped, with any nats-server and service process it left behind."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest

from services.launcher import serves_store, stop_orphan_server

POOLWISE = str(Path(sys.executable).parent / "poolwise")
WAIT = 60.0  # seconds: the bound of every wait (a hung system fails the test, it does not hang it)
SERVICES = ("tree", "admission", "preemption")
READY = f"poolwise: {', '.join(SERVICES)} ready on"  # up's own ready line
STARTED = re.compile(r"^poolwise: (\w+) started \(pid (\d+)\)$", re.MULTILINE)  # up started a service process


def clean_env(**extra: str) -> dict[str, str]:
    """The environment for a CLI run: no NATS_URL or data dir inherited from the developer's shell."""
    env = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "POOLWISE_DATA_DIR", "POOLWISE_DEBUG")}
    env.update(extra)
    return env


@dataclass
class Result:
    code: int
    out: str
    err: str

    @property
    def err_lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.strip()]

    def json(self) -> Any:
        return json.loads(self.out)


def run(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = WAIT) -> Result:
    """`poolwise ARGS` as a subprocess."""
    done = subprocess.run([POOLWISE, *args], cwd=cwd, env=env or clean_env(), capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL, check=False)
    return Result(done.returncode, done.stdout, done.stderr)


def run_here(capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *args: str) -> Result:
    """`poolwise ARGS` in this process, through the same entry point as the script (`main()`)."""
    from services.tools.cli.main import main

    for name in ("NATS_URL", "POOLWISE_DATA_DIR", "POOLWISE_DEBUG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(sys, "argv", ["poolwise", *args])
    capfd.readouterr()
    code = 0
    try:
        main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    captured = capfd.readouterr()
    return Result(code, captured.out, captured.err)


def wait_for(check: Any, what: str, timeout: float = WAIT) -> Any:
    """Poll `check()` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what} after {timeout:g} s")
        time.sleep(0.1)


class Up:
    """`poolwise up --data-dir DIR [ARGS]` in a subprocess (embedded NATS). By default each service
    runs in a process of its own, a child of up; `--single-process` keeps them in up's process."""

    def __init__(self, data_dir: Path, cwd: Path, *args: str) -> None:
        self.data_dir = data_dir
        self.cwd = cwd
        self.args = args
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.seen: set[int] = set()  # every service process of ours seen so far (to clean up after)

    @property
    def stderr_path(self) -> Path:
        return self.cwd / f"up-{self.starts}.err"

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text()

    def start(self) -> Up:
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self.starts += 1
        with self.stderr_path.open("wb") as err:
            self.proc = subprocess.Popen([POOLWISE, "up", "--data-dir", str(self.data_dir), *self.args],
                                         cwd=self.cwd, env=clean_env(), stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=err)
        wait_for(self._ready, "poolwise up to be ready")
        return self

    def _ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"poolwise up exited with {self.proc.returncode}: {self.stderr}")
        return READY in self.stderr and (self.data_dir / "nats.url").exists()

    def service_pids(self) -> dict[str, int]:
        """The service processes up runs now (its children `... serve NAME ...`), by service."""
        assert self.proc is not None
        found = {name: pid for pid, name in service_processes().items() if parent_of(pid) == self.proc.pid}
        self.seen.update(found.values())
        return found

    def started_pids(self) -> dict[str, list[int]]:
        """The pids up said it started each service with (`poolwise: NAME started (pid N)`), in order."""
        started: dict[str, list[int]] = {}
        for name, pid in STARTED.findall(self.stderr):
            started.setdefault(name, []).append(int(pid))
        return started

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> int:
        """Send `sig` and wait for the process to end; its exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.service_pids()  # remembered, so that `close` can see them gone even after a SIGKILL
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(WAIT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(WAIT)
            raise AssertionError(f"poolwise up did not stop on {sig.name}") from None

    def cli(self, *args: str) -> Result:
        return run(*args, "--data-dir", str(self.data_dir), cwd=self.cwd)

    def pool_config(self, path: str) -> dict[str, object]:
        """The explicit config of a pool, as `poolwise pool get` shows it."""
        result = self.cli("pool", "get", path)
        assert result.code == 0, result
        config: dict[str, object] = result.json()["config"]
        return config

    def close(self) -> None:
        """Whatever happened: no poolwise up, no service process and no nats-server of ours left running."""
        if self.proc is not None and self.proc.poll() is None:
            self.service_pids()
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(WAIT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(WAIT)
        stop_service_processes(self.seen)
        stop_orphan_server(self.data_dir / "nats")

    def __enter__(self) -> Up:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def alive(pid: int) -> bool:
    """Whether process `pid` runs (an exited one that nobody reaped yet does not)."""
    try:
        return _stat(pid)[0] != "Z"
    except (OSError, IndexError):
        return False


def parent_of(pid: int) -> int | None:
    try:
        return int(_stat(pid)[1])
    except (OSError, IndexError, ValueError):
        return None


def _stat(pid: int) -> list[str]:
    """The fields of /proc/PID/stat after the command name: state, ppid, ..."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()


def service_processes() -> dict[int, str]:
    """Every live `python -m services.tools.cli.main serve NAME` on this machine (pid: NAME) (Linux /proc)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            args = (entry / "cmdline").read_bytes().split(b"\0")
            if b"services.tools.cli.main" in args and b"serve" in args:
                index = args.index(b"serve") + 1
                if index < len(args) and alive(int(entry.name)):
                    found[int(entry.name)] = os.fsdecode(args[index])
    return found


def stop_service_processes(pids: set[int]) -> None:
    """Wait for the service processes `pids` to end (they go with their `poolwise up`); kill any
    that is still there after a while (pids checked to still be service processes)."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline and set(service_processes()) & pids:
        time.sleep(0.1)
    for pid in set(service_processes()) & pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def nats_server_pid(data_dir: Path) -> int | None:
    """The pid of the nats-server running on the data dir's store, if one runs."""
    try:
        pid = int((data_dir / "nats" / "nats.pid").read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if serves_store(pid, data_dir / "nats") else None


def no_traceback(result: Result) -> None:
    assert "Traceback" not in result.err and "Traceback" not in result.out, result.err


def one_error_line(result: Result, code: int = 2) -> str:
    """The result is a refusal: exit `code`, exactly one line on stderr, no traceback; that line."""
    no_traceback(result)
    assert result.code == code, (result.code, result.err)
    assert len(result.err_lines) == 1, result.err
    line = result.err_lines[0]
    assert line.startswith("error: "), line
    return line


def last_seq(up: Up) -> int:
    """The last position of the stream of `up`'s server."""
    import anyio

    from services.common.jetstream import JetStreamLog

    url = (up.data_dir / "nats.url").read_text().strip()

    async def read() -> int:
        log = await JetStreamLog.connect(url)
        try:
            return await log.last_seq()
        finally:
            await log.close()

    return anyio.run(read)


def quiet_seq(up: Up, quiet: float = 1.5) -> int:
    """The stream's last sequence once nothing was appended for `quiet` seconds (a config change
    is followed by admission's tick and cycle)."""
    last, since = last_seq(up), time.monotonic()
    deadline = since + 30
    while time.monotonic() - since < quiet:
        assert time.monotonic() < deadline, "the stream never went quiet"
        time.sleep(0.25)
        now = last_seq(up)
        if now != last:
            last, since = now, time.monotonic()
    return last
