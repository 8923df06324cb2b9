"""Trees spread over instances (`--trees per-tree`), on real processes: `poolwise up --trees per-tree`
(its admission and preemption decide per tree) and a second `poolwise serve admission --trees
per-tree` (and `serve preemption --trees per-tree`) against its server, four trees. Each admission
and preemption instance holds two trees' leases and decides them (up's give two back when the
others come); killed with SIGKILL, the other ones' trees move to up's within a few seconds (the
lease's TTL, 2 s, and a look), which then decide all four, the burst enqueued just before the kill
too (`replay --verify` finds every preemption pass too). A third instance then gets two
trees, and stopped cleanly hands them back at once; the consumers of the instances gone are
deleted. Every gang is admitted
exactly once, and `poolwise replay --verify` re-derives every decision, whoever made it. Each
admission instance decides only the cycles of its trees (what up's says on stderr: between giving
two trees away and taking them back it decided none of theirs and read them from the log), and a
query for a tree the other instance holds is answered, naming its holder."""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from events.commands import HostAdd, PoolUpsert, TreeConfigure
from events.config import GangTimeoutOptions, TreeOptions
from services.admission.commands import ExplainQuery
from services.common.jetstream import JetStreamLog
from services.sdk import Submitter
from services.tools.cli.client import request
from tests.cli.helpers import Up, clean_env
from tests.leadership.helpers import eventually, until
from tests.leadership.test_cli_standby import Serve, admissions

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]

TREES = ("t1", "t2", "t3", "t4")


def tag_of(stderr: str) -> str:
    """The tag of an instance's holder id (`host:pid:tag`), which names its consumer."""
    found = re.search(r"deciding per tree \(as [^)]*:([0-9a-f]{8})\)", stderr)
    assert found, stderr
    return found.group(1)


async def consumer_names(url: str) -> list[str]:
    log = await JetStreamLog.connect(url)
    try:
        return [info.name for info in await log.jsm.consumers_info(log.stream)]
    finally:
        await log.close()


def held(stderr: str, service: str = "admission") -> set[str]:
    """The trees an instance of `service` said last that it holds."""
    lines = re.findall(rf"poolwise: {service} deciding per tree \(as [^)]*\): (.*)", stderr)
    if not lines or not lines[-1].startswith("trees "):
        return set()
    return set(lines[-1][len("trees "):].split(", "))


Counts = dict[str, int]


def work(stderr: str) -> list[tuple[Counts, Counts]]:
    """The cycles an admission instance said it had decided and read from the log, per tree, at
    each change of its trees (`services.admission.service.work_line`), in order."""
    def counts(text: str) -> Counts:
        return {} if text == "none" else {tree: int(n) for tree, n in (item.split(" ") for item in text.split(", "))}

    return [(counts(decided), counts(read)) for decided, read in
            re.findall(r"poolwise: admission cycles decided here: (.*); read from the log: (.*)", stderr)]


async def enqueue(submitter: Submitter, phase: str, per_tree: int = 3) -> set[str]:
    names = {f"{phase}-{tree}-{i}" for tree in TREES for i in range(per_tree)}
    await submitter.enqueue_many([{"gang": name, "tree": name.split("-")[1], "pool": "/a", "count": 1,
                                   "resources": {"cpu": 1}} for name in sorted(names)])
    return names


async def admitted(url: str, names: set[str], phase: str) -> None:
    async def all_in() -> bool:
        return names <= {gang for gang, _ in await admissions(url)}

    await eventually(all_in, f"the {phase} gangs to be admitted in every tree", timeout=30)


async def submit(submitter: Submitter, url: str, phase: str) -> set[str]:
    names = await enqueue(submitter, phase)
    await admitted(url, names, phase)
    return names


async def test_two_admission_instances_share_the_trees_and_take_over(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with Up(data, tmp_path, "--trees", "per-tree") as up, contextlib.ExitStack() as stack:
        await anyio.to_thread.run_sync(up.start)
        url = (data / "nats.url").read_text().strip()
        assert (await anyio.to_thread.run_sync(up.cli, "gangs")).code == 0  # no tree yet: every instance answers
        await request(url, "tree", HostAdd(host="h1", resources={"cpu": 1000}))
        for tree in TREES:
            await request(url, "tree", TreeConfigure(tree=tree, options=TreeOptions(
                gang_timeout=GangTimeoutOptions(default=1000, limit=1000, jitter=0))))
            await request(url, "tree", PoolUpsert(tree=tree, path="/a"))
        other = Serve("b", url, tmp_path, "--trees", "per-tree")
        stack.callback(other.close)
        passes = Serve("p", url, tmp_path, "--trees", "per-tree", service="preemption")  # preemption too
        stack.callback(passes.close)

        def split() -> bool:
            for service, theirs in (("admission", held(other.err)), ("preemption", held(passes.err, "preemption"))):
                ours = held(up.stderr, service)
                if not (len(ours) == 2 and len(theirs) == 2 and ours | theirs == set(TREES)):
                    return False
            return True

        await until(split, "each admission and preemption instance to hold two trees", timeout=30)
        shown = subprocess.run([sys.executable, "-m", "services.common.tree_leases"], capture_output=True, text=True,
                               env=clean_env(NATS_URL=url), timeout=30, check=True).stdout
        admission = shown.split("preemption:")[0]
        assert {f"  {tree}: " in admission for tree in TREES} == {True}, shown  # who holds which tree
        assert admission.count(", holds 2, ready") == 2, shown

        ours, theirs = held(up.stderr), held(other.err)
        async with Submitter(url, source="test") as submitter:
            wanted = await submit(submitter, url, "shared")
            assert split(), (up.stderr, other.err)  # still two trees each: each decided its own
            tree = sorted(theirs)[0]  # a query for a tree the other instance holds: answered, naming it
            answer = await request(url, "admission", ExplainQuery(gang=f"shared-{tree}-0", tree=tree))
            assert answer.ok and answer.data["state"] == "admitted", answer
            assert answer.data["holders"] == {tree: re.findall(r"deciding per tree \(as ([^)]*)\)", other.err)[-1]}

            burst = await enqueue(submitter, "burst", per_tree=50)  # killed while deciding these
            before = len(work(up.stderr))
            for gone in (other, passes):
                gone.proc.send_signal(signal.SIGKILL)
            for gone in (other, passes):
                gone.proc.wait(10)
            # (how fast the trees move is measured, not asserted: tests never fail on timing;
            # `until`'s bound only ends a run that hangs)
            await until(lambda: held(up.stderr) == held(up.stderr, "preemption") == set(TREES),
                        "up's admission and preemption to take the killed ones' trees", timeout=15)
            await until(lambda: len(work(up.stderr)) > before, "up's admission to say what it decided", timeout=15)
            # Between giving the other instance its two trees and taking them back, up's admission
            # decided no cycle of theirs (it read them from the log) and decided its own.
            (gave, read_then), (took_back, read_now) = work(up.stderr)[before - 1:before + 1]
            assert {t: took_back.get(t, 0) for t in theirs} == {t: gave.get(t, 0) for t in theirs}, up.stderr
            assert all(read_now.get(t, 0) > read_then.get(t, 0) for t in theirs), up.stderr
            assert all(took_back.get(t, 0) > gave.get(t, 0) for t in ours), up.stderr
            assert {t: read_now.get(t, 0) for t in ours} == {t: read_then.get(t, 0) for t in ours}, up.stderr
            await admitted(url, burst, "burst")
            wanted |= burst | await submit(submitter, url, "after")

            third = Serve("c", url, tmp_path, "--trees", "per-tree")  # a newcomer gets its share
            stack.callback(third.close)
            await until(lambda: len(held(up.stderr)) == 2 and len(held(third.err)) == 2,
                        "the third instance to take two trees over", timeout=30)
            wanted |= await submit(submitter, url, "third")
            assert third.stop() == 0  # a clean stop hands its trees back at once
            await until(lambda: held(up.stderr) == set(TREES), "up's admission to take the trees back", timeout=15)
            answer = await anyio.to_thread.run_sync(up.cli, "explain", "burst-t4-0")  # its holder answers
            assert answer.code == 0 and "admitted" in answer.out, answer.out + answer.err
            wanted |= await submit(submitter, url, "last")

        async def consumers_gone() -> bool:  # the killed one's (deleted by up's), the stopped one's
            names = await consumer_names(url)
            return not any(name.endswith((tag_of(other.err), tag_of(third.err))) for name in names)

        await eventually(consumers_gone, "the consumers of the instances gone to be deleted", timeout=15)

        found = await admissions(url)
        assert [k for k, n in found.items() if n > 1] == []  # no gang admitted twice
        assert {gang for gang, _ in found} == wanted
        report = await anyio.to_thread.run_sync(lambda: up.cli("replay", "--verify", "--json"))
        assert report.code == 0 and report.json()["ok"], report.out + report.err
        for text in (other.err, passes.err, up.stderr):
            assert "Traceback" not in text, text
        assert up.stop() == 0
