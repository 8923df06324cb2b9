"""`apply --dry-run`'s fold of the live log (`services.tools.cli.dry_run.live_state`) starts from
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
from services.admission.domain.gang_rows import gang_rows
from services.admission.folder import AdmissionFolder
from services.admission.queries import ExplainingFolder
from services.common.jetstream import JetStreamLog
from services.common.snapshots import ObjectStoreSnapshots
from services.tools.cli.dry_run import live_state, what_if
from services.tree.domain.cluster import ClusterConfig
from tests.conftest import reset_stream
from tests.snapshots.test_service_snapshots import fold_until_quiet, inputs

pytestmark = pytest.mark.anyio


async def test_the_dry_runs_fold_starts_from_admissions_snapshot(nats_url: str,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    log = await JetStreamLog.connect(nats_url, stream=STREAM)
    try:
        await reset_stream(log)
        from nats.js import JetStreamContext

        with contextlib.suppress(Exception):  # (none yet)
            await JetStreamContext(log.nc).delete_object_store("poolwise_snapshots")
        await log.append(inputs(0))
        service = ExplainingFolder(AdmissionFolder())  # admission as the service folds: explain's notes kept
        await fold_until_quiet(log, ObjectStoreSnapshots(JetStreamContext(log.nc), log.stream), service)
        await log.append(inputs(1))  # a tail after the snapshot
        await anyio.sleep(0.2)
        caplog.set_level(logging.INFO, logger="services.tools.cli.folds")
        state = await live_state(nats_url)
    finally:
        await log.close()
    assert "admission's fold started from its snapshot at" in caplog.text, caplog.text
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
