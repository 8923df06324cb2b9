"""A tree of 10,100 pools (100 parents of 100 leaves) runs on JetStream: its entitlements reach the
log in parts under NATS's 1 MiB payload limit (before `EntitlementsComputed` v2 the first cycle's
one message was ~3 MB, and admission ended with `MaxPayloadError`), and a gang is admitted."""

from __future__ import annotations

import pytest

from bench.large_tree import run_live


@pytest.mark.anyio
async def test_a_tree_of_10100_pools_runs_on_jetstream(fresh_stream: str) -> None:
    run = await run_live(fresh_stream, 100, 100, "shared", 60.0)
    assert run.admitted
    assert run.pools == 10_100
    assert run.entitlement_messages >= 11  # the first cycle's 10,101 pools (with the root) in parts
    assert 0 < run.largest_entitlement_bytes < 512 * 1024
    assert run.largest_message_bytes < 1024 * 1024
    # no bound on run.seconds: run_live's own 60 s budget is the only limit (tests never fail on timing)
    # every decision re-derived from the log, the parts of the entitlements included
    from services.common.jetstream import JetStreamLog
    from services.tools.replay.reader import read_log
    from services.tools.replay.verify import verify

    log = await JetStreamLog.connect(fresh_stream)
    try:
        messages = await read_log(log)
    finally:
        await log.close()
    report = verify(messages)
    assert report.ok, [finding.line() for finding in report.findings][:5]
    assert report.count("EntitlementsComputed").recorded == run.entitlement_messages
