"""End to end on a real nats-server: the tree, admission (its clock on) and preemption services on
JetStream; inputs published as events; `poolwise preemptions` asks the preemption service over
NATS request/reply (`poolwise.cmd.preemption.list`) and shows what it asked for and why."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest
from typer.testing import CliRunner

from events import Envelope, Event, GangEnqueued, TaskSpec, TaskStateChanged, TreeOptions, at_seconds, derived_id
from events.commands import HostAdd, PoolUpsert, TreeConfigure
from events.config import GangTimeoutOptions, PoolConfig, PreemptionOptions
from services.common.jetstream import JetStreamLog
from services.common.natsserver import write_url_file
from services.launcher import start_services
from services.preemption.commands import PreemptionList
from services.tools.cli.client import ServiceError, request
from services.tools.cli.main import app

T = TypeVar("T")
WAIT = 30.0  # an upper bound for the system to settle, never a measurement


async def eventually(probe: Callable[[], Awaitable[T | None]]) -> T:
    with anyio.fail_after(WAIT):
        while True:
            found = await probe()
            if found is not None:
                return found
            await anyio.sleep(0.05)


async def publish(log: JetStreamLog, *events: Event) -> None:
    await log.append([Envelope(id=derived_id("test", e.model_dump_json()), time=at_seconds(time.time()),
                               source="test", event=e) for e in events])


async def listed(url: str, **filters: Any) -> list[dict[str, Any]]:
    reply = await request(url, "preemption", PreemptionList(**filters))
    found: list[dict[str, Any]] = reply.data["preemptions"]
    return found


def cli(data_dir: Path, *args: str) -> Any:
    result = CliRunner().invoke(app, ["preemptions", "--data-dir", str(data_dir), *args])
    assert result.exit_code == 0, result.output
    return result


@pytest.mark.anyio
async def test_preemptions_listed_with_reasons_requested_then_completed(fresh_stream: str, tmp_path: Path) -> None:
    url = fresh_stream
    write_url_file(tmp_path, url)
    log = await JetStreamLog.connect(url)  # the services' stream, as `poolwise up` runs them
    try:
        await _story(url, log, tmp_path)
    finally:
        await log.close()


async def _story(url: str, log: JetStreamLog, tmp_path: Path) -> None:
    async with anyio.create_task_group() as tg:
        await start_services(tg, log, ["tree", "admission", "preemption"], None)
        await request(url, "tree", TreeConfigure(options=TreeOptions(
            resources=["cpu"], preemption=PreemptionOptions(grace=0),
            gang_timeout=GangTimeoutOptions(default=1000, limit=1000, jitter=0))))
        await request(url, "tree", HostAdd(host="h1", resources={"cpu": 10}))
        await request(url, "tree", PoolUpsert(path="/a"))
        await request(url, "tree", PoolUpsert(path="/b", config=PoolConfig(reservation={"cpu": 3})))
        await publish(log, *[GangEnqueued(gang=f"a{i}", pool="/a", job="ja", size=1,
                                          tasks=[TaskSpec(id=f"a{i}/0", resources={"cpu": 1})]) for i in range(10)])

        async def all_admitted() -> bool | None:
            stored = await log.read(1)
            return True if sum(s.data.count(b'"GangAdmitted"') for s in stored) == 10 else None  # packs too

        await eventually(all_admitted)
        await publish(log, *[TaskStateChanged(gang=f"a{i}", task=f"a{i}/0", state="running") for i in range(10)])
        await publish(log, GangEnqueued(gang="b0", pool="/b", job="jb", size=1,
                                        tasks=[TaskSpec(id="b0/0", resources={"cpu": 3})]))

        async def three_requested() -> list[dict[str, Any]] | None:
            found = await listed(url)
            return found if len(found) == 3 else None

        requested = await eventually(three_requested)
        assert {(p["pool"], p["state"]) for p in requested} == {("/a", "requested")}
        assert all(p["reason"].startswith("over non-slack entitlement since ") for p in requested)

        shown = await anyio.to_thread.run_sync(cli, tmp_path, "--json")
        data = json.loads(shown.output)
        assert [p["gang"] for p in data["preemptions"]] == [p["gang"] for p in requested]
        assert {p["tasks"][0] for p in data["preemptions"]} == {p["tasks"][0] for p in requested}

        await publish(log, *[TaskStateChanged(gang=p["gang"], task=p["tasks"][0], state="preempted")
                             for p in requested])

        async def all_completed() -> list[dict[str, Any]] | None:
            found = await listed(url, state="completed")
            return found if len(found) == 3 else None

        completed = await eventually(all_completed)
        assert {p["outcome"] for p in completed} == {"preempted"}

        table = (await anyio.to_thread.run_sync(cli, tmp_path, "--pool", "/a")).output
        assert "completed" in table and "preempted" in table and "over non-slack" in table
        assert "no preemptions" in (await anyio.to_thread.run_sync(cli, tmp_path, "--pool", "/b")).output
        with pytest.raises(ServiceError) as refused:
            await request(url, "preemption", PreemptionList.model_construct(op="purge"))  # type: ignore[arg-type]
        assert refused.value.rule == "unknown_op"
        tg.cancel_scope.cancel()
