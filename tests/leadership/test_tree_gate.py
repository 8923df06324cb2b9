"""Fencing per tree (`services.common.tree_gate.TreeGate` with real `TreeLeases`, on the test
nats-server): a decision of tree T is published only while this instance holds T's lease; one
of a tree another instance holds is kept back, and sent, in the order made, once the tree comes
to this instance; one that lands meanwhile (published by the holder) is dropped."""

from __future__ import annotations

import time
import uuid
from functools import partial

import anyio
import pytest
from anyio.abc import TaskStatus

from events import CycleCompleted, Envelope, at_seconds, decode_all
from services.common.folding import decision_envelope
from services.common.jetstream import JetStreamLog
from services.common.leadership import StandingBy, run_as_leader
from services.common.lease import Lease, new_holder_id
from services.common.lease_bucket import lease_key
from services.common.lease_renewer import connector, servers_of
from services.common.tree_gate import TreeGate
from services.common.tree_leases import TreeLeases, consumer_name, per_tree_instances
from tests.leadership.helpers import TEST_BUCKET, TEST_TTL, WAIT, lease_bucket, until

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


def decision(tree: str, basis: int) -> Envelope:
    event = CycleCompleted(tree=tree, service="admission", trigger_seq=basis, decisions=0)
    return decision_envelope("admission", event, "cycle", basis, f"trigger-{basis}", at_seconds(time.time()))


async def cycles_in(log: JetStreamLog) -> list[tuple[str, int]]:
    found = []
    for stored in await log.read():
        for envelope in decode_all(stored.data):
            if isinstance(envelope.event, CycleCompleted):
                found.append((envelope.event.tree or "", envelope.event.trigger_seq))
    return found


async def test_a_trees_decisions_wait_for_its_lease(jetstream_log: JetStreamLog) -> None:
    log = jetstream_log
    kv = await lease_bucket(log.nc)
    service = f"s{uuid.uuid4().hex[:10]}"  # keys of its own in the shared test bucket
    other = Lease(kv, lease_key(log.stream, service, "x"), new_holder_id(), ttl=TEST_TTL)
    assert await other.try_acquire()  # another instance holds tree x
    leases = TreeLeases(connector(servers_of(log.nc)), TEST_BUCKET, log.stream, service, new_holder_id())
    gate = TreeGate(log, leases, consumer_name(service, leases.tag))
    leases.start()
    leases.ready()
    try:
        with anyio.fail_after(WAIT):
            await gate.append([decision("x", 1), decision("y", 1), decision("x", 2)])
            assert await cycles_in(log) == []  # no lease yet: all kept back
            await until(lambda: leases.held() == {"y"}, "the free tree's lease")  # x stays the other's
            await gate.flush()
            assert await cycles_in(log) == [("y", 1)]
            assert [getattr(e.event, "tree", None) for e in gate.kept()] == ["x", "x"]

            await gate.append([decision("x", 3), decision("y", 3)])  # y's at once, x's kept
            assert await cycles_in(log) == [("y", 1), ("y", 3)]
            await log.append([decision("x", 2)])  # the holder of x publishes one (the same id)

            async def folded(batch: object) -> None:
                pass

            async with anyio.create_task_group() as reading:  # the gate reads it: no longer kept
                reading.start_soon(gate.consume, "admission", ("poolwise.decision.*.admission",), 0, folded)
                await until(lambda: len(gate.kept()) == 2, "the landed decision to be dropped")
                reading.cancel_scope.cancel()
            await other.release()  # the other instance stops: x comes to this one
            await until(lambda: leases.held() == {"x", "y"}, "tree x's lease")
            await gate.flush()  # what is left of x, in the order made
            assert await cycles_in(log) == [("y", 1), ("y", 3), ("x", 2), ("x", 1), ("x", 3)]
            assert gate.kept() == []
    finally:
        with anyio.CancelScope(shield=True):
            await leases.stop()


async def test_no_tree_is_held_while_a_service_wide_leader_decides(jetstream_log: JetStreamLog) -> None:
    """An instance without `--trees per-tree` decides every tree: per-tree instances hold none
    meanwhile, and share the trees once it is gone."""
    log = jetstream_log
    kv = await lease_bucket(log.nc)
    service = f"s{uuid.uuid4().hex[:10]}"
    leader = Lease(kv, lease_key(log.stream, service), new_holder_id(), ttl=TEST_TTL)
    assert await leader.try_acquire()
    leases = TreeLeases(connector(servers_of(log.nc)), TEST_BUCKET, log.stream, service, new_holder_id())
    leases.start()
    leases.ready()
    leases.learn({"x"})
    try:
        with anyio.fail_after(WAIT):
            await anyio.sleep(3 * TEST_TTL / 5)  # a few looks: renewed meanwhile, the leader keeps its lease
            assert await leader.renew() and leases.held() == frozenset()
            await leader.release()
            await until(lambda: leases.held() == {"x"}, "tree x's lease once the service-wide leader is gone")
    finally:
        with anyio.CancelScope(shield=True):
            await leases.stop()


async def test_a_service_wide_instance_stands_by_while_instances_share_the_trees(
        jetstream_log: JetStreamLog) -> None:
    """The other way round: an instance started without `--trees per-tree` beside per-tree ones
    (`run_as_leader(yield_to=per_tree_instances)`) stands by, naming them, and leads once they
    are gone."""
    log = jetstream_log
    kv = await lease_bucket(log.nc)
    service = f"s{uuid.uuid4().hex[:10]}"
    leases = TreeLeases(connector(servers_of(log.nc)), TEST_BUCKET, log.stream, service, new_holder_id())
    leases.start()
    leases.ready()
    roles: list[tuple[str, str | None]] = []

    async def serve(term_log: object, *, task_status: TaskStatus[str]) -> None:
        task_status.started("leading")
        await anyio.sleep_forever()

    try:
        with anyio.fail_after(WAIT):
            await anyio.sleep(1.0)  # its presence written
            async with anyio.create_task_group() as tg:
                first = await tg.start(partial(
                    run_as_leader, lease_key(log.stream, service), serve, log=log, kv=kv, ready_on_standby=True,
                    on_change=lambda name, state, holder: roles.append((state, holder)),
                    yield_to=partial(per_tree_instances, log.nc, TEST_BUCKET, log.stream, service)))
                assert isinstance(first, StandingBy) and first.leader == f"per-tree instances {leases.tag}"
                await leases.stop()  # the per-tree instance goes: its presence with it
                await until(lambda: "leading" in [state for state, _ in roles], "the service-wide instance to lead")
                tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await leases.stop()
