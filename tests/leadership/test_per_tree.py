"""Trees spread over instances (`--trees per-tree`), on real processes: `poolwise up --trees per-tree`
(its admission and preemption decide per tree) and a second `poolwise serve admission --trees
per-tree` against its server, four trees. Each admission instance holds two trees' leases and
decides them (up's gives two back when the second comes); killed with SIGKILL, the second one's
trees move to up's admission within a few seconds (the lease's TTL, 2 s, and a look), which then
decides all four. Every gang is admitted
exactly once, and `poolwise replay --verify` re-derives every decision, whoever made it."""

from __future__ import annotations

import contextlib
import re
import signal
import time
from pathlib import Path

import anyio
import pytest

from events.commands import HostAdd, PoolUpsert, TreeConfigure
from events.config import GangTimeoutOptions, TreeOptions
from services.cli.client import request
from services.submitter import Submitter
from tests.cli.helpers import Up
from tests.leadership.helpers import eventually, until
from tests.leadership.test_cli_standby import Serve, admissions

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]

TREES = ("t1", "t2", "t3", "t4")
HOLDS = re.compile(r"poolwise: admission deciding per tree \(as [^)]*\): (.*)")


def held(stderr: str) -> set[str]:
    """The trees an admission instance said last that it holds."""
    lines = HOLDS.findall(stderr)
    if not lines or not lines[-1].startswith("trees "):
        return set()
    return set(lines[-1][len("trees "):].split(", "))


async def submit(submitter: Submitter, url: str, phase: str) -> set[str]:
    names = {f"{phase}-{tree}-{i}" for tree in TREES for i in range(3)}
    await submitter.enqueue_many([{"gang": name, "tree": name.split("-")[1], "pool": "/a", "count": 1,
                                   "resources": {"cpu": 1}} for name in sorted(names)])

    async def admitted() -> bool:
        return names <= {gang for gang, _ in await admissions(url)}

    await eventually(admitted, f"the {phase} gangs to be admitted in every tree", timeout=30)
    return names


async def test_two_admission_instances_share_the_trees_and_take_over(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with Up(data, tmp_path, "--trees", "per-tree") as up, contextlib.ExitStack() as stack:
        await anyio.to_thread.run_sync(up.start)
        url = (data / "nats.url").read_text().strip()
        await request(url, "tree", HostAdd(host="h1", resources={"cpu": 1000}))
        for tree in TREES:
            await request(url, "tree", TreeConfigure(tree=tree, options=TreeOptions(
                gang_timeout=GangTimeoutOptions(default=1000, limit=1000, jitter=0))))
            await request(url, "tree", PoolUpsert(tree=tree, path="/a"))
        other = Serve("b", url, tmp_path, "--trees", "per-tree")
        stack.callback(other.close)

        def split() -> bool:
            ours, theirs = held(up.stderr), held(other.err)
            return len(ours) == 2 and len(theirs) == 2 and ours | theirs == set(TREES)

        await until(split, "each admission instance to hold two trees", timeout=30)

        async with Submitter(url, source="test") as submitter:
            wanted = await submit(submitter, url, "shared")
            assert split(), (up.stderr, other.err)  # still two trees each: each decided its own

            other.proc.send_signal(signal.SIGKILL)
            other.proc.wait(10)
            killed = time.monotonic()
            await until(lambda: held(up.stderr) == set(TREES), "up's admission to take the killed one's trees",
                        timeout=15)
            took = time.monotonic() - killed
            assert took < 6.0, f"the trees moved after {took:.1f} s"
            wanted |= await submit(submitter, url, "after")

        found = await admissions(url)
        assert [k for k, n in found.items() if n > 1] == []  # no gang admitted twice
        assert {gang for gang, _ in found} == wanted
        report = await anyio.to_thread.run_sync(lambda: up.cli("replay", "--verify", "--json"))
        assert report.code == 0 and report.json()["ok"], report.out + report.err
        for text in (other.err, up.stderr):
            assert "Traceback" not in text, text
        assert up.stop() == 0
