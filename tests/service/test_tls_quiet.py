"""A command over TLS says what it did and nothing else (issue 19, found by running deploy/README.md's
one-machine cluster with tls.conf): every CLI command printed asyncio's `returning true from
eof_received() has no effect when using ssl` on stderr as its TLS connection closed (nats-py's
protocol returns true there), before its own output or error line."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from services.common.connection import Auth, Tls, connect_nats
from services.common.jetstream import JetStreamLog
from tests.service.natsconf import nats_server
from tests.service.throwaway_ca import Pki, make_pki

PASSWORDS = {"SERVICE": "svc-pw", "SUBMITTER": "sub-pw", "OPERATOR": "op-pw"}

pytestmark = pytest.mark.nats


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Pki]]:
    where = tmp_path_factory.mktemp("tls-quiet")
    pki = make_pki(where / "pki")
    env = {**{f"{role}_PASSWORD_BCRYPT": pw for role, pw in PASSWORDS.items()}, "POOLWISE_TLS_CA": str(pki.ca),
           "POOLWISE_TLS_CERT": str(pki.server.cert), "POOLWISE_TLS_KEY": str(pki.server.key)}
    config = ('listen: 127.0.0.1:{port}\njetstream { store_dir: "{store}" }\n'
              'include "accounts.conf"\ninclude "tls.conf"\n')
    with nats_server(where, config, env=env, include=["accounts.conf", "tls.conf"]) as port:
        yield port, pki


def poolwise(port: int, pki: Pki, where: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "POOLWISE_"))}
    env.update(NATS_URL=f"tls://submitter:{PASSWORDS['SUBMITTER']}@127.0.0.1:{port}", NATS_CA=str(pki.ca),
               NATS_CERT=str(pki.client.cert), NATS_KEY=str(pki.client.key))
    return subprocess.run([sys.executable, "-m", "services.tools.cli.main", *args], env=env, cwd=where,
                          capture_output=True, text=True, timeout=60)


def test_a_command_over_tls_prints_no_asyncio_warning(tls_server: tuple[int, Pki], tmp_path: Path) -> None:
    port, pki = tls_server

    async def make_stream() -> None:
        tls = Tls(ca=str(pki.ca), cert=str(pki.client.cert), key=str(pki.client.key))
        nc = await connect_nats(f"nats://service:{PASSWORDS['SERVICE']}@127.0.0.1:{port}", auth=Auth(tls=tls))
        async with JetStreamLog(nc, owns_connection=True) as log:
            await log.ensure_stream()

    anyio.run(make_stream)
    submitted = poolwise(port, pki, tmp_path, "submit", "--gang", "quiet", "--pool", "/a", "--tasks", "1",
                         "--resources", "cpu=1")
    assert submitted.returncode == 0 and submitted.stdout.startswith("submitted gang quiet"), submitted
    assert submitted.stderr == ""
    asked = poolwise(port, pki, tmp_path, "gangs")  # a request to admission: no service runs here
    assert asked.returncode == 2 and asked.stderr.splitlines() == [
        f"error: the admission service is not running (no responder on tls://submitter:***@127.0.0.1:{port})"]
