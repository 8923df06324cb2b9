"""deploy/nats/teams.conf on a real nats-server: each team submits to its own trees only, the
auditor reads the log and asks read-only queries but writes nothing, and every forbidden publish
and subscribe is refused by the server (its permissions violations are what is checked).

Team A signs in with a password, team B with an nkey made here (its public key given to the
server by `TEAM_B_NKEY`, its seed written to a file the client is given): nothing in the repo."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import nats
import nkeys
import pytest
from nats.js.api import AckPolicy, ConsumerConfig

from services.common.connection import Auth, connect_options
from services.common.jetstream import JetStreamLog
from services.sdk.client import PublishError, Submitter
from tests.service.natsconf import nats_server, refusals

PASSWORDS = {"SERVICE": "svc-pw", "OPERATOR": "op-pw", "AUDITOR": "audit-pw", "TEAM_A": "team-a-pw"}
DURABLES = ("tree", "admission", "preemption")  # the services' consumers, denied to the auditor

pytestmark = pytest.mark.nats


def user_nkey(where: Path) -> tuple[str, Path]:
    """A user nkey made now: its public key, and a file holding its seed."""
    seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
    public = nkeys.from_seed(bytearray(seed)).public_key.decode()
    path = where / "team-b.nk"
    path.write_bytes(seed + b"\n")
    path.chmod(0o600)
    return public, path


@pytest.fixture(scope="module")
def teams(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    """The server's port, and team B's seed file."""
    where = tmp_path_factory.mktemp("teams")
    public, seed_file = user_nkey(where)
    env = {**{f"{role}_PASSWORD_BCRYPT": pw for role, pw in PASSWORDS.items()}, "TEAM_B_NKEY": public}
    config = 'listen: 127.0.0.1:{port}\njetstream { store_dir: "{store}" }\ninclude "teams.conf"\n'
    with nats_server(where, config, env=env, include=["teams.conf"]) as port:
        yield port, seed_file


def url(port: int, user: str | None = None) -> str:
    if user is None:
        return f"nats://127.0.0.1:{port}"
    return f"nats://{user}:{PASSWORDS[user.upper().replace('-', '_')]}@127.0.0.1:{port}"


def test_each_team_submits_to_its_own_trees_only(teams: tuple[int, Path]) -> None:
    port, seed_file = teams

    async def main() -> None:
        async with await JetStreamLog.connect(url(port, "service")) as service:
            await service.ensure_stream()
        async with Submitter(url(port, "team-a"), source="sdk:team-a", tree="a", timeout=3) as team_a:
            assert (await team_a.enqueue(gang="a1", pool="/x", count=1, resources={"cpu": 1})).seq >= 1
            await team_a.enqueue(gang="a2", pool="/x", count=1, resources={"cpu": 1}, tree="a-batch")
            await team_a.task_state("a1/0", gang="a1", state="running", attempt=1)
            with pytest.raises(PublishError):  # refused by the server: no acknowledgement comes
                await team_a.enqueue(gang="a3", pool="/x", count=1, resources={"cpu": 1}, tree="b")
        async with Submitter(url(port, "team-a"), source="sdk:team-a", tree="a", timeout=60) as patient:
            # the server's refusal ends the call at once and is named: the 60 s deadline is not waited out
            refused = r"refused this user: .*[Pp]ermissions [Vv]iolation.*poolwise\.gang\.b"
            with pytest.raises(PublishError, match=refused):
                await patient.enqueue(gang="a4", pool="/x", count=1, resources={"cpu": 1}, tree="b")
            assert (await patient.enqueue(gang="a5", pool="/x", count=1, resources={"cpu": 1})).seq >= 1
        async with Submitter(url(port), source="sdk:team-b", tree="b", timeout=3, nkey=str(seed_file)) as team_b:
            assert (await team_b.enqueue(gang="b1", pool="/x", count=1, resources={"cpu": 1})).seq >= 1
            with pytest.raises(PublishError):
                await team_b.cancel("a1", tree="a")

        # what the server refuses, subject by subject
        forbidden_pub = ["poolwise.gang.b", "poolwise.task.b", "poolwise.gang.default", "poolwise.config.a",
                         "poolwise.decision.a.admission", "poolwise.rejected.a", "poolwise.clock.a", "poolwise.hosts",
                         "poolwise.cmd.tree.pool_upsert", "poolwise.cmd.tree.sql", "$JS.API.STREAM.PURGE.POOLWISE",
                         "$JS.API.CONSUMER.CREATE.POOLWISE", "$KV.poolwise_leases.tree", "$O.poolwise_snapshots.M.x"]
        forbidden_sub = ["poolwise.>", "poolwise.gang.a", "poolwise.decision.a.admission", "poolwise.cmd.>", "$JS.>"]
        allowed_pub = ["poolwise.cmd.admission.explain", "poolwise.cmd.admission.gangs"]
        expected = {("publish", s) for s in forbidden_pub} | {("subscribe", s) for s in forbidden_sub}
        got = await refusals(url(port, "team-a"), publish=[*forbidden_pub, *allowed_pub],
                             subscribe=[*forbidden_sub, "_INBOX.x"])
        assert got == expected
        forbidden_pub_b = [s.replace(".b", ".a") if s.endswith(".b") else s for s in forbidden_pub]
        got = await refusals(url(port), publish=[*forbidden_pub_b, *allowed_pub], subscribe=forbidden_sub,
                             **connect_options(Auth(nkey=str(seed_file))))
        assert got == {("publish", s) for s in forbidden_pub_b} | {("subscribe", s) for s in forbidden_sub}

        async with await JetStreamLog.connect(url(port, "service")) as service:
            stored = [item.subject for item in await service.read()]
        assert stored == ["poolwise.gang.a", "poolwise.gang.a-batch", "poolwise.task.a", "poolwise.gang.a",
                          "poolwise.gang.b"]

    async def bounded() -> None:
        with anyio.fail_after(90):
            await main()

    anyio.run(bounded)


def test_the_auditor_reads_the_log_and_writes_nothing(teams: tuple[int, Path]) -> None:
    port, _ = teams

    async def main() -> None:
        async with await JetStreamLog.connect(url(port, "service")) as service:
            await service.ensure_stream()
            for durable in DURABLES:  # the services' consumers, as they make them
                await service.jsm.add_consumer("POOLWISE", ConsumerConfig(
                    name=durable, durable_name=durable, ack_policy=AckPolicy.ALL, mem_storage=True))
            last = await service.last_seq()
        async with Submitter(url(port, "team-a"), source="sdk:team-a", tree="a", timeout=5) as team_a:
            await team_a.enqueue(gang="audited", pool="/x", count=1, resources={"cpu": 1})

        async with await JetStreamLog.connect(url(port, "auditor")) as auditor:  # reads: info, get, consumers
            assert await auditor.last_seq() == last + 1
            assert await auditor.last_seq("poolwise.gang.a") == last + 1
            assert [item.seq for item in await auditor.read(last + 1)] == [last + 1]
            assert len(await auditor.read(1)) == last + 1

        forbidden_pub = [
            "poolwise.gang.a", "poolwise.task.a", "poolwise.config.a", "poolwise.hosts", "poolwise.clock.a",
            "poolwise.decision.a.admission", "poolwise.rejected.a",
            "poolwise.cmd.tree.pool_upsert", "poolwise.cmd.tree.pool_delete", "poolwise.cmd.tree.tree_configure",
            "poolwise.cmd.tree.host_add", "poolwise.cmd.tree.host_remove",
            "$JS.API.STREAM.PURGE.POOLWISE", "$JS.API.STREAM.DELETE.POOLWISE", "$JS.API.STREAM.MSG.DELETE.POOLWISE",
            "$JS.API.STREAM.UPDATE.POOLWISE", "$JS.API.STREAM.CREATE.AUDIT", "$JS.API.STREAM.SNAPSHOT.POOLWISE",
            "$JS.API.CONSUMER.CREATE.POOLWISE", "$JS.API.CONSUMER.DURABLE.CREATE.POOLWISE.admission",
            *(f"$JS.API.CONSUMER.CREATE.POOLWISE.{durable}{filtered}" for durable in DURABLES
              for filtered in ("", ".poolwise.hosts")),
            "$JS.ACK.POOLWISE.admission.1.1.1.1.0", "$KV.poolwise_leases.admission", "$O.poolwise_snapshots.M.x",
            *(f"$JS.API.CONSUMER.{what}.POOLWISE.{durable}" for durable in DURABLES for what in ("MSG.NEXT", "DELETE")),
        ]
        forbidden_sub = ["poolwise.cmd.>", "poolwise.cmd.tree.sql", "$JS.API.>", ">"]
        queries = ["poolwise.cmd.tree.sql", "poolwise.cmd.tree.pool_list", "poolwise.cmd.tree.pool_get",
                   "poolwise.cmd.tree.tree_list", "poolwise.cmd.tree.host_list", "poolwise.cmd.admission.gangs",
                   "poolwise.cmd.admission.explain", "poolwise.cmd.preemption.list"]
        reads = ["_INBOX.x", "poolwise.gang.*", "poolwise.decision.*.*", "poolwise.hosts"]
        got = await refusals(url(port, "auditor"), publish=[*forbidden_pub, *queries],
                             subscribe=[*forbidden_sub, *reads])
        assert got == {("publish", s) for s in forbidden_pub} | {("subscribe", s) for s in forbidden_sub}

        # a consumer of its own named in the subject, a durable's name in the body: the subject's
        # name is taken (an unnamed create, refused above, would have updated the durable)
        nc = await nats.connect(url(port, "auditor"))
        try:
            body = {"stream_name": "POOLWISE", "config": {"name": "admission", "filter_subject": "poolwise.hosts",
                                                          "ack_policy": "all", "mem_storage": True}}
            reply = await nc.request("$JS.API.CONSUMER.CREATE.POOLWISE.mine", json.dumps(body).encode(), timeout=5)
            assert json.loads(reply.data)["name"] == "mine", reply.data
        finally:
            await nc.close()

        async with await JetStreamLog.connect(url(port, "service")) as service:  # nothing was lost or changed
            assert await service.last_seq() == last + 1
            for durable in DURABLES:
                info = await service.jsm.consumer_info("POOLWISE", durable)
                assert info.delivered.stream_seq == 0 and info.ack_floor.stream_seq == 0
                assert info.config.filter_subject is None and info.config.ack_policy == AckPolicy.ALL

    async def bounded() -> None:
        with anyio.fail_after(90):
            await main()

    anyio.run(bounded)


def test_replay_verify_runs_as_the_auditor(teams: tuple[int, Path]) -> None:
    """`poolwise replay --verify` reads the log with the auditor's permissions (no service ran
    here, so there is nothing to compare: it reads every message)."""
    port, _ = teams

    async def fill() -> int:
        async with await JetStreamLog.connect(url(port, "service")) as service:
            await service.ensure_stream()
        async with Submitter(url(port, "team-a"), source="sdk:team-a", tree="a", timeout=5) as team_a:
            await team_a.enqueue(gang="replayed", pool="/x", count=1, resources={"cpu": 1})
        async with await JetStreamLog.connect(url(port, "service")) as service:
            return await service.last_seq()

    last = anyio.run(fill)
    done = subprocess.run([sys.executable, "-m", "services.tools.cli.main", "replay", "--verify", "--json",
                           "--nats-url", url(port, "auditor")], capture_output=True, text=True, timeout=120)
    assert done.returncode in (0, 1), done.stderr
    assert "ermission" not in done.stderr
    assert json.loads(done.stdout)["messages"] == last


def test_the_auditors_commands_against_the_services(teams: tuple[int, Path], tmp_path: Path) -> None:
    """The three services run as the service role; the auditor's `poolwise` read commands answer,
    and a writing one is refused by the server (one line saying so, at once)."""
    port, _ = teams
    clean = {k: v for k, v in os.environ.items() if not k.startswith("NATS_") and k != "POOLWISE_DEBUG"}

    def poolwise(user: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "services.tools.cli.main", *args], cwd=tmp_path, text=True,
                              capture_output=True, timeout=timeout, env={**clean, "NATS_URL": url(port, user)})

    services = [subprocess.Popen([sys.executable, "-m", "services.tools.cli.main", "serve", name, "--data-dir",
                                  str(tmp_path / name)], cwd=tmp_path, env={**clean, "NATS_URL": url(port, "service")},
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                for name in ("tree", "admission", "preemption")]
    try:
        deadline = time.monotonic() + 90
        while True:  # until each service answers the auditor
            asked = [poolwise("auditor", *args, timeout=30) for args in (["tree", "list"], ["gangs"], ["preemptions"])]
            if all(done.returncode == 0 for done in asked):
                break
            assert all(service.poll() is None for service in services)
            assert time.monotonic() < deadline, [done.stderr for done in asked]
            time.sleep(1)
        assert poolwise("operator", "tree", "configure", "a", "--resources", "cpu").returncode in (0, 2)
        for args in (["sql", "SELECT count(*) AS n FROM event_log"], ["pool", "list", "--tree", "a"],
                     ["host", "list"], ["explain", "no-such-gang"]):
            done = poolwise("auditor", *args)
            assert done.returncode in (0, 2) and "did not answer" not in done.stderr, (args, done.stderr)
        started = time.monotonic()
        refused = poolwise("auditor", "pool", "create", "/x", "--tree", "a", "--reservation", "cpu=1")
        assert refused.returncode == 2, refused
        assert "refused this user: nats: permissions violation for publish to" in refused.stderr, refused.stderr
        assert "poolwise.cmd.tree.pool_upsert" in refused.stderr and len(refused.stderr.splitlines()) == 1
        assert "audit-pw" not in refused.stderr and time.monotonic() - started < 9  # not the request's 10 s
    finally:
        for service in services:
            service.terminate()
        for service in services:
            try:
                service.wait(timeout=20)
            except subprocess.TimeoutExpired:
                service.kill()
                service.wait(timeout=10)
