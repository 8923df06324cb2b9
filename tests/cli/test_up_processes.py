"""`poolwise up` runs each service in an OS process of its own, a child of up: it admits gangs like
the single process did, restarts a service process that dies, gives up (one line, exit 1) on one
that keeps failing before it leads, and leaves nothing running when it is killed. `--single-process`
keeps every service in up's own process."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

from services.launcher import stop_orphan_server
from tests.cli.helpers import SERVICES, STARTED, WAIT, Up, alive, nats_server_pid, no_traceback, run, wait_for

pytestmark = pytest.mark.timeout(600)

ADMITTED = ("SELECT json_extract_string(data, '$.gang') AS gang, CAST(data->>'$.attempt' AS INTEGER) AS attempt, "
            "count(*) AS n FROM event_log WHERE type = 'GangAdmitted' GROUP BY ALL ORDER BY gang, attempt")
# Nothing places these gangs' tasks (no executor runs), so each would be requeued and admitted again
# (attempt 2) once its placement timeout passed: by default 30 s of log time after its admission
# plus a jitter of up to 30 s ("before": 42.9 s), which a loaded machine's kill, lease expiry,
# restart, submit and replay can outlast. The tree's timeouts are a day: every admission seen here
# is attempt 1's, and a second one would be a decision published twice.
TREE_OPTIONS = "gang_timeout: {default: 86400, limit: 86400, jitter: 0}\n"


def setup(up: Up) -> None:
    (up.cwd / "tree.yaml").write_text(TREE_OPTIONS)
    configured = up.cli("tree", "configure", "default", "--file", "tree.yaml")
    assert configured.code == 0, configured.out + configured.err
    assert up.cli("host", "add", "h1", "--resources", "cpu=100,memory=1000").code == 0
    assert up.cli("pool", "create", "/p", "--reservation", "cpu=50", "--limit", "cpu=100").code == 0


def submit(up: Up, gang: str) -> None:
    """Submit a gang and wait until admission has answered it: admitted."""
    done = up.cli("submit", "--gang", gang, "--pool", "/p", "--tasks", "2", "--resources", "cpu=1",
                  "--wait", str(int(WAIT)))
    assert done.code == 0, done.out + done.err
    assert f"gang {gang}: admitted" in done.out, done.out


def gang_states(up: Up) -> dict[str, tuple[str, int]]:
    listed = up.cli("gangs", "--json")
    assert listed.code == 0, listed.err
    return {row["gang"]: (row["state"], row["attempt"]) for row in listed.json()["gangs"]}


def admitted_once(up: Up, gangs: set[str]) -> dict[str, Any] | None:
    """The replay report once the tree's projection holds every gang's admission, each once; None before."""
    found = up.cli("sql", ADMITTED, "--json")
    assert found.code == 0, found.err
    counts = {(row["gang"], row["attempt"]): row["n"] for row in found.json()}
    assert all(n == 1 for n in counts.values()), counts  # no attempt of a gang admitted twice ...
    assert all(attempt == 1 for _, attempt in counts), counts  # ... nor requeued (see TREE_OPTIONS)
    if {gang for gang, _ in counts} != gangs:
        return None
    report = up.cli("replay", "--verify", "--json")
    assert report.code == 0, report.out + report.err
    replay: dict[str, Any] = report.json()
    return replay


def test_up_runs_each_service_in_a_process_of_its_own(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with Up(data, tmp_path) as up:
        up.start()
        assert up.proc is not None
        pids = up.service_pids()
        assert set(pids) == set(SERVICES), pids  # one child per service ...
        # the tree service (read models, off the decision path) yields the CPU to the deciders
        deciding = os.getpriority(os.PRIO_PROCESS, pids["admission"])
        assert os.getpriority(os.PRIO_PROCESS, pids["tree"]) == min(19, deciding + 10)
        assert len(set(pids.values())) == len(SERVICES) and up.proc.pid not in pids.values()
        assert {name: found[-1] for name, found in up.started_pids().items()} == pids  # ... as up told
        for name in SERVICES:
            assert f"poolwise: {name} leading (as " in up.stderr, up.stderr

        setup(up)
        submit(up, "g1")
        assert gang_states(up)["g1"] == ("admitted", 1)
        explained = up.cli("explain", "g1")
        assert explained.code == 0 and "is admitted in pool /p" in explained.out, explained.out + explained.err
        assert up.service_pids() == pids  # nothing was restarted

        assert up.stop(signal.SIGTERM) == 0
        assert not any(alive(pid) for pid in pids.values())  # up waited for its children
        assert nats_server_pid(data) is None
        no_traceback_in(up.stderr)
        assert "exited" not in up.stderr, up.stderr  # no child exited by itself


def test_a_killed_service_process_is_restarted(tmp_path: Path) -> None:
    with Up(tmp_path / "data", tmp_path) as up:
        up.start()
        setup(up)
        submit(up, "before")
        pids = up.service_pids()

        os.kill(pids["admission"], signal.SIGKILL)
        wait_for(lambda: "poolwise: admission exited (killed by SIGKILL)" in up.stderr, "up to notice")
        wait_for(lambda: up.stderr.count("poolwise: admission leading (as ") == 2,
                 "the restarted admission to lead (once the killed one's lease has expired)")
        again = up.service_pids()
        assert again["admission"] != pids["admission"] and not alive(pids["admission"])
        assert up.started_pids()["admission"] == [pids["admission"], again["admission"]]
        assert (again["tree"], again["preemption"]) == (pids["tree"], pids["preemption"])  # left alone

        submit(up, "after")
        assert gang_states(up) == {"before": ("admitted", 1), "after": ("admitted", 1)}
        replay = wait_for(lambda: admitted_once(up, {"before", "after"}), "the projection to hold both admissions")
        assert replay["ok"], replay["findings"]  # every decision, before and after the kill, re-derives
        assert up.stop(signal.SIGTERM) == 0
        no_traceback_in(up.stderr)


@pytest.mark.parametrize("mode", [(), ("--single-process",)], ids=["processes", "single-process"])
def test_up_stops_with_one_line_when_its_nats_server_dies(tmp_path: Path, mode: tuple[str, ...]) -> None:
    """Without its server no service can go on: up says so and stops, instead of waiting forever."""
    data = tmp_path / "data"
    with Up(data, tmp_path, *mode) as up:
        up.start()
        pids = up.service_pids()
        server = nats_server_pid(data)
        assert server is not None
        os.kill(server, signal.SIGKILL)
        assert up.proc is not None
        assert up.proc.wait(WAIT) == 1, up.stderr
        last = up.stderr.strip().splitlines()[-1]
        assert last.startswith("error: the embedded nats-server exited (killed by SIGKILL)"), up.stderr
        assert last.endswith("stopped poolwise up") and "server.log" in last, last
        no_traceback_in(up.stderr)
        wait_for(lambda: not any(alive(pid) for pid in pids.values()), "no service process to be left")


def test_killing_up_leaves_no_service_process(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with Up(data, tmp_path) as up:
        up.start()
        pids = up.service_pids()
        assert set(pids) == set(SERVICES)
        server = nats_server_pid(data)
        assert server is not None
        assert up.stop(signal.SIGKILL) == -signal.SIGKILL
        # the kernel tells each child that its parent died (SIGTERM): they stop by themselves, and
        # so does the embedded nats-server
        wait_for(lambda: not any(alive(pid) for pid in pids.values()), "the service processes to go with up")
        wait_for(lambda: not alive(server), "the nats-server to go with up")
    assert nats_server_pid(data) is None
    assert not any(alive(pid) for pid in pids.values())


def test_a_service_that_cannot_start_stops_up_with_one_line(tmp_path: Path) -> None:
    # (Was flaky: a service failing at start could hang for good, its lease renewals' thread never
    # stopping when a cancellation was lost; see tests/leadership/test_lease.py.)
    data = tmp_path / "data"
    data.mkdir()
    (data / "tree").write_text("not a directory")  # where the tree service keeps its projections
    try:
        result = run("up", "--data-dir", str(data), cwd=tmp_path, timeout=120)  # giving up takes ~20 s
    finally:  # (had up hung and been killed: its server would be left running)
        stop_orphan_server(data / "nats")
    no_traceback(result)
    assert result.code == 1, result.err
    last = result.err_lines[-1]
    assert last.startswith("error: tree exited before it was ready 5 times in a row"), result.err
    assert "File exists" in last and "stopped poolwise up" in last  # with what the child said last
    assert result.err.count("poolwise: tree exited (") == 4, result.err  # restarted 4 times, then gave up
    assert not (data / "nats" / "nats.pid").exists()  # up stopped its server itself
    started = [int(pid) for _, pid in STARTED.findall(result.err)]
    assert len(started) >= len(SERVICES) + 4
    wait_for(lambda: not any(alive(pid) for pid in started), "no service process to be left")


def test_single_process_keeps_every_service_in_up(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with Up(data, tmp_path, "--single-process") as up:
        up.start()
        assert up.service_pids() == {}
        assert "started (pid" not in up.stderr
        setup(up)
        submit(up, "g1")
        assert up.stop(signal.SIGTERM) == 0
    assert nats_server_pid(data) is None


def no_traceback_in(text: str) -> None:
    assert "Traceback" not in text, text
