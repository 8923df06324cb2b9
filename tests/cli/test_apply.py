"""`poolwise apply -f` and `poolwise export-config` on a running system (`poolwise up`, its
embedded NATS): a file of nested pools, hosts and tree options made live; the same file again
appends nothing; a changed limit and share update only those; `--prune` deletes; an invalid
file is refused whole with every broken rule and nothing appended; an export applied changes
nothing and exports the same text again.

The tests of this module run in order on one system (each starts from what the last left)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.helpers import Result, Up, last_seq, no_traceback, one_error_line, quiet_seq, run_here, wait_for

CLUSTER = """\
resources: [cpu, memory]
hosts:
  - {name: h1, resources: {cpu: 100, memory: 1000}}
  - {name: h2, resources: {cpu: 50, memory: 500}, revocable: {cpu: 10}, tags: [gpu]}
trees:
  - name: default
    policy: hdrf
    preemption: {enabled: true, grace: 10}
    max_jobs_per_pool: 40
    gang_timeout: {default: 86400, limit: 86400, jitter: 0}   # no timer fires while the tests run
pools:
  - path: /ATG/Sim              # before its parent: apply finds the order
    reservation: {cpu: 20}
    limit: {cpu: 30}
  - path: /ATG
    reservation: {cpu: 60, memory: 600}
    limit: {cpu: 100, memory: 1000}
    share: 2
  - path: /ATG/Maps
    reservation: {cpu: 30}
    mode: fair_share
  - path: /ATG/Maps/Tiles
    reservation: {cpu: 10}
  - path: /Web
    limit: {cpu: 40}
"""


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    root = tmp_path_factory.mktemp("cli-apply")
    with Up(root / "data", root) as up:
        up.start()
        yield up




def _apply(up: Up, text: str, *args: str, name: str = "cluster.yaml") -> Result:
    file = up.cwd / name
    file.write_text(text)
    result = up.cli("apply", "-f", name, *args)  # relative to the cwd: as the output names it
    no_traceback(result)
    return result


def test_a_file_of_nested_pools_hosts_and_tree_options_is_made_live(system: Up) -> None:
    result = _apply(system, CLUSTER)
    assert result.code == 0, result
    lines = result.out.splitlines()
    assert lines[0].startswith("cluster.yaml: 8 change(s) in 8 command(s)"), result.out
    assert "  created pool /ATG/Maps/Tiles (tree default): reservation cpu=10" in lines
    assert any(line.startswith("  updated tree default: policy \"per_resource\" -> \"hdrf\"") for line in lines)
    assert "  created host h2: resources cpu=50,memory=500, revocable cpu=10, tags [\"gpu\"]" in lines
    assert system.pool_config("/ATG") == {"reservation": {"cpu": 60.0, "memory": 600.0},
                                     "limit": {"cpu": 100.0, "memory": 1000.0}, "share": 2.0}
    assert system.pool_config("/ATG/Maps") == {"reservation": {"cpu": 30.0}, "mode": "fair_share"}
    trees = system.cli("tree", "list").json()["trees"]
    options = next(t for t in trees if t["name"] == "default")["options"]
    assert options["policy"] == "hdrf" and options["preemption"]["grace"] == 10
    assert options["resources"] == ["cpu", "memory"] and options["max_jobs_per_pool"] == 40
    hosts = {h["name"]: h for h in system.cli("host", "list", "--json").json()}
    assert hosts["h2"]["revocable"] == {"cpu": 10.0} and hosts["h2"]["tags"] == ["gpu"]


def test_the_same_file_again_appends_nothing(system: Up) -> None:
    before = quiet_seq(system)
    result = _apply(system, CLUSTER)
    assert result.code == 0 and result.out == "no change\n", result
    time.sleep(1.0)  # a tick would follow an appended change within this
    assert last_seq(system) == before


def test_a_changed_limit_and_share_update_only_those(system: Up) -> None:
    changed = CLUSTER.replace("limit: {cpu: 30}", "limit: {cpu: 35}").replace("share: 2", "share: 3")
    result = _apply(system, changed, "--json")
    assert result.code == 0, result
    outcome = result.json()
    assert outcome["applied"] and outcome["commands"] == 2 and outcome["violations"] == []
    assert [(c["action"], c["ref"], c["fields"]) for c in outcome["changes"]] == [
        ("updated", "/ATG/Sim", {"limit": {"before": {"cpu": 30.0}, "after": {"cpu": 35.0}}}),
        ("updated", "/ATG", {"share": {"before": 2.0, "after": 3.0}}),
    ]
    assert system.pool_config("/ATG/Sim")["limit"] == {"cpu": 35.0} and system.pool_config("/ATG")["share"] == 3.0
    text = _apply(system, CLUSTER)  # and back, as text
    assert text.out.splitlines()[1:] == ["  updated pool /ATG/Sim (tree default): limit cpu=35 -> cpu=30",
                                         "  updated pool /ATG (tree default): share 3.0 -> 2.0"], text.out


def test_pools_not_in_the_file_are_left_and_listed_or_pruned(system: Up) -> None:
    without_web = CLUSTER.replace("  - path: /Web\n    limit: {cpu: 40}\n", "")
    left = _apply(system, without_web)
    assert left.code == 0 and left.out.splitlines() == [
        "no change", "left as they are (not in the file; --prune deletes them):", "  pool /Web (tree default)"], left
    assert system.pool_config("/Web") == {"limit": {"cpu": 40.0}}
    without_tiles = without_web.replace("  - path: /ATG/Maps/Tiles\n    reservation: {cpu: 10}\n", "")
    pruned = _apply(system, without_tiles, "--prune")
    assert pruned.code == 0, pruned
    assert sorted(pruned.out.splitlines()[1:]) == ["  deleted pool /ATG/Maps/Tiles (tree default)",
                                                   "  deleted pool /Web (tree default)"], pruned.out
    gone = system.cli("pool", "get", "/Web")
    assert gone.code == 2 and "does not exist" in gone.err
    assert _apply(system, without_tiles, "--prune").out == "no change\n"
    assert _apply(system, CLUSTER).code == 0  # as it was, for the tests after


INVALID = """\
resources: [cpu, memory]
pools:
  - path: /ATG
    reservation: {cpu: 60, memory: 600}
    limit: {cpu: 100, memory: 1000}
  - path: /ATG/Sim
    reservation: {cpu: 50}        # above its limit; with Maps', 80 of ATG's 60
    limit: {cpu: 30}
  - path: /ATG/Maps
    reservation: {cpu: 30}
  - path: /Nowhere/x              # no such parent
"""


def test_an_invalid_file_is_refused_whole_with_every_rule_and_nothing_appended(system: Up) -> None:
    before = quiet_seq(system)
    result = _apply(system, INVALID, name="invalid.yaml")
    assert result.code == 2 and result.out == "", result
    assert result.err_lines == [
        "error: invalid.yaml: pools[0].reservation.cpu (line 4): pool /ATG (tree default), reservation.cpu: "
        "Aggregated child reservation 80 of kind `cpu` exceed parent `/ATG` reservation 60 "
        "[children_reservation_exceeds_parent]",
        "error: invalid.yaml: pools[1].reservation.cpu (line 7): pool /ATG/Sim (tree default), reservation.cpu: "
        "resource cpu, reservation 50 exceeds limit 30 [reservation_exceeds_limit]",
        "error: invalid.yaml: pools[3].path (line 11): pool /Nowhere/x (tree default), path: parent /Nowhere "
        "does not exist [parent_missing]",
        "error: invalid.yaml: 3 rule(s) broken; nothing was applied",
    ], result.err
    as_json = _apply(system, INVALID, "--json", name="invalid.yaml")
    assert as_json.code == 2
    assert {(v["ref"], v["rule"], v["field"], v["place"]) for v in as_json.json()["violations"]} == {
        ("/ATG", "children_reservation_exceeds_parent", "reservation.cpu", "pools[0].reservation.cpu"),
        ("/ATG/Sim", "reservation_exceeds_limit", "reservation.cpu", "pools[1].reservation.cpu"),
        ("/Nowhere/x", "parent_missing", "path", "pools[3].path")}
    dry = _apply(system, INVALID, "--dry-run", name="invalid.yaml")
    assert dry.code == 2 and dry.err_lines == result.err_lines, dry
    time.sleep(1.0)
    assert last_seq(system) == before
    assert system.pool_config("/ATG/Sim") == {"reservation": {"cpu": 20.0}, "limit": {"cpu": 30.0}}


def test_an_export_applied_changes_nothing_and_exports_the_same(system: Up) -> None:
    exported = system.cli("export-config")
    assert exported.code == 0, exported
    assert "\n  policy: hdrf\n" in exported.out and "- path: /ATG/Maps/Tiles\n" in exported.out
    before = quiet_seq(system)
    again = _apply(system, exported.out, name="exported.yaml")
    assert again.code == 0 and again.out == "no change\n", again
    time.sleep(1.0)
    assert last_seq(system) == before
    assert system.cli("export-config").out == exported.out
    as_json = system.cli("export-config", "-o", "json")
    assert as_json.code == 0 and as_json.json()["pools"][0] == {
        "path": "/ATG", "reservation": {"cpu": 60, "memory": 600}, "limit": {"cpu": 100, "memory": 1000}, "share": 2}


def _entitlements_after(up: Up, seq: int) -> dict[tuple[str, str], float] | None:
    """Each pool's entitlement per kind as admission published it, once computed after `seq`."""
    result = up.cli("sql", "SELECT path, kind, entitlement, computed_seq FROM pool_entitlements "
                           "WHERE path <> '/'", "--json")
    assert result.code == 0, result
    rows = result.json()
    if not rows or min(r["computed_seq"] for r in rows) <= seq:
        return None
    return {(r["path"], r["kind"]): r["entitlement"] for r in rows}


def test_a_dry_run_appends_nothing_and_predicts_the_entitlements_the_real_apply_gives(system: Up) -> None:
    for gang, pool, tasks in (("g-sim", "/ATG/Sim", "4"), ("g-tiles", "/ATG/Maps/Tiles", "10")):
        done = system.cli("submit", "--gang", gang, "--pool", pool, "--tasks", tasks, "--resources", "cpu=5",
                          "--wait", "30")
        assert done.code == 0, done
    wait_for(lambda: _gang_states(system) == {"g-sim": "admitted", "g-tiles": "admitted"}, "both gangs admitted")
    # 15 more in /ATG/Sim, which holds 20 of its limit of 30: it waits, until the limit is raised
    assert system.cli("submit", "--gang", "g-wide", "--pool", "/ATG/Sim", "--tasks", "3", "--resources",
                      "cpu=5").code == 0
    wait_for(lambda: _gang_states(system).get("g-wide") == "pending", "g-wide pending")
    capped = CLUSTER.replace("    reservation: {cpu: 10}\n", "    reservation: {cpu: 10}\n    limit: {cpu: 40}\n")
    capped = capped.replace("limit: {cpu: 30}", "limit: {cpu: 40}")
    before = quiet_seq(system)
    dry = _apply(system, capped, "--dry-run", "--json", name="capped.yaml")
    assert dry.code == 0, dry
    predicted = dry.json()
    assert predicted["dry_run"] and not predicted["applied"] and predicted["commands"] == 2
    assert [(c["ref"], c["fields"]) for c in predicted["changes"]] == [
        ("/ATG/Sim", {"limit": {"before": {"cpu": 30.0}, "after": {"cpu": 40.0}}}),
        ("/ATG/Maps/Tiles", {"limit": {"before": None, "after": {"cpu": 40.0}}})]
    changed = {(r["pool"], r["kind"]): (r["before"], r["after"]) for r in predicted["entitlement"] if r["changed"]}
    assert changed[("/ATG/Maps/Tiles", "cpu")] == (50.0, 40.0), predicted["entitlement"]  # its demand, then its limit
    assert changed[("/ATG/Sim", "cpu")] == (30.0, 35.0), predicted["entitlement"]  # its limit, then its demand
    assert predicted["admitted"] == [{"tree": "default", "gang": "g-wide", "pool": "/ATG/Sim",
                                      "without_the_change": False}]
    text = _apply(system, capped, "--dry-run", name="capped.yaml")
    lines = text.out.splitlines()
    assert lines[:4] == [
        "dry run of capped.yaml: nothing was appended", "2 change(s) in 2 command(s) would be made:",
        "  updated pool /ATG/Sim (tree default): limit cpu=30 -> cpu=40",
        "  updated pool /ATG/Maps/Tiles (tree default): limit - -> cpu=40"], text.out
    assert any(line.startswith("* /ATG/Maps/Tiles") and line.endswith("50 -> 40") for line in lines)
    assert lines[-5:] == [
        "admission's next cycle would admit:", "  g-wide in /ATG/Sim (tree default)",
        # 10 tasks of 5 cpu over a limit of 40: one gang, needed whole by no kind, and taking it
        # would leave the pool below its reservation (10): preemption passes it over
        "pools that would hold more than their entitlement (held, entitled, over):",
        "  /ATG/Maps/Tiles (tree default, non-slack): cpu 50, 40, 10; admitted gangs g-tiles",
        "preemption would pick no task"], text.out
    assert predicted["over_entitlement"] == [{
        "tree": "default", "pool": "/ATG/Maps/Tiles", "bucket": "non_slack", "allocation": {"cpu": 50.0},
        "entitlement": {"cpu": 40.0}, "excess": {"cpu": 10.0}, "gangs": ["g-tiles"], "without_the_change": False}]
    assert predicted["preemptions"] == []
    time.sleep(1.0)
    assert last_seq(system) == before  # nothing appended
    applied = _apply(system, capped, "--json", name="capped.yaml")
    assert applied.code == 0, applied
    assert applied.json()["log_positions"][0] == before + 1  # nothing was appended since, by the dry runs or else
    seq = applied.json()["log_positions"][-1]
    published = wait_for(lambda: _entitlements_after(system, seq), "a cycle after the apply")
    assert published == pytest.approx({(r["pool"], r["kind"]): r["after"] for r in predicted["entitlement"]})
    wait_for(lambda: _gang_states(system).get("g-wide") == "admitted", "g-wide admitted, as predicted")


def _gang_states(up: Up) -> dict[str, str]:
    return {g["gang"]: g["state"] for g in up.cli("gangs", "--json").json()["gangs"]}


def test_a_file_with_steps_is_refused_naming_the_key(
        tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    file = tmp_path / "scenario.yaml"
    file.write_text("name: s\npools: []\nsteps:\n  - at: 0\n")
    result = run_here(capfd, monkeypatch, "apply", "-f", str(file), "--data-dir", str(tmp_path))
    no_traceback(result)
    assert result.code == 2 and result.err_lines == [
        f"error: {file}: steps (line 3): a cluster file has no `steps`: it is the configuration (resources, "
        "capacity or hosts, trees, pools); run a file with steps with `poolwise scenario run`"]


@pytest.mark.parametrize(("text", "found"), [
    ("pools: [\n", "invalid YAML"),
    ("pools:\n  - {path: /a, reservation: {cpu: lots}}\n", "pools[0].reservation.cpu (line 2): expected a number"),
    ("pools: []\n", "no running poolwise found"),
])
def test_bad_input_is_one_line_and_exit_2(text: str, found: str, tmp_path: Path,
                                          capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    file = tmp_path / "c.yaml"
    file.write_text(text)
    for extra in ((), ("--dry-run",)):
        result = run_here(capfd, monkeypatch, "apply", "-f", str(file), "--data-dir", str(tmp_path), *extra)
        assert one_error_line(result).find(found) > 0, result.err
    exported = run_here(capfd, monkeypatch, "export-config", "--data-dir", str(tmp_path))
    assert "no running poolwise found" in one_error_line(exported)
