"""Real processes: `poolwise up` (every service in a process of its own, embedded NATS) and two
`poolwise serve admission` against its server. Up's admission leads and the two stand by; when up
and its service processes are paused (SIGSTOP: their leases run out, as for a hung or partitioned
machine) one of them takes over; stopped (SIGTERM), it hands over to the other; when up resumes,
its admission finds its lease taken and stands by, while its tree and preemption, whose records
expired with nobody to take them, go on without a stop. Every gang is admitted exactly once
throughout, and `poolwise replay --verify` re-derives every decision, whoever made it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections import Counter
from pathlib import Path

import anyio
import pytest

from events import GangAdmitted, decode_all
from events.commands import HostAdd, PoolUpsert, TreeConfigure, TreeList
from events.config import GangTimeoutOptions, TreeOptions
from services.common.jetstream import JetStreamLog
from services.sdk import Submitter
from services.tools.cli.args import InputError
from services.tools.cli.client import request
from tests.cli.helpers import POOLWISE, WAIT, Up, clean_env
from tests.leadership.helpers import eventually, until

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]


class Serve:
    """`poolwise serve admission` (or `service`) in a subprocess, with a data dir of its own."""

    def __init__(self, label: str, url: str, cwd: Path, *args: str, service: str = "admission") -> None:
        self.label = label
        self.err_path = cwd / f"serve-{label}.err"
        with self.err_path.open("wb") as err:
            self.proc = subprocess.Popen(
                [POOLWISE, "serve", service, "--data-dir", str(cwd / f"data-{label}"), "--nats-url", url, *args],
                cwd=cwd, env=clean_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)

    @property
    def err(self) -> str:
        return self.err_path.read_text()

    def says(self, text: str) -> bool:
        if self.proc.poll() is not None and text not in self.err:
            raise AssertionError(f"serve {self.label} exited with {self.proc.returncode}: {self.err}")
        return text in self.err

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(WAIT)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(WAIT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(WAIT)


async def admissions(url: str) -> Counter[tuple[str, int]]:
    log = await JetStreamLog.connect(url)
    try:
        found: Counter[tuple[str, int]] = Counter()
        for stored in await log.read():
            if b'"GangAdmitted"' in stored.data:
                for envelope in decode_all(stored.data):  # one event, or a pack of decisions
                    event = envelope.event
                    if isinstance(event, GangAdmitted):
                        found[(event.gang, event.attempt)] += 1
        return found
    finally:
        await log.close()


async def submit_and_wait(submitter: Submitter, url: str, phase: str, what: str) -> None:
    names = [f"{phase}-{i}" for i in range(5)]
    await submitter.enqueue_many([{"gang": name, "pool": "/a", "count": 1, "resources": {"cpu": 1}}
                                  for name in names])

    async def admitted() -> bool:
        return set(names) <= {gang for gang, _ in await admissions(url)}

    await eventually(admitted, what, timeout=WAIT)


async def tree_answers(url: str) -> bool:
    try:
        await request(url, "tree", TreeList(), timeout=2.0)
    except InputError:
        return False
    return True


async def test_serve_admission_processes_stand_by_and_take_over(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with Up(data, tmp_path) as up, contextlib.ExitStack() as stack:
        await anyio.to_thread.run_sync(up.start)
        assert up.proc is not None
        url = (data / "nats.url").read_text().strip()
        await request(url, "tree", TreeConfigure(options=TreeOptions(
            gang_timeout=GangTimeoutOptions(default=1000, limit=1000, jitter=0))))
        await request(url, "tree", HostAdd(host="h1", resources={"cpu": 1000}))
        await request(url, "tree", PoolUpsert(path="/a"))
        a, b = Serve("a", url, tmp_path), Serve("b", url, tmp_path)
        stack.callback(a.close)
        stack.callback(b.close)
        await until(lambda: a.says("admission standing by") and b.says("admission standing by"),
                    "both serve processes to stand by")

        async with Submitter(url, source="test") as submitter:
            await submit_and_wait(submitter, url, "up", "up's admission to admit")
            assert not a.says("admission leading") and not b.says("admission leading")

            paused = [up.proc.pid, *up.service_pids().values()]
            assert len(paused) == 4, paused  # up and its three service processes
            for pid in paused:
                os.kill(pid, signal.SIGSTOP)  # up hangs, its services with it: their leases run out
            try:
                await until(lambda: a.says("admission leading") or b.says("admission leading"),
                            "a serve process to take over from the hung up")
                leader, other = (a, b) if a.says("admission leading") else (b, a)
                await submit_and_wait(submitter, url, "hung", "the new leader to admit")
                assert leader.stop() == 0  # a clean stop hands over at once
                await until(lambda: other.says("admission leading"), "the other serve process to take over")
                await submit_and_wait(submitter, url, "handed", "the last serve process to admit")
            finally:
                for pid in paused:
                    os.kill(pid, signal.SIGCONT)
            await until(lambda: "admission standing by" in up.stderr_path.read_text(),
                        "up's admission to notice it lost its lease, and stand by")
            await submit_and_wait(submitter, url, "resumed", "the serve process, still leading, to admit")
            assert await tree_answers(url)
            roles = up.stderr_path.read_text()
            assert "admission lost its lease" in roles
            assert "tree lost" not in roles and "preemption lost" not in roles, roles

        found = await admissions(url)
        assert [k for k, n in found.items() if n > 1] == []  # no gang admitted twice for one attempt
        assert {gang for gang, _ in found} == {f"{phase}-{i}" for phase in ("up", "hung", "handed", "resumed")
                                               for i in range(5)}
        other.close()
        report = await anyio.to_thread.run_sync(lambda: up.cli("replay", "--verify", "--json"))
        assert report.code == 0 and report.json()["ok"], report.out + report.err
        for text in (a.err, b.err, up.stderr_path.read_text()):
            assert "Traceback" not in text, text
        assert up.stop() == 0
