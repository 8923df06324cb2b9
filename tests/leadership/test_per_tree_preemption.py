"""Preemption per tree (`--trees per-tree`), on real processes: `poolwise up --trees per-tree` and
a second `poolwise serve preemption --trees per-tree`, four trees whose pool /a holds the whole
cluster when pool /b's gangs come (grace 0: /a gives four gangs back in every tree).

- Each preemption instance holds two trees and decides only their passes (what each says on
  stderr: the passes decided here are of its trees; the others' were read from the log).
- Killed with SIGKILL just after a second wave of /b's gangs, its trees move to up's, which
  decides their passes; every preemption is asked for once (four per tree and wave, no decision
  id twice in the log) and `poolwise replay --verify` re-derives every decision.
- A clean stop releases the leases: the lease bucket (read directly, a watch on each tree's key)
  has the stopped instance's key deleted by it, before anyone else holds it, rather than left
  to expire (an expired key leaves no trace: the next holder's record simply follows)."""

from __future__ import annotations

import contextlib
import re
import signal
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from nats.js.kv import KeyValue

from events import PreemptionRequested, decode_all
from events.commands import HostAdd, PoolUpsert, TreeConfigure
from events.config import GangTimeoutOptions, PreemptionOptions, TreeOptions
from services.common.jetstream import JetStreamLog
from services.common.lease_bucket import BUCKET, lease_key
from services.sdk import Submitter
from services.tools.cli.client import request
from tests.cli.helpers import Up
from tests.leadership.helpers import eventually, until
from tests.leadership.test_cli_standby import Serve, admissions
from tests.leadership.test_per_tree import held

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]

TREES = ("t1", "t2", "t3", "t4")


async def requested(url: str) -> Counter[str]:
    """Each `PreemptionRequested` of the log by id, how many times it is there."""
    log = await JetStreamLog.connect(url)
    try:
        return Counter(e.id for stored in await log.read() if b'"PreemptionRequested"' in stored.data
                       for e in decode_all(stored.data) if isinstance(e.event, PreemptionRequested))
    finally:
        await log.close()


async def per_tree(url: str) -> Counter[str]:
    log = await JetStreamLog.connect(url)
    try:
        return Counter(e.event.tree for stored in await log.read() if b'"PreemptionRequested"' in stored.data
                       for e in decode_all(stored.data) if isinstance(e.event, PreemptionRequested))
    finally:
        await log.close()


Counts = dict[str, int]


def passes(stderr: str) -> list[tuple[Counts, Counts]]:
    """The passes a preemption instance said it had decided and read from the log, per tree, at
    each change of its trees (`services.preemption.service.work_line`), in order."""
    def counts(text: str) -> Counts:
        return {} if text == "none" else {tree: int(n) for tree, n in (item.split(" ") for item in text.split(", "))}

    return [(counts(decided), counts(read)) for decided, read in
            re.findall(r"poolwise: preemption passes decided here: (.*); read from the log: (.*)", stderr)]


async def configure(url: str) -> None:
    await request(url, "tree", HostAdd(host="h1", resources={"cpu": 8}))
    for tree in TREES:
        await request(url, "tree", TreeConfigure(tree=tree, options=TreeOptions(
            preemption=PreemptionOptions(grace=0),
            gang_timeout=GangTimeoutOptions(default=1000, limit=1000, jitter=0))))
        for path in ("/a", "/b"):
            await request(url, "tree", PoolUpsert(tree=tree, path=path))


async def wave(submitter: Submitter, pool: str, phase: str, n: int) -> list[tuple[str, str]]:
    gangs = [(tree, f"{phase}-{tree}-{i}") for tree in TREES for i in range(n)]
    await submitter.enqueue_many([{"gang": gang, "tree": tree, "pool": pool, "count": 1, "resources": {"cpu": 1}}
                                  for tree, gang in gangs])
    return gangs


async def all_admitted(url: str, gangs: list[tuple[str, str]], attempt: int, what: str) -> None:
    async def check() -> bool:
        found = await admissions(url)
        return all(found[(gang, attempt)] for _, gang in gangs)

    await eventually(check, what, timeout=30)


@contextlib.asynccontextmanager
async def two_instances(tmp_path: Path, label: str) -> AsyncIterator[tuple[Up, Serve, str]]:
    """`poolwise up --trees per-tree` with the four trees, and a second preemption instance."""
    data = tmp_path / "data"
    with Up(data, tmp_path, "--trees", "per-tree") as up, contextlib.ExitStack() as stack:
        await anyio.to_thread.run_sync(up.start)
        url = (data / "nats.url").read_text().strip()
        await configure(url)
        other = Serve(label, url, tmp_path, "--trees", "per-tree", service="preemption")
        stack.callback(other.close)
        yield up, other, url


async def test_two_preemption_instances_decide_their_trees_passes_and_take_over_a_killed_ones(tmp_path: Path) -> None:
    async with two_instances(tmp_path, "p") as (up, other, url):

        def split() -> bool:
            ours, theirs = held(up.stderr, "preemption"), held(other.err, "preemption")
            return len(ours) == 2 and len(theirs) == 2 and ours | theirs == set(TREES)

        await until(split, "each preemption instance to hold two trees", timeout=30)
        ours, theirs = held(up.stderr, "preemption"), held(other.err, "preemption")
        async with Submitter(url, source="test") as submitter:
            first = await wave(submitter, "/a", "a", 8)  # /a takes the whole cluster in every tree
            await all_admitted(url, first, 1, "pool /a's gangs to be admitted")
            lenders = await wave(submitter, "/b", "b", 4)  # /b's come: /a is over by four

            async def four_each() -> bool:
                return await per_tree(url) == Counter({tree: 4 for tree in TREES})

            await eventually(four_each, "four preemptions in every tree", timeout=30)
            assert split(), (up.stderr, other.err)
            # the executor stops what was asked for; /b's gangs get the room
            log = await JetStreamLog.connect(url)
            try:
                asked = [e.event for stored in await log.read() for e in decode_all(stored.data)
                         if isinstance(e.event, PreemptionRequested)]
            finally:
                await log.close()
            for event in asked:
                for task in event.tasks:
                    await submitter.task_state(task, event.gang, "preempted", tree=event.tree, attempt=1)
            await all_admitted(url, lenders, 1, "pool /b's gangs to be admitted")
            for tree, gang in lenders:  # /b's finish: /a's requeued gangs come back
                await submitter.task_state(f"{gang}/0", gang, "succeeded", tree=tree, attempt=1)
            await all_admitted(url, [(e.tree, e.gang) for e in asked], 2, "pool /a's gangs to be admitted again")

            await wave(submitter, "/b", "c", 4)  # a second wave, and the instance killed as it comes
            before = len(passes(up.stderr))
            other.proc.send_signal(signal.SIGKILL)
            other.proc.wait(10)
            await until(lambda: held(up.stderr, "preemption") == set(TREES),
                        "up's preemption to take the killed one's trees", timeout=15)
            await until(lambda: len(passes(up.stderr)) > before, "up's preemption to say what it decided", timeout=15)

            async def eight_each() -> bool:
                return await per_tree(url) == Counter({tree: 8 for tree in TREES})

            await eventually(eight_each, "four more preemptions in every tree", timeout=30)

        # Between giving the other instance its two trees and taking them back, up's preemption
        # decided no pass of theirs (it read them from the log) and decided its own; the other
        # decided only its own.
        (gave, read_then), (took_back, read_now) = passes(up.stderr)[before - 1:before + 1]
        assert {t: took_back.get(t, 0) for t in theirs} == {t: gave.get(t, 0) for t in theirs}, up.stderr
        assert all(read_now.get(t, 0) > read_then.get(t, 0) for t in theirs), up.stderr
        assert all(took_back.get(t, 0) > gave.get(t, 0) for t in ours), up.stderr
        assert {t: read_now.get(t, 0) for t in ours} == {t: read_then.get(t, 0) for t in ours}, up.stderr
        assert all(set(decided) <= theirs for decided, _ in passes(other.err)), other.err

        found = await requested(url)
        assert [i for i, n in found.items() if n > 1] == []  # no preemption decided twice
        report = await anyio.to_thread.run_sync(lambda: up.cli("replay", "--verify", "--json"))
        assert report.code == 0 and report.json()["ok"], report.out + report.err
        for text in (other.err, up.stderr):
            assert "Traceback" not in text, text
        assert up.stop() == 0


async def test_a_clean_stop_deletes_its_tree_leases_rather_than_leaving_them_to_expire(tmp_path: Path) -> None:
    async with two_instances(tmp_path, "c") as (up, other, url):
        await until(lambda: len(held(other.err, "preemption")) == 2, "the second instance to hold two trees",
                    timeout=30)
        theirs = held(other.err, "preemption")
        holder = re.findall(r"preemption deciding per tree \(as ([^)]*)\)", other.err)[-1]
        log = await JetStreamLog.connect(url)
        try:
            kv: KeyValue = await log.nc.jetstream().key_value(BUCKET)
            seen: dict[str, list[tuple[str | None, str]]] = {tree: [] for tree in theirs}  # (operation, holder)

            async def watch(tree: str) -> None:
                watcher = await kv.watch(lease_key(log.stream, "preemption", tree))
                async for entry in watcher:
                    if entry is None:
                        continue
                    value = (entry.value or b"").decode()
                    seen[tree].append((entry.operation, holder if holder in value else value[:80]))

            async with anyio.create_task_group() as tg:
                for tree in theirs:
                    tg.start_soon(watch, tree)
                await until(lambda: all(seen[tree] for tree in theirs), "a look at each key", timeout=10)
                assert await anyio.to_thread.run_sync(other.stop) == 0
                await until(lambda: held(up.stderr, "preemption") == set(TREES), "up's to take the trees", timeout=15)
                await until(lambda: all(len(seen[tree]) > 1 and seen[tree][-1][1] != holder for tree in theirs),
                            "each key to change hands", timeout=15)
                tg.cancel_scope.cancel()
        finally:
            await log.close()
        for tree in theirs:
            records = [i for i, (operation, who) in enumerate(seen[tree])
                       if who == holder and operation in (None, "PUT")]
            after = seen[tree][records[-1] + 1]  # what followed the stopped instance's last record
            assert after[0] in ("DEL", "PURGE"), (tree, seen[tree])  # released; an expiry shows no marker
        assert up.stop() == 0
