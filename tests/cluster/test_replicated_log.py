"""The replicated log for real (issue 19): three nats-servers from `deploy/nats/cluster-n*.conf` on
loopback, the three services as `poolwise serve <service> --replicas 3` against all three nodes
(as the systemd units run them), a burst of gangs through the SDK while a node is killed
(SIGKILL) or the stream's leader is stopped, then brought back. Every gang is decided once,
`poolwise replay --verify` passes, the stream and the lease bucket report 3 replicas, the node
back catches up, and no service process died or printed a traceback.

Slow (a cluster and three service processes; about a minute): marked `cluster`, so
`pytest -m "not cluster"` skips them; `just cluster` runs them alone."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from events import GangAdmitted, decode_all
from events.commands import HostAdd, PoolUpsert, TreeConfigure
from events.config import GangTimeoutOptions, TreeOptions
from services.common.connection import connect_nats
from services.common.jetstream import JetStreamLog
from services.common.lease_bucket import open_leases
from services.common.replicas import ReplicasError, prepare, stream_replicas
from services.sdk import Submitter
from services.sdk.client import PublishError
from services.tools.cli.args import InputError
from services.tools.cli.client import request
from tests.cli.helpers import POOLWISE, clean_env, run
from tests.cluster.nodes import WAIT, Cluster, Node, started_cluster

pytestmark = [pytest.mark.anyio, pytest.mark.nats, pytest.mark.cluster, pytest.mark.timeout(400)]

SERVICES = ("tree", "admission", "preemption")
CHUNK = 25  # gangs per SDK call
CHUNKS = 12  # calls per burst


class Serve:
    """`poolwise serve NAME --replicas 3` against every node (NATS_URL, comma-separated); `label`
    names an instance among several of one service (its stderr, its data dir), `env` more of the
    environment (tests/cluster/test_per_tree_cluster.py)."""

    def __init__(self, name: str, urls: str, where: Path, *, label: str = "",
                 env: dict[str, str] | None = None) -> None:
        self.name = name
        self.err_path = where / f"serve-{name}{label}.err"
        with self.err_path.open("wb") as err:
            # POOLWISE_DEBUG: a service that fails leaves its traceback in the test's report
            self.proc = subprocess.Popen(
                [POOLWISE, "serve", name, "--replicas", "3", "--data-dir", str(where / f"data{label}")],
                env=clean_env(NATS_URL=urls, POOLWISE_DEBUG="1", **(env or {})), cwd=where,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)

    @property
    def err(self) -> str:
        return self.err_path.read_text()

    def ready(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"serve {self.name} exited with {self.proc.returncode}: {self.err}")
        return "ready on" in self.err

    def healthy(self) -> None:
        assert self.proc.poll() is None, f"serve {self.name} exited with {self.proc.returncode}: {self.err}"
        assert "Traceback" not in self.err and "internal error" not in self.err, self.err

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(WAIT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(WAIT)
            raise AssertionError(f"serve {self.name} did not stop on SIGTERM") from None


@dataclass
class System:
    cluster: Cluster
    services: list[Serve]
    where: Path

    def healthy(self) -> None:
        for service in self.services:
            service.healthy()


async def until(check: Callable[[], Any], what: str, timeout: float = WAIT) -> Any:
    """Poll `check` (sync or async) until it gives something true; fail after `timeout` s."""
    with anyio.move_on_after(timeout):
        while True:
            found = check()
            if hasattr(found, "__await__"):
                found = await found
            if found:
                return found
            await anyio.sleep(0.2)
    raise AssertionError(f"gave up waiting for {what} after {timeout:g} s")


async def _setup(url: str) -> None:
    configure = TreeConfigure(options=TreeOptions(gang_timeout=GangTimeoutOptions(default=1000, limit=1000, jitter=0)))

    async def configured() -> bool:
        # a service's request subscription reaches the other nodes through the routes a moment
        # after it says it is ready: asked through another node just then, nobody answers yet
        try:
            await request(url, "tree", configure)
        except InputError as exc:
            if "no responder" not in str(exc):
                raise
            return False
        return True

    await until(configured, "the tree service's requests to reach every node", 30.0)
    await request(url, "tree", HostAdd(host="h1", resources={"cpu": 1_000_000}))
    await request(url, "tree", PoolUpsert(path="/a"))


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    where = tmp_path_factory.mktemp("cluster")
    cluster = started_cluster(where)
    services: list[Serve] = []
    try:
        services = [Serve(name, cluster.urls("service"), where) for name in SERVICES]
        anyio.run(until, lambda: all(s.ready() for s in services), "the services to be ready on the cluster", 120.0)
        anyio.run(_setup, cluster.urls("operator"))
        yield System(cluster, services, where)
        for service in services:
            service.healthy()
            assert service.stop() == 0, service.err
    finally:
        for service in services:
            with contextlib.suppress(Exception):
                service.stop()
        cluster.close()


async def _cluster_of(system: System, stream: str = "POOLWISE") -> dict[str, Any]:
    nc = await connect_nats(system.cluster.urls("service"))
    try:
        return await stream_replicas(nc, stream)
    finally:
        await nc.close()


async def _burst(system: System, phase: str, midway: Callable[[], None]) -> set[str]:
    """CHUNKS calls of CHUNK gangs through the SDK (connected to every node), `midway()` (in a
    thread) after a third of them. A call cut short by the node going (`PublishError`) is made
    again, as the SDK says to: the same gangs, stored once."""
    names: set[str] = set()
    async with Submitter(system.cluster.urls("submitter"), source="cluster-test") as submitter:
        for chunk in range(CHUNKS):
            if chunk == CHUNKS // 3:
                await anyio.to_thread.run_sync(midway)
            gangs = [{"gang": f"{phase}-{chunk}-{i}", "pool": "/a", "count": 1, "resources": {"cpu": 1}}
                     for i in range(CHUNK)]
            with anyio.fail_after(WAIT * 2):
                while True:
                    try:
                        await submitter.enqueue_many(gangs)
                        break
                    except PublishError:
                        await anyio.sleep(0.2)
            names.update(g["gang"] for g in gangs)
    return names


async def admissions_of(system: System) -> Counter[str]:
    log = await JetStreamLog.connect(system.cluster.urls("service"))
    try:
        found: Counter[str] = Counter()
        for stored in await log.read():
            if b'"GangAdmitted"' in stored.data:
                for envelope in decode_all(stored.data):  # one event, or a pack of decisions
                    if isinstance(envelope.event, GangAdmitted):
                        found[envelope.event.gang] += 1
        return found
    finally:
        await log.close()


async def _decided_once(system: System, gangs: set[str]) -> None:
    async def all_admitted() -> bool:
        return gangs <= set(await admissions_of(system))

    await until(all_admitted, f"the {len(gangs)} gangs to be admitted", timeout=120.0)
    found = await admissions_of(system)
    assert {gang: n for gang, n in found.items() if n != 1} == {}  # every gang decided once, in every phase


async def _caught_up(system: System, node: Node) -> None:
    """The stream (and the lease bucket) report 3 replicas, `node` among them and current."""
    async def current() -> bool:
        for stream in ("POOLWISE", "KV_poolwise_leases"):
            info = await _cluster_of(system, stream)
            assert info["replicas"] == 3, info
            if info["leader"] == node.name:
                continue
            peer = next((p for p in info["peers"] if p["name"] == node.name), None)
            if peer is None or not peer.get("current") or peer.get("lag", 0):
                return False
        return True

    await until(current, f"{node.name} to catch up with the stream", timeout=120.0)


async def _settled(system: System) -> None:
    """Until every service has handled the whole log (its durable consumer has nothing pending or
    unacknowledged) and the log stopped growing: a service whose consumer's leader was on the node
    that went resumes once the cluster elects another (seconds), and only then publishes what it
    decided meanwhile; `replay --verify` before that would find its decisions missing."""
    log = await JetStreamLog.connect(system.cluster.urls("service"))
    last: list[int] = []

    async def quiet() -> bool:
        try:
            for durable in SERVICES:
                info = await log.jsm.consumer_info(log.stream, durable)
                if info.num_pending or info.num_ack_pending:
                    return False
            last.append(await log.last_seq())
        except Exception:  # an election under way: ask again
            return False
        return len(last) >= 6 and last[-1] == last[-6]

    try:
        await until(quiet, "the services to handle the whole log", timeout=120.0)
    finally:
        await log.close()


def verify_system(system: System, patience: float = 60.0) -> None:
    """`replay --verify` passes. A decision re-derived but not yet in the log (`missing`) may still
    be on its way (a service's append retried across the election, on a loaded machine for longer
    than `_settled`'s quiet second): asked again for up to `patience` s, while every finding is
    that; anything else fails at once, and so does a decision still missing after that."""
    deadline = time.monotonic() + patience
    while True:
        report = run("replay", "--verify", "--json", "--nats-url", system.cluster.urls("service"),
                     cwd=system.where, timeout=180.0)
        found = report.json() if report.out.strip() else {}
        findings = found.get("findings") or [{}]
        if report.code == 0 and found.get("ok"):
            return
        if time.monotonic() > deadline or any(f.get("kind") != "missing" for f in findings):
            raise AssertionError(report.out + report.err)
        time.sleep(2.0)


async def test_a_node_killed_mid_burst_and_brought_back(system: System) -> None:
    info = await _cluster_of(system)
    assert info["replicas"] == 3 and len(info["peers"]) == 2, info  # created R3 by `serve --replicas 3`
    victim = next(node for node in system.cluster.nodes if node.name != info["leader"])

    gangs = await _burst(system, "killed", lambda: victim.stop(signal.SIGKILL))
    await _decided_once(system, gangs)
    system.healthy()

    system.cluster.start(victim)  # on its store as it was left
    await _caught_up(system, victim)
    await _settled(system)
    await anyio.to_thread.run_sync(verify_system, system)
    system.healthy()


async def test_the_streams_leader_stopped_mid_burst(system: System) -> None:
    leader = system.cluster.node((await until(lambda: _leader(system), "the stream to have a leader"))["leader"])
    gangs = await _burst(system, "leader", leader.stop)

    async def new_leader() -> dict[str, Any] | None:
        info = await _leader(system)
        return info if info and info["leader"] != leader.name else None

    await until(new_leader, "another node to lead the stream")
    await _decided_once(system, gangs)
    system.healthy()

    system.cluster.start(leader)
    await _caught_up(system, leader)
    await _settled(system)
    await anyio.to_thread.run_sync(verify_system, system)
    system.healthy()


async def _leader(system: System) -> dict[str, Any] | None:
    info = await _cluster_of(system)
    return info if info["leader"] else None


async def test_a_stream_with_fewer_replicas_is_raised_and_said(system: System) -> None:
    """An R1 log found on the cluster (made before `--replicas`, or by hand) is raised to the
    replicas asked, with one line saying so; never used as it is. More than the cluster's three
    servers: a `ReplicasError`."""
    # subjects under poolwise.> (what the service role may publish), apart from the log's
    log = await JetStreamLog.connect(system.cluster.urls("service"), stream="RAISED", prefix="poolwise.raised")
    try:
        await log.ensure_stream(replicas=1)
        await log.append_raw("poolwise.raised.hosts", b"{}", msg_id="one")
        said: list[str] = []
        await prepare(log, 3, said.append)
        assert said == ["poolwise: stream RAISED had 1 replica; raised to 3 (--replicas 3): the new replicas "
                        "copy it from the leader in the background"]
        info = await until(lambda: _current(log), "the raised stream's replicas to be current")
        assert info["replicas"] == 3 and len(info["peers"]) == 2, info
        said.clear()
        await prepare(log, 3, said.append)  # as asked already: nothing to do, nothing said
        await prepare(log, 1, said.append)  # more than asked: kept
        assert said == [] and (await stream_replicas(log.nc, "RAISED"))["replicas"] == 3
        with pytest.raises(ReplicasError, match=r"^--replicas 5: NATS cannot keep 5 replicas of the stream RAISED"):
            await prepare(log, 5, said.append)
        assert await log.last_seq() == 1  # the history kept throughout
    finally:
        with contextlib.suppress(Exception):
            await log.delete_stream()
        await log.close()


async def _current(log: JetStreamLog) -> dict[str, Any] | None:
    info = await stream_replicas(log.nc, log.stream)
    whole = info["leader"] and len(info["peers"]) == 2 and all(p.get("current") for p in info["peers"])
    return info if whole else None


async def test_up_runs_every_service_on_the_cluster(tmp_path: Path) -> None:
    """`poolwise up --nats-url <every node> --replicas 3` (deploy/README.md's one-machine run): up
    prepares the stream and the buckets with 3 replicas (the lease bucket an older deployment left
    R1 is raised, with a line saying so), then runs each service in a process of its own against
    the cluster (each given --replicas 3 too). Then a bucket found with fewer replicas than the
    stream is raised to the stream's, even with no --replicas."""
    cluster = started_cluster(tmp_path)
    err_path = tmp_path / "up.err"
    try:
        nc = await connect_nats(cluster.urls("service"))
        try:
            await _settled_cluster(lambda: open_leases(nc, replicas=1))  # as before --replicas existed
        finally:
            await nc.close()
        with err_path.open("wb") as err:
            up = subprocess.Popen(
                [POOLWISE, "up", "--replicas", "3", "--data-dir", str(tmp_path / "data")],
                env=clean_env(NATS_URL=cluster.urls("service"), POOLWISE_DEBUG="1"), cwd=tmp_path,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
        try:
            def ready() -> bool:
                assert up.poll() is None, err_path.read_text()
                return "tree, admission, preemption ready on" in err_path.read_text()

            await until(ready, "poolwise up to be ready on the cluster", timeout=120.0)
            await _setup(cluster.urls("operator"))
            system = System(cluster, [], tmp_path)
            gangs = {f"up-{i}" for i in range(40)}
            async with Submitter(cluster.urls("submitter"), source="cluster-test") as submitter:
                await submitter.enqueue_many([{"gang": g, "pool": "/a", "count": 1, "resources": {"cpu": 1}}
                                              for g in sorted(gangs)])
            await _decided_once(system, gangs)
            for stream in ("POOLWISE", "KV_poolwise_leases", "OBJ_poolwise_snapshots"):
                assert (await _cluster_of(system, stream))["replicas"] == 3, stream
        finally:
            up.send_signal(signal.SIGTERM)
            code = up.wait(WAIT)
        text = err_path.read_text()
        assert code == 0 and "Traceback" not in text, text
        raised = [line for line in text.splitlines() if "raised to" in line]
        assert raised == ["poolwise: lease bucket poolwise_leases had 1 replica; raised to 3 (--replicas 3): the new "
                          "replicas copy it from the leader in the background"], text

        log = await JetStreamLog.connect(cluster.urls("service"))
        try:
            await log.jsm.delete_stream("KV_poolwise_leases")
            await open_leases(log.nc, replicas=1)
            said: list[str] = []
            await prepare(log, 1, said.append)  # no --replicas: the buckets follow the R3 stream
            assert said == ["poolwise: lease bucket poolwise_leases had 1 replica; raised to 3 (as the stream "
                            "POOLWISE): the new replicas copy it from the leader in the background"]
        finally:
            await log.close()
    finally:
        cluster.close()


async def _settled_cluster(make: Callable[[], Any]) -> Any:
    """`await make()`, again while a cluster just started has no JetStream leader yet."""
    async def attempt() -> Any:
        try:
            return await make()
        except Exception:
            return None

    return await until(attempt, "the cluster's JetStream to answer")
