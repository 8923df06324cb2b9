"""`poolwise replay --verify` on a real JetStream log: findings that name the gang and pool, `--to`,
`--tree`, tiny pieces and the verifier's own process giving the same report, and the progress bar
on a terminal only (never with `--json`)."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from events import DecodeError, Envelope, GangAdmitted, decode_all
from services.common.jetstream import JetStreamLog
from services.tools.scenario.format import load_scenario
from services.tools.scenario.runner import run_on
from tests.cli.helpers import POOLWISE, WAIT, clean_env
from tests.replay.test_streaming import TWO_TREES

pytestmark = pytest.mark.anyio


async def replay(url: str, *extra: str) -> tuple[int, str, str]:
    done = await anyio.run_process([POOLWISE, "replay", "--verify", "--nats-url", url, *extra], env=clean_env(),
                                   check=False)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def on_terminal(url: str, *extra: str) -> tuple[int, str]:
    """The command with stdout and stderr on a pseudo-terminal; what it wrote there."""
    leader, follower = pty.openpty()
    process = subprocess.Popen([POOLWISE, "replay", "--verify", "--nats-url", url, *extra], stdout=follower,
                               stderr=follower, stdin=subprocess.DEVNULL, env=clean_env(COLUMNS="160"))
    os.close(follower)
    out = b""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        try:
            data = os.read(leader, 65536)
        except OSError:  # the terminal closed: the process ended
            break
        if not data:
            break
        out += data
    os.close(leader)
    return process.wait(timeout=WAIT), out.decode(errors="replace")


def first_admission(stored_messages: list[Any]) -> Envelope:
    for stored in stored_messages:
        try:
            envelopes = decode_all(stored.data)
        except DecodeError:
            continue
        for envelope in envelopes:
            if isinstance(envelope.event, GangAdmitted) and envelope.event.tree == "tb":
                return envelope
    raise AssertionError("no admission in tree tb")


async def test_replay_on_nats_scope_and_findings(fresh_stream: str, tmp_path: Path) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text(TWO_TREES)
    log = await JetStreamLog.connect(fresh_stream)
    try:
        await run_on(log, load_scenario(path), "replay-scope")
        clean_end = await log.last_seq()
        code, out, err = await replay(fresh_stream, "--json")
        assert (code, err) == (0, ""), out + err
        clean = json.loads(out)
        assert clean["ok"] and clean["scope"]["last_seq"] == clean_end and clean["events"] >= clean["messages"]

        admitted = first_admission(await log.read(1))
        assert isinstance(admitted.event, GangAdmitted)
        forged = admitted.model_copy(update={"id": "forged-admission",
                                             "event": admitted.event.model_copy(update={"gang": "g7"})})
        await log.append([forged])

        code, out, err = await replay(fresh_stream)
        assert code == 1 and err == "", out + err
        (line,) = [x for x in out.splitlines() if x.startswith("unexpected")]
        assert line.startswith("unexpected forged-admission  GangAdmitted by admission, seq ")
        assert "[tree=tb gang=g7 pool=/q queue=" in line and "tasks=[2: g1/0, g1/1]" in line, line
        assert "MISMATCH: 1 unexpected" in out

        whole = json.loads((await replay(fresh_stream, "--json"))[1])
        assert [(f["kind"], f["id"]) for f in whole["findings"]] == [("unexpected", "forged-admission")]
        assert "gang=g7" in whole["findings"][0]["about"]
        for extra in (("--chunk", "1"), ("--chunk", "2", "--process-from", "1"), ("--process-from", "1")):
            code, out, _ = await replay(fresh_stream, "--json", *extra)
            same = json.loads(out)
            assert code == 1 and same["findings"] == whole["findings"] and same["counts"] == whole["counts"], extra

        code, out, _ = await replay(fresh_stream, "--tree", "ta")
        assert code == 0 and "decisions of tree ta only" in out and "ok: all" in out, out
        code, out, _ = await replay(fresh_stream, "--tree", "tb", "--json")
        assert code == 1 and [f["id"] for f in json.loads(out)["findings"]] == ["forged-admission"]

        code, out, _ = await replay(fresh_stream, "--to", str(clean_end), "--chunk", "3")
        assert code == 0 and f"stopped at --to {clean_end}" in out, out
        code, out, _ = await replay(fresh_stream, "--to", str(clean_end + 1), "--json")
        assert code == 1 and json.loads(out)["scope"]["to_seq"] == clean_end + 1

        code, out, err = await replay(fresh_stream, "--to", "0")
        assert code == 2 and "--to 0" in out + err
        code, out, err = await replay(fresh_stream, "--tree", "no.such")
        assert code == 2 and "not a tree name" in out + err
    finally:
        await log.close()


async def test_progress_on_a_terminal_only(fresh_stream: str, tmp_path: Path) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text(TWO_TREES)
    log = await JetStreamLog.connect(fresh_stream)
    try:
        await run_on(log, load_scenario(path), "replay-progress")
    finally:
        await log.close()

    code, shown = await anyio.to_thread.run_sync(on_terminal, fresh_stream, "--chunk", "1")
    assert code == 0 and "ok: all" in shown, shown
    assert "events/s" in shown and "ETA" in shown, shown  # the bar, on the terminal

    code, shown = await anyio.to_thread.run_sync(on_terminal, fresh_stream, "--chunk", "1", "--json")
    assert code == 0 and "events/s" not in shown and "\x1b" not in shown, shown
    assert json.loads(shown)["ok"] is True  # nothing but the JSON

    code, out, err = await replay(fresh_stream, "--chunk", "1")  # pipes: not a terminal
    assert code == 0 and err == "" and "events/s" not in out and "\x1b" not in out
