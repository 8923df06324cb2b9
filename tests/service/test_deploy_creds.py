"""`.creds` files (a user JWT and its nkey seed) on a nats-server in JWT ("operator") mode made at
test time (`jwt_mode`): the SDK and the CLI sign in with one, and the user's permissions, which
live in its JWT, are the server's to enforce (a team's user and its tree, as in teams.conf)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from services.common.connection import Auth, connect_nats, connect_options
from services.common.jetstream import JetStreamLog
from services.sdk.client import PublishError, Submitter
from tests.service.jwt_mode import Operator
from tests.service.natsconf import nats_server, refusals

pytestmark = pytest.mark.nats


@pytest.fixture(scope="module")
def jwt_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path, Path]]:
    """The port, the service's .creds and team C's (trees c)."""
    where = tmp_path_factory.mktemp("jwt")
    operator = Operator.new()
    config = 'listen: 127.0.0.1:{port}\njetstream { store_dir: "{store}" }\n' + operator.server_config(where)
    service = operator.creds(where, "service", ["poolwise.>", "$JS.API.>", "$JS.ACK.>", "_INBOX.>"],
                             ["poolwise.>", "_INBOX.>", "$JS.>"])
    team_c = operator.creds(where, "team-c", ["poolwise.gang.c", "poolwise.task.c"], ["_INBOX.>"])
    with nats_server(where, config) as port:
        yield port, service, team_c


def test_creds_sign_in_and_their_permissions_hold(jwt_server: tuple[int, Path, Path], tmp_path: Path) -> None:
    port, service_creds, team_creds = jwt_server
    url = f"nats://127.0.0.1:{port}"

    async def main() -> None:
        nc = await connect_nats(url, auth=Auth(creds=str(service_creds)))
        async with JetStreamLog(nc, owns_connection=True) as service:
            await service.ensure_stream()
        async with Submitter(url, source="sdk:team-c", tree="c", creds=str(team_creds), timeout=3) as team:
            assert (await team.enqueue(gang="c1", pool="/x", count=1, resources={"cpu": 1})).seq == 1
            with pytest.raises(PublishError):
                await team.enqueue(gang="c2", pool="/x", count=1, resources={"cpu": 1}, tree="d")
        forbidden_pub = ["poolwise.gang.d", "poolwise.decision.c.admission", "$JS.API.STREAM.PURGE.POOLWISE"]
        forbidden_sub = ["poolwise.>"]
        got = await refusals(url, publish=forbidden_pub, subscribe=forbidden_sub,
                             **connect_options(Auth(creds=str(team_creds))))
        assert got == {("publish", s) for s in forbidden_pub} | {("subscribe", s) for s in forbidden_sub}
        with pytest.raises(ConnectionError):  # no credentials: not let in
            await connect_nats(url, auth=Auth(), timeout=3)

    anyio.run(main)

    env = {**{k: v for k, v in os.environ.items() if not k.startswith("NATS_")}, "NATS_URL": url}
    done = subprocess.run([sys.executable, "-m", "services.tools.cli.main", "--creds", str(team_creds), "submit",
                           "--tree", "c", "--gang", "c3", "--pool", "/x", "--tasks", "1", "--resources", "cpu=1"],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "log position 2" in done.stdout, done.stdout
