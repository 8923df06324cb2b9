"""The cluster file (`poolwise apply -f`, `export-config`): a scenario's header read into a
configuration, with places for the tree service's violations, and written back to the same values."""

from __future__ import annotations

from pathlib import Path

import pytest

from events import PoolConfig, TreeConfigured, TreeOptions
from services.tools.scenario import ScenarioError
from services.tools.scenario.cluster_file import load_cluster, render_cluster
from services.tree.domain import TreeState
from services.tree.domain.change_plan import plan_changes
from services.tree.domain.cluster import ClusterConfig, config_of, same
from services.tree.domain.target import Violation
from services.tree.domain.tree import Host
from tests.tree.builders import host, pool, tree_configured


def _load(tmp_path: Path, text: str, name: str = "cluster.yaml") -> ClusterConfig:
    file = tmp_path / name
    file.write_text(text)
    return load_cluster(file).config


def _error(tmp_path: Path, text: str) -> str:
    file = tmp_path / "bad.yaml"
    file.write_text(text)
    with pytest.raises(ScenarioError) as info:
        load_cluster(file)
    return str(info.value)


def test_sections_left_out_are_not_managed(tmp_path: Path) -> None:
    only_pools = _load(tmp_path, "pools:\n  - {path: /a, reservation: {cpu: 1}}\n")
    assert only_pools.trees == {} and only_pools.hosts is None
    assert only_pools.pools == {("default", "/a"): PoolConfig(reservation={"cpu": 1.0})}
    kinds = _load(tmp_path, "resources: [cpu]\nhosts: []\n")
    assert kinds.trees == {"default": TreeOptions(resources=["cpu"])} and kinds.hosts == {} and kinds.pools is None
    capacity = _load(tmp_path, "resources: [cpu]\ncapacity: {cpu: 10}\n")
    assert capacity.hosts == {"cluster": Host("cluster", {"cpu": 10.0})}


def test_steps_are_refused_naming_the_key_and_name_is_optional(tmp_path: Path) -> None:
    assert "steps (line 3): a cluster file has no `steps`" in _error(tmp_path, "name: x\npools: []\nsteps: []\n")
    assert _load(tmp_path, "name: x\ndescription: y\npools: []\n").pools == {}


@pytest.mark.parametrize(("text", "found"), [
    ("pools:\n  - {path: /a}\n  - {path: /a/}\n", "pools[1].path (line 3): pool /a is given twice"),
    ("pools:\n  - {path: /a, tree: other}\n", "pools[0].tree (line 2): tree 'other' is not declared"),
    ("pools:\n  - {path: /a, limt: {cpu: 1}}\n", "pools[0].limt (line 2): unknown key `limt`"),
    ("hosts:\n  - {name: h}\n  - {name: h}\n", "hosts[1].name (line 3): host 'h' is given twice"),
    ("- 1\n", "a cluster file is a mapping"),
])
def test_what_only_the_file_can_say_is_one_error_with_its_place(tmp_path: Path, text: str, found: str) -> None:
    assert found in _error(tmp_path, text)


def test_a_violation_is_placed_at_its_pool_and_option(tmp_path: Path) -> None:
    file = tmp_path / "c.yaml"
    file.write_text("resources: [cpu]\npools:\n  - path: /a\n    reservation: {cpu: 5}\n    limit: {cpu: 1}\n")
    cluster = load_cluster(file)
    (violation,) = plan_changes(TreeState(), cluster.config, prune=False).violations
    assert violation == Violation("pool", "default", "/a", "reservation_exceeds_limit",
                                  "resource cpu, reservation 5 exceeds limit 1", "reservation.cpu")
    assert cluster.place_of(violation) == ("pools[0].reservation.cpu", 4)


def test_a_configuration_written_reads_back_to_the_same_values(tmp_path: Path) -> None:
    live = TreeState.of([
        tree_configured(resources=["cpu", "gpu"], policy="hdrf", preemption={"enabled": False, "grace": 12.5},
                        pool_config_presets={"small": {"limit": {"cpu": 4}}}, max_jobs_per_pool=9),
        TreeConfigured(tree="batch", options=TreeOptions(resources=["cpu"])),
        host("h1", tags=("gpu",), revocable={"cpu": 2}, cpu=100, gpu=8), host("h2", cpu=3.5),
        pool("/a", reservation={"cpu": 10}, limit={"cpu": 20.5}, share={"cpu": 2, "gpu": 1}, mode="fair_share",
             fifo_sort=["priority"]),
        pool("/a/b", share=2, config_presets=["small"], max_running_jobs=3, create_ephemeral_subpools=True,
             ephemeral_subpool_config={"limit": {"cpu": 2}}),
        pool("/x", tree="batch", reservation={"cpu": 1}),
    ])
    written = config_of(live)
    text = render_cluster(written, "exported\nfor a test")
    assert text.startswith("# exported\n# for a test\nresources: [cpu, gpu]\n")
    read = _load(tmp_path, text)
    assert list(read.trees) == list(written.trees) and read.hosts == written.hosts
    assert all(same(read.trees[n], written.trees[n]) for n in written.trees)
    assert read.pools is not None and written.pools is not None and set(read.pools) == set(written.pools)
    assert all(same(read.pools[k], written.pools[k]) for k in written.pools)
    assert plan_changes(live, read, prune=True).changes == ()
    assert render_cluster(read, "exported\nfor a test") == text
