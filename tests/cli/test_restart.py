"""`poolwise up` on a data dir, stopped (SIGTERM) or killed (SIGKILL) and started again on the
same dir: the tree is intact, every projection row is there once, and new commands work."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from services.common.natsserver import EmbeddedNats
from tests.cli.helpers import Up, nats_server_pid, one_error_line, run, wait_for

pytestmark = pytest.mark.timeout(600)

COUNTS = ("SELECT (SELECT count(*) FROM event_log) AS n, (SELECT count(DISTINCT seq) FROM event_log) AS seqs, "
          "(SELECT count(DISTINCT id) FROM event_log) AS ids, (SELECT max(seq) FROM event_log) AS last, "
          "(SELECT count(*) FROM event_log WHERE type = 'PoolConfigChanged') AS changes, "
          "(SELECT count(*) FROM pools) AS pools, (SELECT count(*) FROM hosts) AS hosts")


def caught_up(up: Up) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The tree service's projection counts and the replay report, once the projection holds the
    whole log (the log is quiet once the cycles of the last input are done); None until then."""
    report = up.cli("replay", "--verify", "--json")
    assert report.code in (0, 1), report.err
    counts = up.cli("sql", COUNTS, "--json")
    assert counts.code == 0, counts.err
    row, replay = counts.json()[0], report.json()
    return (row, replay) if row["n"] == replay["messages"] else None


def check_intact(up: Up, pools: list[str], changes: int) -> None:
    drawn = up.cli("pool", "tree")
    assert drawn.code == 0, drawn.err
    for name in pools:
        assert f"{name}  reservation" in drawn.out, drawn.out
    row, replay = wait_for(lambda: caught_up(up), "the event_log projection to hold the whole log")
    assert row["n"] == row["seqs"] == row["ids"] == row["last"]  # each event once, none missing, none twice
    assert row["changes"] == changes  # no config change applied twice
    assert (row["pools"], row["hosts"]) == (len(pools), 1)  # one row per pool and host
    assert replay["ok"], replay["findings"]  # the decisions made across restarts re-derive identically


def test_restart_after_sigterm_and_sigkill(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with Up(data, tmp_path) as up:
        up.start()
        assert up.cli("pool", "create", "/a", "--reservation", "cpu=10").code == 0
        assert up.cli("pool", "create", "/a/b", "--reservation", "cpu=5").code == 0
        assert up.cli("pool", "create", "/c", "--share", "2").code == 0
        assert up.cli("pool", "update", "/c", "--share", "3").code == 0
        assert up.cli("host", "add", "h1", "--resources", "cpu=64,memory=256").code == 0
        line = one_error_line(up.cli("pool", "create", "/a/d", "--reservation", "cpu=50"))
        assert "Aggregated child reservation" in line and "[children_reservation_exceeds_parent]" in line

        assert up.stop(signal.SIGTERM) == 0
        assert nats_server_pid(data) is None  # the embedded server went with it
        assert not (data / "nats.url").exists()

        up.start()
        check_intact(up, ["a", "b", "c"], changes=4)
        assert up.cli("pool", "create", "/d", "--reservation", "cpu=1").code == 0

        server = nats_server_pid(data)
        assert server is not None
        assert up.stop(signal.SIGKILL) == -signal.SIGKILL
        # the killed process could not stop its server; the kernel did (it dies with its parent)
        wait_for(lambda: nats_server_pid(data) is None, "the nats-server to go with the killed up")

        # a server left running on the store all the same (one that does not die with its parent:
        # another system, or started from another thread) is stopped by the next `up`
        orphan = EmbeddedNats(data, die_with_parent=False).start()
        try:
            assert nats_server_pid(data) == orphan.pid
            up.start()
            assert nats_server_pid(data) not in (None, orphan.pid)  # the orphan was stopped, a new server runs
            assert not orphan.running
        finally:
            orphan.stop()
        check_intact(up, ["a", "b", "c", "d"], changes=5)
        assert up.cli("pool", "create", "/e").code == 0
        assert "e  reservation" in up.cli("pool", "tree").out
        assert up.stop(signal.SIGTERM) == 0
    assert nats_server_pid(data) is None
    offline = run("replay", "--verify", "--data-dir", str(data), cwd=tmp_path)  # the log, read with nothing running
    assert offline.code == 0 and "ok: all" in offline.out, offline.out + offline.err
    assert nats_server_pid(data) is None  # replay's private server is gone too


def test_a_second_up_on_the_same_data_dir_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with Up(data, tmp_path) as up:
        up.start()
        line = one_error_line(run("up", "--data-dir", str(data), cwd=tmp_path))
        assert "another `poolwise up` is running" in line
        assert up.cli("pool", "list").code == 0  # the first one is unharmed
