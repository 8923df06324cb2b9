"""The what-if and `--at` as the `operator` role of deploy/nats/ (issue 21, docs/security.md): the
operator reads the log and admission's snapshots (the fold the what-if runs in the CLI), and
still writes nothing but commands. On a nats-server of the module's own running each role file
as shipped (accounts.conf, teams.conf)."""

from __future__ import annotations

import logging
import zlib
from collections.abc import Iterator

import anyio
import pytest

from services.common.jetstream import JetStreamLog
from tests.service.natsconf import nats_server
from tests.service.test_deploy_teams import user_nkey

PASSWORDS = {"SERVICE": "svc-pw", "SUBMITTER": "sub-pw", "OPERATOR": "op-pw", "AUDITOR": "aud-pw",
             "TEAM_A": "team-a-pw"}

pytestmark = pytest.mark.nats


@pytest.fixture(scope="module", params=["accounts.conf", "teams.conf"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    where = tmp_path_factory.mktemp("operator-reads")
    env = {f"{role}_PASSWORD_BCRYPT": pw for role, pw in PASSWORDS.items()}
    env["TEAM_B_NKEY"] = user_nkey(where)[0]
    config = f'listen: 127.0.0.1:{{port}}\njetstream {{ store_dir: "{{store}}" }}\ninclude "{request.param}"\n'
    with nats_server(where, config, env=env, include=[request.param]) as port:
        yield port


def _url(port: int, role: str) -> str:
    return f"nats://{role.lower()}:{PASSWORDS[role]}@127.0.0.1:{port}"


async def _write_history(port: int) -> int:
    """As the service role: a few inputs on the log, and admission's snapshot of the first of
    them (made by its fold, saved as the service saves it). The snapshot's position."""
    from events import Envelope, PoolConfig, PoolConfigChanged, TreeConfigured, TreeOptions, at_seconds, read_envelope
    from services.admission.queries import ExplainingFolder
    from services.common.folding import fold_batch
    from services.common.snapshots import ObjectStoreSnapshots, Snapshot, code_fingerprint
    from tests.replay.biglog import START

    def envelope(event: object, seconds: float) -> Envelope:
        return Envelope(id=f"in-{seconds}-{getattr(event, 'path', '')}", time=at_seconds(seconds), source="tree",
                        event=event)

    service = await JetStreamLog.connect(_url(port, "SERVICE"))
    try:
        await service.ensure_stream()
        await service.append([envelope(TreeConfigured(tree="default", options=TreeOptions(resources=["cpu"])),
                                       START)])
        await service.append([envelope(PoolConfigChanged(tree="default", path=f"/p{i}", created=True,
                                                         config=PoolConfig()), START + i) for i in range(3)])
        stored = await service.read(1)
        folder = ExplainingFolder()
        fold_batch(folder, stored[:2], 0, read_envelope)
        data = Snapshot("admission", 2, code_fingerprint(), folder.export(), anchor=zlib.crc32(stored[1].data)).encode()
        await ObjectStoreSnapshots(service.nc.jetstream(), service.stream).save("admission", 2, data)
        return len(stored)
    finally:
        await service.close()


def test_the_operator_folds_the_log_from_admissions_snapshot(server: int, caplog: pytest.LogCaptureFixture) -> None:
    from services.tools.cli.folds import fold_admission

    async def main() -> None:
        last = await _write_history(server)
        caplog.set_level(logging.INFO, logger="services.tools.cli.folds")
        with anyio.fail_after(30):
            folder, _ = await fold_admission(_url(server, "OPERATOR"))
            assert folder.state.last_seq == last
            assert sorted(p for p in folder.state.config.tree("default").pools if p != "/") == ["/p0", "/p1", "/p2"]
            assert "admission's fold started from its snapshot at 2" in caplog.text, caplog.text
            past, position = await fold_admission(_url(server, "OPERATOR"), "2")
            assert position is not None and position.seq == 2 and past.state.last_seq == 2

    anyio.run(main)


@pytest.mark.parametrize("subject", [
    "poolwise.gang.default", "poolwise.decision.default.admission", "$O.poolwise_snapshots.M.x",
    "$O.poolwise_snapshots.C.x", "$JS.API.STREAM.PURGE.POOLWISE", "$JS.API.STREAM.DELETE.OBJ_poolwise_snapshots",
    "$JS.API.CONSUMER.MSG.NEXT.POOLWISE.admission", "$JS.API.CONSUMER.CREATE.POOLWISE.admission",
    "$JS.API.CONSUMER.DELETE.POOLWISE.tree", "$JS.ACK.POOLWISE.admission.1.1.1.1.1",
])
def test_the_operator_still_writes_nothing_but_commands(server: int, subject: str) -> None:
    from tests.service.test_deploy_roles import refused_by_server

    assert anyio.run(refused_by_server, server, "OPERATOR", subject)


def test_nothing_else_changed_for_the_operator(server: int) -> None:
    from tests.service.test_deploy_roles import refused_by_server

    assert not anyio.run(refused_by_server, server, "OPERATOR", "poolwise.cmd.tree.pool_upsert")
