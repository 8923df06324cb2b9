"""deploy/nats/accounts.conf on a real nats-server: each role can do its job and nothing more.

The server runs the deploy file as shipped (included from a config of our own that sets a free
port and a store in a temporary directory; the `$..._BCRYPT` variables hold plain-text passwords).
"""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import nats
import pytest

from services.common.jetstream import JetStreamLog
from services.sdk.client import Submitter
from tests.service.natsconf import nats_server

PASSWORDS = {"SERVICE": "svc-pw", "SUBMITTER": "sub-pw", "OPERATOR": "op-pw"}

pytestmark = pytest.mark.nats


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    where = tmp_path_factory.mktemp("roles")
    # the `$<ROLE>_PASSWORD_BCRYPT` variables come from the environment (plain text is accepted too)
    env = {f"{role}_PASSWORD_BCRYPT": pw for role, pw in PASSWORDS.items()}
    config = 'listen: 127.0.0.1:{port}\njetstream { store_dir: "{store}" }\ninclude "accounts.conf"\n'
    with nats_server(where, config, env=env, include=["accounts.conf"]) as port:
        yield port


def _url(port: int, role: str) -> str:
    return f"nats://{role.lower()}:{PASSWORDS[role]}@127.0.0.1:{port}"


async def refused_by_server(port: int, role: str, subject: str) -> bool:
    """Whether the server refuses `role` publishing on `subject` (a permissions violation)."""
    errors: list[str] = []

    async def on_error(error: Exception) -> None:
        errors.append(str(error))

    nc = await nats.connect(_url(port, role), error_cb=on_error, max_reconnect_attempts=0)
    try:
        await nc.publish(subject, b"{}")
        await nc.flush()
        with anyio.move_on_after(2):  # a refusal comes back at once; none in 2 s: allowed
            while not errors:
                await anyio.sleep(0.02)
    finally:
        await nc.close()
    return any("permissions violation" in e.lower() for e in errors)


def test_each_role_does_its_job_and_nothing_more(server: int) -> None:
    async def main() -> None:
        service = await JetStreamLog.connect(_url(server, "SERVICE"))
        try:
            await service.ensure_stream()
        finally:
            await service.close()
        async with Submitter(_url(server, "SUBMITTER"), source="sdk:roles") as submitter:
            receipt = await submitter.enqueue(gang="g1", pool="/a", count=1, resources={"cpu": 1})
            assert receipt.seq == 1
        # the submitter may ask admission's read-only queries (`submit --wait`, `gangs`, `explain`)
        assert not await refused_by_server(server, "SUBMITTER", "poolwise.cmd.admission.explain")
        assert not await refused_by_server(server, "SUBMITTER", "poolwise.cmd.admission.gangs")
        assert await refused_by_server(server, "SUBMITTER", "poolwise.decision.default.admission")
        assert await refused_by_server(server, "SUBMITTER", "poolwise.cmd.tree.pool_upsert")
        assert await refused_by_server(server, "OPERATOR", "poolwise.gang.default")
        assert not await refused_by_server(server, "OPERATOR", "poolwise.cmd.tree.pool_upsert")

    async def bounded() -> None:
        with anyio.fail_after(60):  # a hung connection fails the test instead of hanging it
            await main()

    anyio.run(bounded)


def test_the_service_role_saves_and_reads_snapshots(server: int) -> None:
    """The services keep their snapshots in the object store `poolwise_snapshots`: its chunks and
    metadata are published on `$O.poolwise_snapshots.>` (denied, a save timed out and every service
    rebuilt from the whole log at each start)."""
    from services.common.snapshots import ObjectStoreSnapshots

    async def main() -> None:
        service = await JetStreamLog.connect(_url(server, "SERVICE"))
        try:
            store = ObjectStoreSnapshots(service.nc.jetstream(), "POOLWISE")
            with anyio.fail_after(30):
                await store.save("tree", 7, b"state" * 1000)
                assert await store.candidates("tree") == [7]
                assert await store.fetch("tree", 7) == b"state" * 1000
        finally:
            await service.close()
        assert await refused_by_server(server, "SUBMITTER", "$O.poolwise_snapshots.M.x")

    anyio.run(main)
