"""A burst on the real services, on JetStream, while admission's connection is cut again and again
(through a proxy that drops what is in flight and closes both sides): admission reconnects, its
consumer resumes where it was, its decisions land whole and in order, and in the end the log
replays clean and the tree's `gangs` and `tasks` tables hold what a fresh fold of admission holds.

Before appends were atomic, a cut in the middle of a cycle's decisions let the ones published
during the reconnect land before the lost ones, sent again: the `gangs` read model could then
stay wrong for good (its documented limit)."""

from __future__ import annotations

import random
from pathlib import Path

import anyio
import pytest

from bench.workload import Workload, config_events, envelope, gang_event
from events import CycleCompleted, Envelope, GangCancelled, TreeOptions, decode_all
from services.common.jetstream import JetStreamLog
from services.launcher import start_services
from services.tools.replay import verify
from tests.cutting_proxy import CuttingProxy
from tests.service.test_cycles_in_a_burst import T0, WAIT, projected_as_admission_folds, quiet_log

pytestmark = pytest.mark.anyio


async def test_a_burst_with_admission_cut_off_again_and_again_projects_as_admission_folds(
        fresh_stream: str, tmp_path: Path) -> None:
    url = fresh_stream
    log = await JetStreamLog.connect(url)
    proxy = CuttingProxy(int(url.rsplit(":", 1)[1]))
    await proxy.start()
    admission_log = await JetStreamLog.connect(f"nats://127.0.0.1:{proxy.port}", timeout=3.0)
    cycle_gangs = TreeOptions().cycle_gangs
    w = Workload(gangs=3 * cycle_gangs, leaves=16, hosts=4, fill=0.6)
    try:
        await log.append([envelope(e, f"setup-{i}", T0, source="tree") for i, e in enumerate(config_events(w))])
        async with anyio.create_task_group() as tg:
            await start_services(tg, log, ["tree", "preemption"], tmp_path, leadership=False)
            await start_services(tg, admission_log, ["admission"], tmp_path, leadership=False)
            rng = random.Random(7)

            async def cutting() -> None:  # admission's connection cut while it reads and publishes
                for done in range(4):
                    proxy.cut(rng.randrange(20_000, 600_000), upstream=rng.random() < 0.7)
                    with anyio.move_on_after(3.0):  # (no traffic left: no more cuts)
                        while proxy.cuts == done:
                            await anyio.sleep(0.01)

            tg.start_soon(cutting)
            for part in range(3):
                first = part * cycle_gangs
                await log.append([envelope(gang_event(w, i, "b"), f"b{i}", T0 + 1 + part)
                                  for i in range(first, first + cycle_gangs)])
                await log.append([envelope(GangCancelled(tree=w.tree, gang=f"b{i}"), f"cancel-{i}", T0 + 1 + part)
                                  for i in range(first, first + cycle_gangs, 101)])
                await anyio.sleep(0.3)
            # quiet, and every decision admission owes in the log (after a cut it may sit out a
            # reconnect before it publishes again)
            with anyio.fail_after(WAIT):
                while not verify(messages := await quiet_log(log)).ok:
                    await anyio.sleep(0.5)
            tg.cancel_scope.cancel()
    finally:
        await admission_log.close()
        await log.close()
        proxy.close()
    assert proxy.cuts >= 3
    envelopes: list[Envelope] = [e for s in messages for e in decode_all(s.data)]
    assert any(isinstance(e.event, CycleCompleted) and e.event.service == "admission" for e in envelopes)

    gangs = projected_as_admission_folds(messages, w.tree, tmp_path)
    assert len(gangs) == w.gangs
    assert {"admitted", "pending", "cancelled"} <= set(gangs.values())
