"""`apply --dry-run`'s fold of the live log (`services.cli.dry_run.live_state`) starts from
admission's own snapshot, the one the service leaves (its state with explain's notes), and holds
what the service held; on it, the what-if plans and computes. In one process, on the test
nats-server: snapshots are made and read by the same code (their fingerprint)."""

from __future__ import annotations

import contextlib
import logging

import anyio
import pytest

from events import PoolConfig
from events.subjects import STREAM
from services.admission.domain.explain import gang_rows
from services.admission.folder import SUBJECTS, AdmissionFolder
from services.admission.queries import ExplainingFolder
from services.cli.dry_run import live_state, what_if
from services.common.folding import SnapshotPolicy, run_folder
from services.common.jetstream import JetStreamLog
from services.common.snapshots import ObjectStoreSnapshots
from services.tree.domain.cluster import ClusterConfig
from tests.conftest import reset_stream
from tests.snapshots.test_service_snapshots import inputs

pytestmark = pytest.mark.anyio


async def _admission_until_caught_up(log: JetStreamLog, folder: ExplainingFolder) -> None:
    """Admission as the service folds (explain's notes kept), stopped cleanly once the log is
    quiet: the stop leaves its snapshot."""
    from nats.js import JetStreamContext

    policy = SnapshotPolicy(ObjectStoreSnapshots(JetStreamContext(log.nc), log.stream), every=10, least=1)
    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            await tg.start(lambda task_status: run_folder(log, folder, SUBJECTS, durable="admission",
                                                          snapshots=policy, task_status=task_status))
            end, quiet = -1, 0
            while quiet < 6:
                now = await log.last_seq()
                quiet = quiet + 1 if now == end else 0
                end = now
                await anyio.sleep(0.05)
            tg.cancel_scope.cancel()


async def test_the_dry_runs_fold_starts_from_admissions_snapshot(nats_url: str,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    log = await JetStreamLog.connect(nats_url, stream=STREAM)
    try:
        await reset_stream(log)
        from nats.js import JetStreamContext

        with contextlib.suppress(Exception):  # (none yet)
            await JetStreamContext(log.nc).delete_object_store("poolwise_snapshots")
        await log.append(inputs(0))
        service = ExplainingFolder(AdmissionFolder())
        await _admission_until_caught_up(log, service)
        await log.append(inputs(1))  # a tail after the snapshot
        await anyio.sleep(0.2)
        caplog.set_level(logging.INFO, logger="services.common.folding")
        state = await live_state(nats_url)
    finally:
        await log.close()
    assert "admission: started from its snapshot at" in caplog.text, caplog.text
    held = {r["gang"] for r in gang_rows(state, "default")}
    assert held >= {r["gang"] for r in gang_rows(service.state, "default")}  # the snapshot's gangs
    assert held >= {f"g1-{i}" for i in range(6)}  # and the tail's
    assert state.on_forget is None
    # /b's reservation halved: its entitlement follows (pools /a and /b share 100 cpu, 50 each)
    target = ClusterConfig({}, None, {("default", "/a"): PoolConfig(reservation={"cpu": 50.0}),
                                      ("default", "/b"): PoolConfig(reservation={"cpu": 25.0})})
    found = what_if(state, target, prune=False)
    assert found.plan.ok and [c.ref for c in found.plan.changes] == ["/b"]
    assert found.before[("default", "/b", "cpu")] >= found.after[("default", "/b", "cpu")]
