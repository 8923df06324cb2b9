"""deploy/'s per-tree mode (issue 19) on the 3-node cluster of deploy/nats: the systemd drop-in
(`deploy/systemd/per-tree.conf`) and the compose override (`deploy/docker/compose.per-tree.yaml`)
say the same, and the services run as they give them: the tree service, two admission and two
preemption instances with that environment (`poolwise serve <service> --replicas 3`) against
all three nodes, four trees. Each admission instance holds two trees and decides only their
cycles; one killed with SIGKILL, its trees move to the other within a few seconds, which decides
them all; every gang is admitted once and `poolwise replay --verify` passes.

Slow (a cluster and five service processes): marked `cluster`, like test_replicated_log."""

from __future__ import annotations

import contextlib
import re
import signal
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
import yaml

from events.commands import HostAdd, PoolUpsert, TreeConfigure
from events.config import GangTimeoutOptions, TreeOptions
from services.sdk import Submitter
from services.tools.cli.args import InputError
from services.tools.cli.client import request
from tests.cluster.nodes import started_cluster
from tests.cluster.test_replicated_log import Serve, System, admissions_of, until, verify_system
from tests.leadership.test_per_tree import held, work

pytestmark = [pytest.mark.anyio, pytest.mark.nats, pytest.mark.cluster, pytest.mark.timeout(400)]

ROOT = Path(__file__).resolve().parents[2]
TREES = ("t1", "t2", "t3", "t4")


def drop_in_environment() -> dict[str, str]:
    """What `deploy/systemd/per-tree.conf` adds to the units' environment."""
    text = (ROOT / "deploy" / "systemd" / "per-tree.conf").read_text()
    assert "[Service]" in text
    return dict(line.split("=", 1)[1].split("=", 1) for line in text.splitlines() if line.startswith("Environment="))


def test_the_drop_in_and_the_compose_override_run_admission_and_preemption_per_tree() -> None:
    env = drop_in_environment()
    assert env == {"POOLWISE_LEASES": "per-tree"}
    docker = ROOT / "deploy" / "docker"
    base = yaml.safe_load((docker / "compose.yaml").read_text())["services"]
    override = yaml.safe_load((docker / "compose.per-tree.yaml").read_text())["services"]
    assert set(override) == {"admission", "preemption"}  # the tree service keeps one leader
    for name, extra in override.items():
        merged = {**base[name]["environment"], **extra["environment"]}  # compose merges the maps
        assert {k: merged[k] for k in env} == env
        assert extra["deploy"]["replicas"] == 2
        assert base[name]["command"] == ["serve", name, "--replicas", "3"]


async def _setup(url: str) -> None:
    async def configured(tree: str) -> bool:
        try:  # (the tree service's subscription reaches the other nodes a moment after it is ready)
            await request(url, "tree", TreeConfigure(tree=tree, options=TreeOptions(
                gang_timeout=GangTimeoutOptions(default=1000, limit=1000, jitter=0))))
        except InputError as exc:
            if "no responder" not in str(exc):
                raise
            return False
        return True

    for tree in TREES:
        await until(lambda t=tree: configured(t), "the tree service to answer on every node", 30.0)
        await request(url, "tree", PoolUpsert(tree=tree, path="/a"))
    await request(url, "tree", HostAdd(host="h1", resources={"cpu": 1_000_000}))


@pytest.fixture
def system(tmp_path: Path) -> Iterator[System]:
    cluster = started_cluster(tmp_path)
    services: list[Serve] = []
    try:
        urls, env = cluster.urls("service"), drop_in_environment()
        services = [Serve("tree", urls, tmp_path),
                    *(Serve(name, urls, tmp_path, label=label, env=env)
                      for name in ("admission", "preemption") for label in ("-a", "-b"))]
        anyio.run(until, lambda: all("deciding per tree" in s.err or s.ready() for s in services),
                  "the services to be ready on the cluster", 120.0)
        yield System(cluster, services, tmp_path)
    finally:
        for service in services:
            with contextlib.suppress(Exception):
                service.stop()
        cluster.close()


async def _enqueue(url: str, phase: str, per_tree: int) -> set[str]:
    names = {f"{phase}-{tree}-{i}" for tree in TREES for i in range(per_tree)}
    async with Submitter(url, source="cluster-test") as submitter:
        await submitter.enqueue_many([{"gang": name, "tree": name.split("-")[1], "pool": "/a", "count": 1,
                                       "resources": {"cpu": 1}} for name in sorted(names)])
    return names


async def _all_admitted(system: System, names: set[str]) -> None:
    async def admitted() -> bool:
        return names <= set(await admissions_of(system))

    await until(admitted, f"the {len(names)} gangs to be admitted", timeout=120.0)


async def test_two_instances_per_tree_on_the_cluster_and_one_killed(system: System) -> None:
    await _setup(system.cluster.urls("operator"))
    a, b = (s for s in system.services if s.name == "admission")

    def split() -> bool:
        return len(held(a.err)) == len(held(b.err)) == 2 and held(a.err) | held(b.err) == set(TREES)

    await until(split, "each admission instance to hold two trees", 60.0)
    submitter = system.cluster.urls("submitter")
    wanted = await _enqueue(submitter, "shared", 20)
    await _all_admitted(system, wanted)
    ours, theirs = held(a.err), held(b.err)
    before = len(work(a.err))
    b.proc.send_signal(signal.SIGKILL)
    b.proc.wait(10)
    # (how fast is measured, not asserted: tests never fail on timing)
    await until(lambda: held(a.err) == set(TREES), "the other instance to take the killed one's trees", 30.0)
    await until(lambda: len(work(a.err)) > before, "the survivor to say what it decided", 15.0)
    (gave, _), (took_back, read) = work(a.err)[before - 1:before + 1]
    # up to the takeover it decided no cycle of the killed one's trees (it read them from the log)
    assert {t: took_back.get(t, 0) for t in theirs} == {t: gave.get(t, 0) for t in theirs}, a.err
    assert all(read.get(t, 0) > 0 for t in theirs) and all(took_back.get(t, 0) > 0 for t in ours), a.err
    after = await _enqueue(submitter, "after", 20)
    await _all_admitted(system, after)
    found = await admissions_of(system)
    assert {gang: n for gang, n in found.items() if n != 1} == {}  # nothing decided twice
    assert wanted | after <= set(found)
    await anyio.sleep(1.0)  # (the last preemption passes published)
    await anyio.to_thread.run_sync(verify_system, system)
    for service in system.services:
        if service is not b:
            service.healthy()
    assert re.search(r"admission deciding per tree \(as [^)]*\): trees t1, t2, t3, t4", a.err)
