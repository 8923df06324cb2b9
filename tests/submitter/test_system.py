"""End to end on a real nats-server: the services run (admission's clock ticks by itself), a pool
is made through the tree service, gangs are submitted with the SDK and with `poolwise submit`,
and `explain` / `gangs` answer from the admission service's state."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from typer.testing import CliRunner

from events import GangAdmitted, InputRejected
from services.admission.commands import ExplainQuery, GangsQuery
from services.sdk import Submitter
from services.tools.cli.gangs_cmd import ask
from services.tools.cli.main import app
from tests.submitter.system import events, serve_system, setup_cluster, wait_until

pytestmark = pytest.mark.anyio


async def explained(url: str, gang: str) -> dict[str, Any]:
    data: dict[str, Any] = (await ask(url, ExplainQuery(gang=gang))).data
    return data


async def test_submit_wait_for_admission_and_explain(fresh_stream: str) -> None:
    url = fresh_stream
    async with anyio.create_task_group() as tg:
        await tg.start(serve_system, url)
        await setup_cluster(url)
        async with Submitter(url, source="sdk:e2e") as client:
            await client.enqueue(gang="g1", pool="/ATG", count=2, resources={"cpu": 2, "memory": 100}, job="j1")

            async def admitted() -> list[GangAdmitted]:
                return [e.event for e in await events(url)
                        if isinstance(e.event, GangAdmitted) and e.event.gang == "g1"]

            (decision,) = await wait_until(admitted, "GangAdmitted of g1")
            assert (decision.queue, decision.attempt) == ("pending", 1)

            async def g1_admitted() -> dict[str, Any] | None:
                data = await explained(url, "g1")
                return data if data["state"] == "admitted" else None

            data = await wait_until(g1_admitted, "admission to have read back the admission of g1")
            assert data["findings"][0]["check"] == "admitted"
            assert data["summary"].startswith("admitted at ")
            assert data["summary"].endswith(" UTC from queue pending of pool /ATG (attempt 1)")
            assert "tasks: 2 ready" in data["text"]

            # a second gang that does not fit: cpu 8 wanted, 6 of 10 left
            await client.enqueue(gang="g2", pool="/ATG", count=4, resources={"cpu": 2}, job="j2")

            async def g2_explained() -> dict[str, Any] | None:
                data = await explained(url, "g2")
                return data if data["state"] == "pending" and data["findings"][0]["check"] != "fits" else None

            data = await wait_until(g2_explained, "g2 pending, tried by a cycle")
            assert data["summary"] == "entitlement: needs cpu 8, pool /ATG has 6 of 10 left"
            assert data["findings"][0]["numbers"]["cpu"]["left"] == 6.0
            assert (data["queue"], data["position"], data["cycle_seq"] > 0) == ("pending", 1, True)

        rows = (await ask(url, GangsQuery(pool="/ATG"))).data["gangs"]
        assert {r["gang"]: r["state"] for r in rows} == {"g1": "admitted", "g2": "pending"}
        tg.cancel_scope.cancel()


async def test_enqueue_many_is_one_message_and_each_gang_is_decided_on_its_own(fresh_stream: str) -> None:
    url = fresh_stream
    async with anyio.create_task_group() as tg:
        await tg.start(serve_system, url)
        await setup_cluster(url)
        async with Submitter(url, source="sdk:e2e") as client:
            receipts = await client.enqueue_many(
                [{"gang": "m1", "pool": "/ATG", "count": 1, "resources": {"cpu": 1}},
                 {"gang": "m2", "pool": "/nowhere", "count": 1, "resources": {"cpu": 1}},
                 {"gang": "m3", "pool": "/ATG", "count": 2, "resources": {"cpu": 1}}])
            assert len({r.seq for r in receipts}) == 1  # one log message (a pack of inputs)
            again = await client.enqueue_many(
                [{"gang": "m1", "pool": "/ATG", "count": 1, "resources": {"cpu": 1}},
                 {"gang": "m2", "pool": "/nowhere", "count": 1, "resources": {"cpu": 1}},
                 {"gang": "m3", "pool": "/ATG", "count": 2, "resources": {"cpu": 1}}])
            assert all(r.duplicate for r in again) and [r.seq for r in again] == [r.seq for r in receipts]

            async def decided() -> dict[str, Any] | None:
                found = await events(url)
                refused = [e.event for e in found if isinstance(e.event, InputRejected)]
                admitted = {e.event.gang for e in found if isinstance(e.event, GangAdmitted)}
                return {"refused": refused, "admitted": admitted} if refused and len(admitted) == 2 else None

            seen = await wait_until(decided, "m2 refused, m1 and m3 admitted")
            (refusal,) = seen["refused"]
            assert (refusal.ref, refusal.rule) == ("m2", "pool_missing")
            assert (refusal.input_seq, refusal.input_part) == (receipts[0].seq, 1)
            assert seen["admitted"] == {"m1", "m3"}
        tg.cancel_scope.cancel()


def _env(url: str, data_dir: Path) -> dict[str, str]:
    return {**os.environ, "NATS_URL": url, "POOLWISE_DATA_DIR": str(data_dir)}


async def cli(url: str, data_dir: Path, *args: str) -> tuple[int, str]:
    """`poolwise ARGS` through typer's CliRunner (in a worker thread: the command runs its own loop)."""
    def invoke() -> tuple[int, str]:
        result = CliRunner().invoke(app, list(args), env=_env(url, data_dir))
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception
        return result.exit_code, result.stdout

    return await anyio.to_thread.run_sync(invoke)


async def poolwise(url: str, data_dir: Path, *args: str) -> tuple[int, str, str]:
    """`poolwise ARGS` as a person runs it (a process): exit code, stdout, stderr."""
    done = await anyio.run_process([sys.executable, "-m", "services.tools.cli.main", *args], check=False,
                                   env=_env(url, data_dir))
    return done.returncode, done.stdout.decode(), done.stderr.decode()


async def test_cli_submit_gangs_explain_task_cancel(fresh_stream: str, tmp_path: Path) -> None:
    url = fresh_stream
    async with anyio.create_task_group() as tg:
        await tg.start(serve_system, url)
        await setup_cluster(url)

        code, out = await cli(url, tmp_path, "submit", "--gang", "c1", "--pool", "/ATG", "--tasks", "2",
                              "--resources", "cpu=2,memory=100", "--priority", "5", "--wait", "20")
        assert code == 0, out
        assert "submitted gang c1: 2 member(s) to /ATG in tree default" in out
        assert "gang c1: admitted: admitted at " in out

        code, out = await cli(url, tmp_path, "submit", "--gang", "c1", "--pool", "/ATG", "--tasks", "2",
                              "--resources", "cpu=2,memory=100", "--priority", "5")
        assert (code, "these members were submitted before" in out) == (0, True)

        gangs_file = tmp_path / "gangs.yaml"
        gangs_file.write_text("gangs:\n"
                              "  - {gang: c2, pool: /ATG, tasks: 4, resources: cpu=2, job: big}\n"
                              "  - gang: c3\n    pool: /ATG\n    tasks: [{id: c3-only, resources: {cpu: 1}}]\n")
        code, out = await cli(url, tmp_path, "submit", "--file", str(gangs_file), "--wait", "20")
        assert code == 0, out
        assert "gang c2: pending: entitlement: needs cpu 8, pool /ATG has 6 of 10 left" in out
        assert "gang c3: pending: queue pending of /ATG: behind gang c2 (head of line)" in out

        code, out = await cli(url, tmp_path, "gangs")
        assert code == 0, out
        rows = [line for line in out.splitlines() if " /ATG " in line]
        lines = {g: line for g in ("c1", "c2", "c3") for line in rows if f" {g} " in line}
        assert (len(rows), set(lines)) == (3, {"c1", "c2", "c3"}), out
        assert "admitted" in lines["c1"] and "cpu=4,memory=200" in lines["c1"]
        assert "pending #1" in lines["c2"] and "big" in lines["c2"]
        assert "pending #2" in lines["c3"]

        code, out = await cli(url, tmp_path, "gangs", "--state", "admitted", "--json")
        assert [g["gang"] for g in json.loads(out)["gangs"]] == ["c1"]

        code, out = await cli(url, tmp_path, "explain", "c2")
        assert code == 0, out
        assert out.splitlines()[0].startswith("gang c2 (job big, tree default) is pending in queue pending of pool "
                                              "/ATG (position 1 of 2)")
        assert "  - entitlement: needs cpu 8, pool /ATG has 6 of 10 left" in out

        code, out = await cli(url, tmp_path, "task", "set", "c1/0", "running", "--gang", "c1")
        assert (code, "task c1/0 of gang c1: running" in out) == (0, True)

        async def c1_running() -> bool:
            return "tasks: 1 ready, 1 running" in (await explained(url, "c1"))["text"]

        await wait_until(c1_running, "c1/0 running")

        code, out = await cli(url, tmp_path, "gang", "cancel", "c3", "--reason", "not needed")
        assert code == 0, out

        async def c3_cancelled() -> dict[str, Any] | None:
            data = await explained(url, "c3")
            return data if data["state"] == "cancelled" else None

        data = await wait_until(c3_cancelled, "c3 cancelled")
        assert data["summary"].endswith("before it was admitted (reason: not needed)")

        # bad input, as a person sees it: one line on stderr, exit 2, no traceback
        for args, expected in [
            (("explain", "nope"), "error: no gang nope in tree default"),
            (("submit", "--gang", "x", "--pool", "/ATG", "--resources", "cpu=abc"),
             "error: --resources: amount of 'cpu' must be a number, got 'abc'"),
            (("gangs", "--state", "bogus"), "error: --state: unknown gang state 'bogus'"),
            (("task", "set", "c1/0", "runing", "--gang", "c1"), "error: state 'runing' is not a task state"),
            (("submit", "--gang", "x", "--pool", "/nowhere", "--resources", "cpu=1", "--wait", "20"),
             None),
        ]:
            code, out, err = await poolwise(url, tmp_path, *args)
            assert code == 2, (args, out, err)
            assert "Traceback" not in err
            if expected is not None:
                assert err.startswith(expected) and len(err.strip().splitlines()) == 1, err
            else:  # refused by admission: said on stdout, exit 2
                assert "gang x: rejected: refused at enqueue: gang x: pool /nowhere does not exist" in out
        tg.cancel_scope.cancel()


async def test_cli_with_no_server_is_one_line(tmp_path: Path) -> None:
    code, _, err = await poolwise("nats://127.0.0.1:1", tmp_path, "gangs")
    assert code == 2
    # one line, as every command that asks a service says it (client.request)
    (line,) = err.strip().splitlines()
    assert line.startswith("error: cannot reach NATS at nats://127.0.0.1:1")


async def test_the_same_gang_with_other_content_is_refused_as_a_conflict_not_a_duplicate(fresh_stream: str) -> None:
    """Issue 19: the same gang and member ids with other resources were a JetStream duplicate within
    its window (`duplicate=True`, the old resources kept, nothing said) and refused after it. Now
    the id covers the content: it is a new event, and admission names the conflict."""
    url = fresh_stream
    async with anyio.create_task_group() as tg:
        await tg.start(serve_system, url)
        await setup_cluster(url)
        async with Submitter(url) as client:
            first = await client.enqueue(gang="c1", pool="/ATG", count=2, resources={"cpu": 1})
            same = await client.enqueue(gang="c1", pool="/ATG", count=2, resources={"cpu": 1})
            other = await client.enqueue(gang="c1", pool="/ATG", count=2, resources={"cpu": 3})
        assert (same.duplicate, same.seq) == (True, first.seq)
        assert not other.duplicate and other.seq > first.seq and other.id != first.id

        async def refused() -> list[InputRejected]:
            return [e.event for e in await events(url) if isinstance(e.event, InputRejected) and e.event.ref == "c1"]

        (refusal,) = await wait_until(refused, "admission's refusal of the second c1")
        assert refusal.rule == "member_conflict", refusal.reason
        assert refusal.reason.startswith("gang c1: member c1/0 was enqueued before with other content "
                                         "(resources cpu 1 then, cpu 3 now)"), refusal.reason
        tg.cancel_scope.cancel()
