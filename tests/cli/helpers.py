"""Running the real `poolwise` CLI: in this process (fast) or as a subprocess, and `poolwise up` as a
subprocess that is always stopped, with any nats-server it left behind."""

from __future__ import annotations

import json
import os
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
    from services.cli.main import main

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
    """`poolwise up --data-dir DIR` in a subprocess (embedded NATS)."""

    def __init__(self, data_dir: Path, cwd: Path) -> None:
        self.data_dir = data_dir
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def stderr_path(self) -> Path:
        return self.cwd / f"up-{self.starts}.err"

    def start(self) -> Up:
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self.starts += 1
        with self.stderr_path.open("wb") as err:
            self.proc = subprocess.Popen([POOLWISE, "up", "--data-dir", str(self.data_dir)], cwd=self.cwd,
                                         env=clean_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=err)
        wait_for(self._ready, "poolwise up to be ready")
        return self

    def _ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"poolwise up exited with {self.proc.returncode}: {self.stderr_path.read_text()}")
        return "ready on" in self.stderr_path.read_text() and (self.data_dir / "nats.url").exists()

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> int:
        """Send `sig` and wait for the process to end; its exit code."""
        assert self.proc is not None
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(WAIT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(WAIT)
            raise AssertionError(f"poolwise up did not stop on {sig.name}") from None

    def cli(self, *args: str) -> Result:
        return run(*args, "--data-dir", str(self.data_dir), cwd=self.cwd)

    def close(self) -> None:
        """Whatever happened: no poolwise up, no nats-server of ours left running."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(WAIT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(WAIT)
        stop_orphan_server(self.data_dir / "nats")

    def __enter__(self) -> Up:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


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
