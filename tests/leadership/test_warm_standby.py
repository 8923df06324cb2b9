"""A warm standby: while another instance leads, a standby admission keeps folding the log as it
arrives (from the newest snapshot, then the tail, then what comes), deciding nothing and
publishing nothing; when the leader dies, it takes over with its fold caught up already, so it
decides at once, whatever the history, and decides nothing twice."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import anyio
import pytest
from anyio.abc import TaskStatus

from events import GangAdmitted
from services.admission.queries import ExplainingFolder
from services.admission.service import serve_admission
from services.common.folding import Warm
from services.common.jetstream import JetStreamLog
from services.common.leadership import StandingBy, run_as_leader
from services.common.lease_bucket import lease_key
from services.launcher import STANDBYS
from services.tools.replay import verify
from tests.admission.builders import host, pool, tree
from tests.leadership.helpers import WAIT, lease_bucket, now_envelopes, until
from tests.leadership.test_standby import NO_TIMEOUTS, Instance, RecordingLog, all_admitted, contents, enqueue

pytestmark = pytest.mark.anyio


class Capturing:
    """The admission standby of the launcher, keeping each fold it makes (for the test to look at)."""

    def __init__(self) -> None:
        self.inner = STANDBYS["admission"]
        self.made: list[Warm] = []

    def new(self) -> Any:
        self.made.append(self.inner.new())
        return self.made[-1]

    async def follow(self, warm: Any, log: Any) -> None:
        await self.inner.follow(warm, log)


class WarmInstance(Instance):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.standby = Capturing()
        self.took_over_at: int | None = None  # how far its fold had come when its term began

    async def run(self, *, task_status: TaskStatus[Any]) -> None:
        self.log = await JetStreamLog.connect(self.url, stream=self.stream)
        try:
            kv = await lease_bucket(self.log.nc)
            with self.scope:
                try:
                    await run_as_leader(self.key, self.serve, log=self.log, kv=kv, connect=self.connect,
                                        holder_id=self.label, ready_on_standby=True, on_change=self.changed,
                                        standby=self.standby, task_status=task_status)
                except Exception as exc:
                    self.error = exc
        finally:
            with anyio.CancelScope(shield=True):
                await self.log.close()

    async def serve(self, log: Any, *, task_status: TaskStatus[Any], warm: Warm | None = None) -> None:
        self.terms += 1
        self.serving = True
        if warm is not None:
            self.took_over_at = warm.folded
        try:
            await self.service(RecordingLog(log, self.appended), None, task_status=task_status, warm=warm)
        finally:
            self.serving = False


def admitted_in(warm: Warm) -> set[str]:
    state = warm.folder.state if not isinstance(warm.folder, ExplainingFolder) else warm.folder.inner.state
    return {g.id for rt in state.trees.values() for g in rt.gangs.values() if g.state == "admitted"}


async def test_a_warm_standby_folds_while_it_waits_and_decides_at_once_when_the_leader_dies(
        jetstream_log: JetStreamLog, nats_url: str) -> None:
    log = jetstream_log
    key = lease_key(log.stream, "admission")
    a, b = (WarmInstance(label, nats_url, log.stream, key, serve_admission) for label in "AB")
    history = [f"h-{i}" for i in range(300)]
    after = [f"after-{i}" for i in range(5)]
    with anyio.fail_after(4 * WAIT):
        async with anyio.create_task_group() as tg:
            assert await tg.start(a.run) == "admission"
            assert await tg.start(b.run) == StandingBy(key, "A")
            await log.append(now_envelopes(tree(gang_timeout=NO_TIMEOUTS), host(cpu=10_000), pool("/a")))
            for start in range(0, len(history), 100):
                await enqueue(log, history[start:start + 100])
            await all_admitted(log, history, "A to admit the history")
            # B folds what A decides, as it lands, without deciding or publishing anything
            end = await log.last_seq()
            await until(lambda: bool(b.standby.made) and b.standby.made[-1].folded >= end, "B's fold to catch up")
            assert admitted_in(b.standby.made[-1]) == set(history)
            assert (b.terms, b.appended) == (0, set())

            await a.crash()  # no release: the lease expires (the test bucket's TTL)
            crashed = time.monotonic()
            await until(lambda: b.roles[-1] == "leading", "B to take over")
            await enqueue(log, after)
            await all_admitted(log, after, "B to admit the gangs enqueued after A died")
            print(f"warm failover: {time.monotonic() - crashed:.2f} s from the crash to new gangs admitted")
            assert b.terms == 1 and b.took_over_at is not None and b.took_over_at >= end  # it did not start over
            tg.cancel_scope.cancel()

    stored = await contents(log)
    assert [i for i, n in Counter(e.id for _, e in stored).items() if n > 1] == []
    admissions = Counter((e.event.gang, e.event.attempt) for _, e in stored if isinstance(e.event, GangAdmitted))
    assert [k for k, n in admissions.items() if n > 1] == []
    assert {g for g, _ in admissions} == set(history + after)
    report = verify(await log.read(1))  # (admission's decisions: no preemption service here)
    assert [f.line() for f in report.findings if f.source == "admission"] == []


async def test_an_instance_that_leads_at_once_starts_from_its_snapshot(
        jetstream_log: JetStreamLog, nats_url: str, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The first instance wins the lease at once, which cancels the standby fold it had begun:
    its term must still start from the snapshot, not from position 1 (it once did: the fold
    counted itself restored before the snapshot had loaded)."""
    import logging

    monkeypatch.setenv("POOLWISE_SNAPSHOT_EVERY", "100000")
    log = jetstream_log
    key = lease_key(log.stream, "admission")
    names = [f"g-{i}" for i in range(20)]
    await log.append(now_envelopes(tree(gang_timeout=NO_TIMEOUTS), host(cpu=10_000), pool("/a")))
    await enqueue(log, names)
    caplog.set_level(logging.INFO, logger="services.common.folding")
    for label in ("first", "second"):
        instance = WarmInstance(label, nats_url, log.stream, key, serve_admission)
        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                assert await tg.start(instance.run) == "admission"
                await all_admitted(log, names, "the gangs admitted")
                await anyio.sleep(0.3)
                instance.stop()  # a clean stop: a snapshot where it stopped
    assert "admission: started from its snapshot at" in caplog.text, caplog.text
