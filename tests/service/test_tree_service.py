"""The tree service shell on both logs (MemoryLog and JetStream on a real nats-server): commands,
refusals and their records, optimistic concurrency between two instances, malformed config
messages, and the projection."""

from __future__ import annotations

import gc
import json
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import nats
import pytest

from events import (
    Envelope,
    HostRegistered,
    InputRejected,
    PoolConfig,
    PoolConfigChanged,
    PoolDeleted,
    at_seconds,
    encode,
    subjects,
)
from events.commands import (
    HostAdd,
    HostRemove,
    PoolDelete,
    PoolGet,
    PoolList,
    PoolUpsert,
    Reply,
    TreeConfigure,
)
from events.config import TreeOptions
from services.common import metrics
from services.common.jetstream import JetStreamLog
from services.common.log import EventLog
from services.common.memlog import MemoryLog
from services.tools.replay import verify
from services.tree.domain.state import TreeState
from services.tree.service import TreeService, serve_tree
from tests.service.helpers import WAIT, Gate, RacingLog, envelopes, types_after, wait_until

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["memory", pytest.param("jetstream", marks=pytest.mark.nats)])
def log(request: pytest.FixtureRequest) -> EventLog:
    if request.param == "memory":
        return MemoryLog()
    result: EventLog = request.getfixturevalue("jetstream_log")
    return result


async def second_view(log: EventLog) -> AsyncIterator[EventLog]:
    """Another connection to the same log (JetStream), or the same log (memory)."""
    if isinstance(log, JetStreamLog):
        url = log.nc.connected_url.geturl()  # type: ignore[union-attr]
        other = await JetStreamLog.connect(url, stream=log.stream, prefix=log.prefix)
        try:
            yield other
        finally:
            await other.close()
    else:
        yield log


def upsert(path: str, require: str = "any", **config: object) -> PoolUpsert:
    return PoolUpsert(path=path, config=PoolConfig.model_validate(config), require=require)  # type: ignore[arg-type]


async def folded(log: EventLog) -> TreeState:
    """The tree as a fresh fold of the whole log says it is."""
    service = TreeService(log)
    await service.catch_up()
    return service.state


# --- create, update, delete -------------------------------------------------------------------------


async def test_create_update_delete_through_handle(log: EventLog) -> None:
    tree = TreeService(log)
    created = await tree.handle(upsert("/a", "new", reservation={"cpu": 10}))
    assert created.ok and created.seq == 1 and created.data == {"ref": "/a", "changed": True}
    updated = await tree.handle(upsert("/a", "existing", share=2))
    assert updated.ok and updated.seq == 2
    same = await tree.handle(upsert("/a", "existing", share=2))
    assert same.ok and same.seq is None and same.data["changed"] is False
    child = await tree.handle(upsert("/a/b", "new", reservation={"cpu": 4}))
    assert child.ok
    deleted = await tree.handle(PoolDelete(path="/a/b"))
    assert deleted.ok

    events = [env.event for _, env in await envelopes(log)]
    assert [e.type for e in events] == ["PoolConfigChanged", "PoolConfigChanged", "PoolConfigChanged", "PoolDeleted"]
    first, second = events[0], events[1]
    assert isinstance(first, PoolConfigChanged) and first.created and first.config.reservation == {"cpu": 10}
    assert isinstance(second, PoolConfigChanged) and not second.created
    assert second.config.share == 2 and second.config.reservation == {"cpu": 10}  # merged: the rest kept
    assert isinstance(events[3], PoolDeleted) and events[3].path == "/a/b"

    got = await tree.handle(PoolGet(path="/a"))
    assert got.ok and got.data["path"] == "/a"
    gone = await tree.handle(PoolGet(path="/a/b"))
    assert not gone.ok and gone.error is not None and gone.error.rule == "not_found"
    state = await folded(log)
    assert state.tree().pool("/a") is not None and state.tree().pool("/a/b") is None


async def test_hosts_and_trees_through_handle(log: EventLog) -> None:
    tree = TreeService(log)
    assert (await tree.handle(TreeConfigure(tree="t2", options=TreeOptions(resources=["cpu", "gpu"])))).ok
    assert (await tree.handle(HostAdd(host="h1", resources={"cpu": 64}))).ok
    assert (await tree.handle(HostAdd(host="h1", resources={"cpu": 64}))).data["changed"] is False
    assert (await tree.handle(HostRemove(host="h1"))).ok
    assert await types_after(log, 0) == ["TreeConfigured", "HostRegistered", "HostRemoved"]
    listed = await tree.handle(PoolList())
    assert {t["tree"] for t in listed.data["trees"]} == {"default", "t2"}


# --- refusals ---------------------------------------------------------------------------------------

SETUP = [upsert("/p", "new", reservation={"cpu": 100}, limit={"cpu": 200}), upsert("/p/c", "new",
                                                                                  reservation={"cpu": 10})]
REFUSED: list[tuple[object, str]] = [
    (upsert("/p", "new"), "exists"),
    (upsert("/nope", "existing", share=2), "not_found"),
    (upsert("/x/y", "new"), "parent_missing"),
    (upsert("relative"), "path_relative"),
    (upsert("/p/d", "new", reservation={"cpu": 95}), "children_reservation_exceeds_parent"),
    (upsert("/p/e", "new", limit={"cpu": 500}), "limit_exceeds_parent"),
    (upsert("/p/f", reservation={"cpu": -1}), "negative_value"),
    (upsert("/p/g", reservation={"tpu": 1}), "unknown_kind"),
    (PoolDelete(path="/p"), "delete_has_children"),
    (PoolDelete(path="/"), "path_root"),
    (PoolUpsert(tree="bad.tree", path="/a"), "tree_name"),
    (PoolUpsert(path="/p", config=PoolConfig(share=3), expected_version=1), "stale"),
    (HostRemove(host="ghost"), "host_missing"),
]


@pytest.mark.parametrize(("command", "rule"), REFUSED, ids=[rule for _, rule in REFUSED])
async def test_every_refusal_is_answered_and_recorded_once(log: EventLog, command: object, rule: str) -> None:
    tree = TreeService(log)
    for item in SETUP:
        assert (await tree.handle(item)).ok
    before = await log.last_seq()
    reply = await tree.handle(command)  # type: ignore[arg-type]
    assert not reply.ok and reply.error is not None and reply.error.rule == rule, reply
    assert reply.error.message
    added = await envelopes(log, before)
    assert len(added) == 1 and await log.last_seq() == before + 1  # one record, nothing else
    record = added[0][1]
    assert isinstance(record.event, InputRejected) and record.source == "tree"
    assert record.event.rule == rule and record.event.reason == reply.error.message
    assert record.event.field == reply.error.field and record.basis == before
    assert record.event.input == command.model_dump_json()  # type: ignore[attr-defined]
    again = await tree.handle(command)  # type: ignore[arg-type]
    assert again.error == reply.error and await log.last_seq() == before + 1  # the same refusal: recorded once
    assert verify(await log.read(1)).ok  # replay judges the recorded refusal the same way


@pytest.mark.parametrize(("op", "data", "rule"), [
    ("pool_upsert", b"{not json", "invalid_command"),
    ("pool_upsert", b'{"path": "/a", "config": {"share": "lots"}}', "invalid_command"),
    ("pool_delete", b'{"tree": "default"}', "invalid_command"),
    ("pool_explode", b'{"tree": "default", "path": "/a"}', "unknown_command"),
])
async def test_invalid_requests_are_refused_and_recorded(log: EventLog, op: str, data: bytes, rule: str) -> None:
    tree = TreeService(log)
    reply = await tree.handle_raw(op, data)
    assert not reply.ok and reply.error is not None and reply.error.rule == rule
    (record,) = [env for _, env in await envelopes(log)]
    assert isinstance(record.event, InputRejected) and record.event.rule == rule
    assert record.event.input == data.decode() and record.event.input_type == op
    report = verify(await log.read(1))
    assert report.ok and report.counts["InputRejected"].matched == 1


async def test_invalid_queries_are_answered_not_recorded(log: EventLog) -> None:
    tree = TreeService(log)
    reply = await tree.handle_raw("pool_get", b"{}")
    assert not reply.ok and reply.error is not None and reply.error.rule == "invalid_command"
    assert reply.error.field == "path"
    assert await log.last_seq() == 0


# --- optimistic concurrency -------------------------------------------------------------------------


async def race(log: EventLog, first: object, second: object, *, setup: list[object]) -> tuple[Reply, Reply, Gate]:
    """Two tree service instances, each on its own connection, decide `first` and `second` on the
    same view; the gate lets them append only once both have decided."""
    base = TreeService(log)
    for item in setup:
        assert (await base.handle(item)).ok  # type: ignore[arg-type]
    gate = Gate(writers=2)
    replies: dict[str, Reply] = {}
    async for other in second_view(log):
        one, two = TreeService(RacingLog(log, gate)), TreeService(RacingLog(other, gate))

        async def run(name: str, service: TreeService, command: object) -> None:
            replies[name] = await service.handle(command)  # type: ignore[arg-type]

        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(run, "first", one, first)
                tg.start_soon(run, "second", two, second)
    return replies["first"], replies["second"], gate


async def test_racing_children_keep_the_reservation_rule(log: EventLog) -> None:
    setup: list[object] = [upsert("/p", "new", reservation={"cpu": 100})]
    a, b, gate = await race(log, upsert("/p/x", "new", reservation={"cpu": 60}),
                            upsert("/p/y", "new", reservation={"cpu": 60}), setup=setup)
    assert gate.stale == 1  # the server refused the stale writer once
    assert sorted([a.ok, b.ok]) == [False, True]
    refused = a if not a.ok else b
    assert refused.error is not None and refused.error.rule == "children_reservation_exceeds_parent"
    events = [env.event for _, env in await envelopes(log)]
    changes = [e for e in events if isinstance(e, PoolConfigChanged) and e.path in ("/p/x", "/p/y")]
    rejections = [e for e in events if isinstance(e, InputRejected)]
    assert len(changes) == 1 and len(rejections) == 1  # one applied once, one refused once
    assert rejections[0].rule == "children_reservation_exceeds_parent"
    tree = (await folded(log)).tree()
    children = [pool for pool in (tree.pool("/p/x"), tree.pool("/p/y")) if pool is not None]
    assert sum((pool.config.reservation or {}).get("cpu", 0.0) for pool in children) == 60
    assert verify(await log.read(1)).ok  # the refusal re-judged at its (new) basis agrees


async def test_racing_compatible_changes_both_land_once(log: EventLog) -> None:
    setup: list[object] = [upsert("/p", "new", reservation={"cpu": 100})]
    a, b, gate = await race(log, upsert("/p/x", "new", reservation={"cpu": 30}),
                            upsert("/p/y", "new", reservation={"cpu": 30}), setup=setup)
    assert a.ok and b.ok and gate.stale == 1  # the stale one re-validated on the new tree, then written
    paths = [env.event.path for _, env in await envelopes(log) if isinstance(env.event, PoolConfigChanged)]
    assert sorted(paths) == ["/p", "/p/x", "/p/y"]


async def test_racing_identical_changes_apply_once(log: EventLog) -> None:
    setup: list[object] = [upsert("/p", "new", reservation={"cpu": 100})]
    a, b, _ = await race(log, upsert("/p", share=3), upsert("/p", share=3), setup=setup)
    assert a.ok and b.ok
    assert sorted([a.data["changed"], b.data["changed"]]) == [False, True]
    shares = [env.event.config.share for _, env in await envelopes(log) if isinstance(env.event, PoolConfigChanged)]
    assert shares == [None, 3]


async def test_racing_hosts(log: EventLog) -> None:
    a, b, gate = await race(log, HostAdd(host="h1", resources={"cpu": 8}), HostAdd(host="h2", resources={"cpu": 8}),
                            setup=[])
    assert a.ok and b.ok and gate.stale == 1
    hosts = [env.event.host for _, env in await envelopes(log) if isinstance(env.event, HostRegistered)]
    assert sorted(hosts) == ["h1", "h2"]


# --- malformed config messages ----------------------------------------------------------------------


async def test_malformed_config_message_becomes_a_rejection(log: EventLog) -> None:
    tree = TreeService(log)
    assert (await tree.handle(upsert("/a", "new"))).ok
    bad = Envelope(id="forged-1", time=at_seconds(1), source="someone",
                   event=PoolConfigChanged(tree="default", path="/b", config=PoolConfig()))
    data = json.loads(encode(bad))
    data["event"]["config"]["max_jobs"] = "lots"
    raw = await log.append_raw(subjects.config("default"), json.dumps(data).encode())
    garbage = await log.append_raw(subjects.config("default"), b"\xff not json")

    reply = await tree.handle(upsert("/c", "new"))  # expects the subject's last sequence: the garbage's
    assert reply.ok, reply
    records = [(seq, env) for seq, env in await envelopes(log) if isinstance(env.event, InputRejected)]
    assert [env.event.input_seq for _, env in records] == [raw.seq, garbage.seq]  # type: ignore[union-attr]
    first, second = (env.event for _, env in records)
    assert isinstance(first, InputRejected) and isinstance(second, InputRejected)
    assert (first.field, first.rule, first.input_id, first.tree) == ("event.config.max_jobs", "int_parsing",
                                                                     "forged-1", "default")
    assert second.rule == "json" and second.field is None
    assert await types_after(log, garbage.seq) == ["InputRejected", "InputRejected", "PoolConfigChanged"]

    again = TreeService(log)  # a restarted instance folds the same log: nothing recorded twice
    assert (await again.handle(upsert("/d", "new"))).ok
    assert len([1 for _, env in await envelopes(log) if isinstance(env.event, InputRejected)]) == 2
    assert (await folded(log)).tree().pool("/d") is not None
    report = verify(await log.read(1))
    assert report.ok and report.malformed == 2


# --- served: request/reply and the projection -------------------------------------------------------


async def served_tree(log: EventLog, data_dir: Path | None, tg: anyio.abc.TaskGroup) -> TreeService:
    service: TreeService = await tg.start(lambda task_status: serve_tree(log, data_dir, task_status=task_status))
    return service


async def test_projection_matches_the_log(log: EventLog, tmp_path: Path) -> None:
    async with anyio.create_task_group() as tg:
        service = await served_tree(log, tmp_path / "tree", tg)
        assert (await service.handle(upsert("/a", "new", reservation={"cpu": 10}))).ok
        assert (await service.handle(upsert("/a/b", "new", reservation={"cpu": 5}))).ok
        assert (await service.handle(upsert("/z", "new"))).ok
        assert (await service.handle(PoolDelete(path="/z"))).ok
        assert not (await service.handle(upsert("/a", "new"))).ok  # a rejection: on rejected.*, projected too
        await log.append_raw(subjects.gang("default"), b"{}")  # a subject the tree does not fold
        assert (await service.handle(HostAdd(host="h", resources={"cpu": 4}))).ok
        store = service.store
        assert store is not None
        last = await log.last_seq()
        await wait_until(lambda: _checkpointed(service, last), "the projection to reach the log's end")

        stored = await log.read(1)
        _, rows = store.query("SELECT seq, id FROM event_log ORDER BY seq")
        assert [r[0] for r in rows] == [s.seq for s in stored]  # each event once, nothing missing
        ids = {env.id: seq for seq, env in await envelopes(log)}
        assert {r[1]: r[0] for r in rows if r[1] in ids} == ids
        _, pools = store.query("SELECT path FROM pools WHERE tree = 'default' ORDER BY path")
        state = await folded(log)
        assert [p[0] for p in pools if p[0] != "/"] == sorted(p for p in state.tree().pools if p != "/")
        _, hosts = store.query("SELECT host FROM hosts")
        assert hosts == [("h",)]
        tg.cancel_scope.cancel()


async def test_a_stopped_tree_service_leaves_nothing_frozen() -> None:
    """The tree service folds its batches with the collector paused and what it keeps frozen out of
    its sight (`folding.gc_paused`); stopped, it hands that back, as `run_folder` does: a process
    that goes on (a demo's, the tests') never collected the cycles frozen with it."""
    gc.unfreeze()
    metrics.reset()  # (a service served earlier in this module left its position there)
    log = MemoryLog()
    async with anyio.create_task_group() as tg:
        service = await served_tree(log, None, tg)
        assert (await service.handle(upsert("/a", "new"))).ok
        last = await log.last_seq()

        async def consumed() -> bool:
            return metrics.status("tree").folded >= last  # (the batch consumed: folded under gc_paused)

        await wait_until(consumed, "the tree service to consume its own event")
        assert gc.get_freeze_count() > 0  # (what the test is about: the fold froze what it keeps)
        tg.cancel_scope.cancel()
    assert gc.get_freeze_count() == 0


async def _checkpointed(service: TreeService, last: int) -> bool:
    assert service.store is not None
    return service.store.lowest_checkpoint >= last


@pytest.mark.nats
async def test_request_reply_over_nats(jetstream_log: JetStreamLog, tmp_path: Path) -> None:
    url = jetstream_log.nc.connected_url.geturl()  # type: ignore[union-attr]
    async with anyio.create_task_group() as tg:
        await served_tree(jetstream_log, tmp_path / "tree", tg)
        nc = await nats.connect(url)
        try:
            async def ask(op: str, body: bytes) -> Reply:
                msg = await nc.request(subjects.command("tree", op), body, timeout=WAIT)
                return Reply.model_validate_json(msg.data)

            created = await ask("pool_upsert", upsert("/a", "new", reservation={"cpu": 10}).model_dump_json().encode())
            assert created.ok and created.seq == 1
            updated = await ask("pool_upsert", upsert("/a", "existing", share=2).model_dump_json().encode())
            assert updated.ok and updated.seq == 2
            exists = await ask("pool_upsert", upsert("/a", "new").model_dump_json().encode())
            assert exists.error is not None and exists.error.rule == "exists"
            invalid = await ask("pool_upsert", b"{nope")
            assert invalid.error is not None and invalid.error.rule == "invalid_command"
            unknown = await ask("pool_frobnicate", b"{}")
            assert unknown.error is not None and unknown.error.rule == "unknown_command"
            deleted = await ask("pool_delete", PoolDelete(path="/a").model_dump_json().encode())
            assert deleted.ok
            listed = await ask("pool_list", b"{}")
            assert [p["path"] for t in listed.data["trees"] for p in t["pools"]] == ["/"]
            last = await jetstream_log.last_seq()

            async def projected() -> bool:
                reply = await ask("sql", json.dumps({"sql": "SELECT count(*), max(seq) FROM event_log"}).encode())
                return bool(reply.ok and reply.data["rows"] == [[last, last]])

            await wait_until(projected, "the event_log projection to hold every event")
            bad_sql = await ask("sql", json.dumps({"sql": "DROP TABLE pools"}).encode())
            assert bad_sql.error is not None and bad_sql.error.rule == "sql"
        finally:
            await nc.close()
        rules = [env.event.rule for _, env in await envelopes(jetstream_log) if isinstance(env.event, InputRejected)]
        assert rules == ["exists", "invalid_command", "unknown_command"]
        assert verify(await jetstream_log.read(1)).ok
        tg.cancel_scope.cancel()
