"""`poolwise replay --verify` on a real JetStream log: exit 0 when every decision re-derives, 1 with the
ids of those that do not, counts per decision type either way."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from events import DecodeError, Envelope, GangAdmitted, decode_all
from services.common.jetstream import JetStreamLog
from services.tools.scenario.format import load_scenario
from services.tools.scenario.runner import run_on
from tests.cli.helpers import POOLWISE, clean_env
from tests.service.test_replay import TIMEOUTS

pytestmark = pytest.mark.anyio


async def replay(url: str, *extra: str) -> tuple[int, str, str]:
    done = await anyio.run_process([POOLWISE, "replay", "--verify", "--nats-url", url, *extra], env=clean_env(),
                                   check=False)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


async def test_replay_verify_on_nats(fresh_stream: str, tmp_path: Path) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text(TIMEOUTS)
    log = await JetStreamLog.connect(fresh_stream)
    try:
        await run_on(log, load_scenario(path), "replay-cli")
        code, out, err = await replay(fresh_stream)
        assert (code, err) == (0, ""), out + err
        assert "ok: all" in out and "GangAdmitted" in out and "GangTimedOut" in out

        admitted: Envelope | None = None
        for stored in await log.read(1):
            try:
                envelopes = decode_all(stored.data)  # one event, or a pack of decisions
            except DecodeError:
                continue
            envelope = envelopes[0]
            if isinstance(envelope.event, GangAdmitted):
                admitted = envelope
                break
        assert admitted is not None and isinstance(admitted.event, GangAdmitted)
        forged = admitted.model_copy(update={"id": "forged-admission",
                                             "event": admitted.event.model_copy(update={"gang": "g2"})})
        await log.append([forged])

        code, out, err = await replay(fresh_stream)
        assert code == 1, out + err
        assert "unexpected forged-admission  GangAdmitted by admission" in out
        assert "MISMATCH: 1 unexpected" in out

        code, out, _ = await replay(fresh_stream, "--json")
        report = json.loads(out)
        assert code == 1 and [(f["kind"], f["id"]) for f in report["findings"]] == [("unexpected", "forged-admission")]
        counts = report["counts"]["GangAdmitted"]
        assert counts["recorded"] == counts["matched"] + 1 == counts["rederived"] + 1
    finally:
        await log.close()
