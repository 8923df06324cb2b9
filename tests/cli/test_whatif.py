"""The what-if on the live state and time travel (issue 21), on one running system (`poolwise up`,
its embedded NATS) shared by the module's tests, which run in order:

1. /A (share 10) holds 80 of 100 cpu in eight 10-cpu gangs; /B (share 1) waits with two 30-cpu
   gangs, entitled to the 20 left. A dry run of giving /A share 1 predicts the entitlements (50
   and 50), that b1 is admitted and b2 not, that /A is 30 over, and which of /A's gangs
   preemption picks (grace 0); then the real apply does exactly that (admissions and preemption
   requests, read from the services).
2. `state`, `pool tree`, `gangs` and `explain` with `--at` (a log position, an event time) show
   the system as it was before the apply; a bad `--at` is one line and exit 2.
3. `poolwise whatif -f` of a change with steps: the same change, then a gang submitted.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest

from services.sdk import SyncSubmitter
from tests.cli.helpers import Result, Up, last_seq, no_traceback, one_error_line, quiet_seq, run_here, wait_for

CLUSTER = """\
resources: [cpu]
hosts:
  - {name: h1, resources: {cpu: 100}}
trees:
  - name: default
    preemption: {enabled: true, grace: 0}
    gang_timeout: {default: 86400, limit: 86400, jitter: 0}   # nothing places the tasks: no timer may fire meanwhile
pools:
  - path: /A
    share: SHARE
  - path: /B
    limit: {cpu: 60}
"""
A_GANGS = [f"a{i}" for i in range(8)]


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    root = tmp_path_factory.mktemp("cli-whatif")
    with Up(root / "data", root) as up:
        up.start()
        yield up


@pytest.fixture(scope="module")
def before(system: Up) -> dict[str, Any]:
    """The system before the change: /A's gangs admitted, /B's pending; where the log was then."""
    file = system.cwd / "cluster.yaml"
    file.write_text(CLUSTER.replace("SHARE", "10"))
    started = datetime.now(UTC)
    assert system.cli("apply", "-f", "cluster.yaml").code == 0
    url = (system.data_dir / "nats.url").read_text().strip()
    with SyncSubmitter(url) as poolwise:
        poolwise.enqueue_many([{"gang": g, "pool": "/A", "count": 1, "resources": {"cpu": 10}} for g in A_GANGS])
        poolwise.enqueue_many([{"gang": g, "pool": "/B", "count": 1, "resources": {"cpu": 30}} for g in ("b1", "b2")])
    wanted = {**{g: "admitted" for g in A_GANGS}, "b1": "pending", "b2": "pending"}
    wait_for(lambda: _gang_states(system) == wanted, "/A's gangs admitted, /B's pending", timeout=30)
    seq = quiet_seq(system)
    return {"seq": seq, "time": datetime.now(UTC).isoformat(), "states": wanted, "started": started}


def _gang_states(up: Up) -> dict[str, str]:
    return {g["gang"]: g["state"] for g in up.cli("gangs", "--json").json()["gangs"]}




def _here(up: Up, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *args: str) -> Result:
    monkeypatch.chdir(up.cwd)
    result = run_here(capfd, monkeypatch, *args, "--data-dir", str(up.data_dir))
    no_traceback(result)
    return result


def test_a_dry_run_predicts_the_admissions_and_preemptions_the_real_apply_makes(
        system: Up, before: dict[str, Any], capfd: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    (system.cwd / "raised.yaml").write_text(CLUSTER.replace("SHARE", "1"))
    dry = _here(system, capfd, monkeypatch, "apply", "-f", "raised.yaml", "--dry-run", "--json")
    assert dry.code == 0, dry
    predicted = dry.json()
    entitled = {(r["pool"], r["kind"]): (r["before"], r["after"]) for r in predicted["entitlement"]}
    assert entitled == {("/A", "cpu"): (80.0, 50.0), ("/B", "cpu"): (20.0, 50.0)}
    assert predicted["admitted"] == [{"tree": "default", "gang": "b1", "pool": "/B", "without_the_change": False}]
    over = predicted["over_entitlement"]
    assert [(o["pool"], o["bucket"], o["allocation"], o["entitlement"], o["excess"]) for o in over] == [
        ("/A", "non_slack", {"cpu": 80.0}, {"cpu": 50.0}, {"cpu": 30.0})]
    assert over[0]["gangs"] == A_GANGS
    picks = predicted["preemptions"]
    assert len(picks) == 3 and {p["pool"] for p in picks} == {"/A"}, picks
    assert all(p["after"] == 0 and p["cause"] == "over_entitlement" and not p["without_the_change"] for p in picks)
    text = _here(system, capfd, monkeypatch, "apply", "-f", "raised.yaml", "--dry-run")
    lines = text.out.splitlines()
    assert "  b1 in /B (tree default)" in lines, text.out
    assert "  /A (tree default, non-slack): cpu 80, 50, 30; admitted gangs " + ", ".join(A_GANGS) in lines
    assert f"  {picks[0]['gang']} in /A (tree default), tasks {picks[0]['tasks'][0]}: over entitlement, at once" \
        in lines
    assert last_seq(system) == before["seq"]  # nothing appended

    applied = _here(system, capfd, monkeypatch, "apply", "-f", "raised.yaml", "--json")
    assert applied.code == 0 and applied.json()["applied"], applied

    def requested() -> list[tuple[str, str, list[str]]] | None:
        records = system.cli("preemptions", "--json").json()["preemptions"]
        found = sorted((r["pool"], r["gang"], r["tasks"]) for r in records)
        return found if len(found) >= 3 else None

    real = wait_for(requested, "preemption's requests after the apply")
    time.sleep(1.0)  # and no more than those
    assert sorted((r["pool"], r["gang"], r["tasks"]) for r in
                  system.cli("preemptions", "--json").json()["preemptions"]) == real
    assert real == sorted((p["pool"], p["gang"], p["tasks"]) for p in picks)
    states = _gang_states(system)
    assert states["b1"] == "admitted" and states["b2"] == "pending", states


def test_state_and_pool_tree_at_a_past_position(system: Up, before: dict[str, Any],
                                                capfd: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    seq = str(before["seq"])
    found = _here(system, capfd, monkeypatch, "state", "--at", seq, "--json")
    assert found.code == 0, found
    document = found.json()
    assert document["as_of"]["seq"] == before["seq"]
    [tree] = document["trees"]
    pools = {p["path"]: p for p in tree["pools"]}
    assert pools["/A"]["config"]["share"] == 10.0
    assert pools["/A"]["allocation"] == {"cpu": 80.0} and pools["/B"]["demand"] == {"cpu": 60.0}
    assert pools["/B"]["queues"] == {"pending": 2}
    assert {g["gang"]: g["state"] for g in tree["gangs"]} == before["states"]
    now = _here(system, capfd, monkeypatch, "state", "--json").json()
    assert {p["path"]: p for p in now["trees"][0]["pools"]}["/A"]["config"]["share"] == 1.0
    text = _here(system, capfd, monkeypatch, "state", "--at", seq)
    assert text.code == 0 and text.out.startswith(f"poolwise state as of log position {seq} ("), text.out
    drawn = _here(system, capfd, monkeypatch, "pool", "tree", "--at", seq)
    assert drawn.code == 0 and "share 10" in drawn.out, drawn.out
    assert "share 10" not in _here(system, capfd, monkeypatch, "pool", "tree").out


def test_gangs_and_explain_at_a_past_position_or_time(system: Up, before: dict[str, Any],
                                                      capfd: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    for at in (str(before["seq"]), before["time"]):
        listed = _here(system, capfd, monkeypatch, "gangs", "--at", at, "--json")
        assert listed.code == 0, listed
        assert {g["gang"]: g["state"] for g in listed.json()["gangs"]} == before["states"], at
        # a time: the last position stamped at or before it (at or after the position taken)
        assert listed.json()["as_of"] == before["seq"] if at == str(before["seq"]) else \
            listed.json()["as_of"] >= before["seq"], at
    why = _here(system, capfd, monkeypatch, "explain", "b1", "--at", str(before["seq"]), "--json")
    assert why.code == 0 and why.json()["state"] == "pending", why
    assert _here(system, capfd, monkeypatch, "explain", "b1", "--json").json()["state"] == "admitted"


@pytest.mark.parametrize(("at", "found"), [
    ("yesterday", "--at 'yesterday': neither a log position (a whole number) nor an ISO 8601 time"),
    ("0", "--at 0: before the log (its first position is 1)"),
    ("99999999", "--at 99999999: in the future (the log ends at position "),
    ("2999-01-01T00:00:00Z", "--at 2999-01-01T00:00:00Z: in the future (it is "),
    ("1969-12-31T23:59:59Z", "--at 1969-12-31T23:59:59Z: before the log (its first event is at 20"),
])
def test_a_bad_at_is_one_line_and_exit_2(system: Up, before: dict[str, Any], at: str, found: str,
                                         capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    for command in (("state",), ("gangs",), ("explain", "b1"), ("pool", "tree")):
        result = _here(system, capfd, monkeypatch, *command, "--at", at)
        assert found in one_error_line(result), (command, result.err)


def test_a_time_before_the_first_apply_is_before_the_log(system: Up, before: dict[str, Any],
                                                        capfd: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The tree service stamps an accepted command with the wall clock (the log had no time yet):
    the cluster's first configuration is dated when it was applied, not 1970, so a time before the
    apply is before the log, and SQL's event_log says when the configuration came."""
    earlier = (before["started"] - timedelta(seconds=1)).isoformat()
    for command in (("state",), ("gangs",), ("pool", "tree")):
        result = _here(system, capfd, monkeypatch, *command, "--at", earlier)
        assert f"--at {earlier}: before the log (its first event is at {before['started']:%Y-%m-%d}" \
            in one_error_line(result), (command, result.err)
    first = _here(system, capfd, monkeypatch, "sql", "SELECT min(time) AS t FROM event_log", "--format", "json")
    assert first.code == 0, first
    assert datetime.fromisoformat(first.json()[0]["t"]) >= before["started"].replace(microsecond=0), first.out


STEPS = """\
name: more-for-a
steps:
  - at: 0
    do:
      - enqueue: {gang: c1, pool: /A, resources: {cpu: 5}}
    expect:
      admitted: [a5, a6]
      pending: [a7, c1, b2]
      preempted: [b1/0]
      entitlement: {/A: {cpu: 75}, /B: {cpu: 25}}
  - at: 30
    do:
      - cancel: a7
      - enqueue: {gang: c2, pool: /A, resources: {cpu: 5}}
    expect:
      admitted: [c1, c2]
"""


def test_whatif_runs_a_files_steps_after_its_change_on_the_copy(
        system: Up, before: dict[str, Any], capfd: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """After the apply: /A (share 1) holds 50 (a0..a4; a5..a7 given back and pending again), /B 30
    (b1; b2 pending). Giving /A share 3 entitles it to 75 and /B to 25: the change's cycle admits
    a5 and a6 (70); c1, enqueued in the first step, waits behind a7 (10 more would be 80: fifo);
    b1 (30 of /B's 25) is preempted. In the second, a7 is cancelled: c1 fits (75), c2 does not:
    it is expected admitted, and the report says it is not."""
    wait_for(lambda: _gang_states(system).get("a7") == "pending", "a5..a7 back to pending")
    start = last_seq(system)
    (system.cwd / "more.yaml").write_text(CLUSTER.replace("SHARE", "3") + STEPS)
    found = _here(system, capfd, monkeypatch, "whatif", "-f", "more.yaml", "--json")
    assert found.code == 1, found  # the second step's expectation fails
    outcome = found.json()
    assert [(c["ref"], c["fields"]) for c in outcome["changes"]] == [("/A", {"share": {"before": 1.0, "after": 3.0}})]
    assert [a["gang"] for a in outcome["admitted"]] == ["a5", "a6"]
    assert [(p["gang"], p["pool"]) for p in outcome["preemptions"]] == [("b1", "/B")]
    first, second = outcome["steps"]["steps"]
    assert first["failures"] == [], first
    assert first["pools"]["/A"]["allocation"] == {"cpu": 70.0} and first["pools"]["/B"]["allocation"] == {"cpu": 0.0}
    assert second["pools"]["/A"]["allocation"] == {"cpu": 75.0}
    assert second["failures"] == ["step at=30: admitted c2: expected admitted, observed pending"], second
    text = _here(system, capfd, monkeypatch, "whatif", "-f", "more.yaml")
    assert text.code == 1 and "the steps, after the change:" in text.out and "FAILED more-for-a" in text.out, text
    assert last_seq(system) == start  # nothing appended


def test_at_a_position_admission_does_not_read_answers_as_of_that_position(
        system: Up, before: dict[str, Any], capfd: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A refused command's record (poolwise.rejected.*) is a position admission does not fold:
    `state --at` and `gangs --at` there say that position, as asked, not admission's last one
    before it (they said one in the header and the other in the gangs' caption)."""
    refused = _here(system, capfd, monkeypatch, "pool", "create", "/A/x", "--reservation", "cpu=1000")
    assert refused.code == 2, refused
    url = (system.data_dir / "nats.url").read_text().strip()

    async def record() -> int:
        from services.common.jetstream import JetStreamLog

        log = await JetStreamLog.connect(url)
        try:
            return max(m.seq for m in await log.read(before["seq"] + 1) if m.subject.startswith("poolwise.rejected."))
        finally:
            await log.close()

    seq = anyio.run(record)
    state = _here(system, capfd, monkeypatch, "state", "--at", str(seq), "--json")
    assert state.code == 0 and state.json()["as_of"]["seq"] == seq, state
    listed = _here(system, capfd, monkeypatch, "gangs", "--at", str(seq), "--json")
    assert listed.code == 0 and listed.json()["as_of"] == seq, listed
    table = _here(system, capfd, monkeypatch, "state", "--at", str(seq))
    assert f"as of log position {seq} (" in table.out and f"(as of log position {seq})" in table.out, table.out
