"""The embedded nats-server dies with the process that started it (Linux: PR_SET_PDEATHSIG)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from services.common.natsserver import EmbeddedNats, death_signal
from services.launcher import serves_store

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the death signal is Linux's")

STARTER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from services.common.natsserver import EmbeddedNats
    server = EmbeddedNats(Path(sys.argv[1]), die_with_parent=sys.argv[2] == "1").start()
    print(server.pid, flush=True)
    time.sleep(600)
""")


def _server_of_killed_starter(store: Path, die_with_parent: bool) -> int:
    """Start a server from a child Python process, SIGKILL that process; the server's pid."""
    starter = subprocess.Popen([sys.executable, "-c", STARTER, str(store), "1" if die_with_parent else "0"],
                               stdout=subprocess.PIPE, cwd=Path(__file__).resolve().parents[2])
    try:
        assert starter.stdout is not None
        pid = int(starter.stdout.readline())
        assert serves_store(pid, store / "nats")
    finally:
        starter.kill()
        starter.wait()
    return pid


def _gone_within(pid: int, store: Path, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not serves_store(pid, store / "nats"):
            return True
        time.sleep(0.05)
    return False


def test_a_server_dies_with_the_process_that_started_it(tmp_path: Path) -> None:
    pid = _server_of_killed_starter(tmp_path, die_with_parent=True)
    try:
        assert _gone_within(pid, tmp_path, 15), "the nats-server outlived the process that started it"
    finally:
        if serves_store(pid, tmp_path / "nats"):  # (a failure leaves no server behind)
            os.kill(pid, signal.SIGKILL)


def test_a_server_asked_not_to_die_with_its_parent_outlives_it(tmp_path: Path) -> None:
    pid = _server_of_killed_starter(tmp_path, die_with_parent=False)
    try:
        assert not _gone_within(pid, tmp_path, 1.0)  # an orphan: what `up` stops on its next start
    finally:
        os.kill(pid, signal.SIGKILL)


def test_only_the_main_thread_asks_for_the_death_signal() -> None:
    # the kernel sends it when the forking *thread* ends: a worker thread's would stop the server early
    assert death_signal() is not None
    found: list[object] = []
    worker = threading.Thread(target=lambda: found.append(death_signal()))
    worker.start()
    worker.join()
    assert found == [None]


def test_a_server_started_from_a_worker_thread_keeps_running_after_it_ends(tmp_path: Path) -> None:
    server = EmbeddedNats(tmp_path)
    worker = threading.Thread(target=server.start)
    worker.start()
    worker.join()
    try:
        assert server.running and server.pid is not None
        assert not _gone_within(server.pid, tmp_path, 0.5)
    finally:
        server.stop()
    assert not server.running
