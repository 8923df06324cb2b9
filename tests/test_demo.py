"""`poolwise demo`: the command as a person runs it (the README's line), its refusals, and the
Peloton user guide example (`--workload peloton`) giving back 11.67 from RP2 and RP3 each."""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.request
from pathlib import Path

import anyio
import pytest

from services.tools.demo.story import scenario
from services.tools.scenario.runner import run_file
from tests.cli.helpers import POOLWISE, clean_env, one_error_line, run_here


def test_demo_story_matches_the_guide() -> None:
    report = anyio.run(run_file, scenario(), "memory", None, 0)
    assert report.passed
    at60 = report.steps[1]
    over = {p: round(r.allocation["cpu"] - r.entitlement["cpu"], 2) for p, r in at60.pools.items()}
    assert over == {"/RP1": -0.33, "/RP2": 11.67, "/RP3": 11.67}
    preempted = [d.pool for d in at60.decisions if d.kind == "preempt"]
    assert preempted.count("/RP2") == 12 and preempted.count("/RP3") == 12


@pytest.mark.nats
def test_the_readme_demo_ends_with_replay_verified(tmp_path: Path) -> None:
    """`poolwise demo` as the README runs it (shorter, and with `--http-port 0`: the dashboard's
    address comes first, and it answers about the demo's system), off a terminal: plain lines,
    the summary, the replay's verdict, exit 0."""
    # 20 s: on a loaded machine the start takes several of them, and the dashboard goes with the demo
    child = subprocess.Popen([POOLWISE, "demo", "--duration", "20", "--http-port", "0"], cwd=tmp_path,
                             env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                             text=True)
    try:
        assert child.stdout is not None
        lines = [child.stdout.readline() for _ in range(2)]
        assert lines[0].startswith("poolwise demo: three teams on 8 machines"), lines
        address = re.fullmatch(r"dashboard: (http://127\.0\.0\.1:\d+/) \(while the demo runs\)\n", lines[1])
        assert address, lines
        seen = []
        for _ in range(20):  # the page refreshes once a second: until it has read the applied cluster
            with urllib.request.urlopen(address.group(1) + "api/overview", timeout=30) as answer:
                assert answer.status == 200
                seen.append(json.loads(answer.read()))
            if seen[-1]["log_seq"] >= 1:
                break
            time.sleep(0.25)
        assert seen[-1]["log_seq"] >= 1 and seen[-1]["errors"] == {}, seen[-1]
        out, err = child.communicate(timeout=120)
    finally:
        child.kill()
        child.wait()
    assert child.returncode == 0, err
    # how far it gets before its deadline depends on the machine: at least its first tick
    assert "(poolwise apply)" in out and "\nlog time 0.0 s | " in out
    assert "cluster usage: " in out and "of log time (" in out
    assert "ok: all " in out and "recorded decisions re-derived identically" in out
    assert not any(tmp_path.iterdir())  # its temporary data dir is gone (and it wrote none here)


def test_demo_peloton_is_still_told(capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    result = run_here(capfd, monkeypatch, "demo", "--workload", "peloton", "--bus", "memory")
    assert result.code == 0, result.err
    assert "as in the Peloton user guide" in result.out


@pytest.mark.parametrize(("args", "said"), [
    (("--workload", "slurm"), "--workload must be one of teams, kueue-baseline, peloton, not 'slurm'"),
    (("--workload", "kueue-baseline", "--scale", "0"), "--scale: a fraction above 0 and at most 1, got 0"),
    (("--duration", "-1"), "--duration: wall seconds above 0, got -1"),
])
def test_demo_refuses_bad_options(capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                  args: tuple[str, ...], said: str) -> None:
    assert one_error_line(run_here(capfd, monkeypatch, "demo", *args)) == f"error: {said}"
