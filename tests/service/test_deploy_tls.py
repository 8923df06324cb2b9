"""deploy/nats/tls.conf and tls-routes.conf on real nats-servers, with a CA and certificates made
at test time (`throwaway_ca`): a plain connection is refused, and so is TLS without a client
certificate of the CA; the SDK, the CLI and `poolwise serve` work over TLS (with the roles of
accounts.conf); two nodes route to each other over TLS."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from services.common.connection import Auth, Tls, connect_nats
from services.common.jetstream import JetStreamLog
from services.sdk.client import Submitter
from tests.service.natsconf import free_port, nats_server
from tests.service.throwaway_ca import Pki, make_pki

PASSWORDS = {"SERVICE": "svc-pw", "SUBMITTER": "sub-pw", "OPERATOR": "op-pw"}
POOLWISE = [sys.executable, "-m", "services.tools.cli.main"]

pytestmark = pytest.mark.nats


def server_env(pki: Pki) -> dict[str, str]:
    return {**{f"{role}_PASSWORD_BCRYPT": pw for role, pw in PASSWORDS.items()}, "POOLWISE_TLS_CA": str(pki.ca),
            "POOLWISE_TLS_CERT": str(pki.server.cert), "POOLWISE_TLS_KEY": str(pki.server.key)}


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Pki]]:
    where = tmp_path_factory.mktemp("tls")
    pki = make_pki(where / "pki")
    config = ('listen: 127.0.0.1:{port}\njetstream { store_dir: "{store}" }\n'
              'include "accounts.conf"\ninclude "tls.conf"\n')
    with nats_server(where, config, env=server_env(pki), include=["accounts.conf", "tls.conf"]) as port:
        yield port, pki


def url(port: int, role: str, scheme: str = "nats") -> str:
    return f"{scheme}://{role}:{PASSWORDS[role.upper()]}@127.0.0.1:{port}"


def client_tls(pki: Pki) -> Tls:
    return Tls(ca=str(pki.ca), cert=str(pki.client.cert), key=str(pki.client.key))


def cli_env(pki: Pki | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("NATS_URL", "NATS_CREDS", "NATS_NKEY", "NATS_CA", "NATS_CERT", "NATS_KEY", "POOLWISE_DEBUG")}
    if pki is not None:
        env.update(NATS_CA=str(pki.ca), NATS_CERT=str(pki.client.cert), NATS_KEY=str(pki.client.key))
    return {**env, **extra}


def test_a_plain_connection_is_refused(tls_server: tuple[int, Pki]) -> None:
    port, pki = tls_server
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:  # the protocol in clear text
        info = json.loads(raw.recv(4096).decode().partition(" ")[2])
        assert info["tls_required"] is True
        raw.sendall(b'CONNECT {"verbose":false,"user":"submitter","pass":"sub-pw"}\r\nPING\r\n')
        answer = b""
        with contextlib.suppress(OSError):  # a reset is a hang-up too
            while chunk := raw.recv(4096):
                answer += chunk
    assert b"PONG" not in answer  # never served; the server hangs up (a TLS alert, or its error)

    async def refused(auth: Auth, why: str) -> None:
        with pytest.raises(ConnectionError) as caught:
            await connect_nats(url(port, "submitter"), auth=auth, timeout=3)
        assert "cannot reach NATS at nats://submitter:***@127.0.0.1" in str(caught.value), why

    async def main() -> None:
        await refused(Auth(), "no CA: the server's certificate is not trusted")
        await refused(Auth(tls=Tls(ca=str(pki.ca))), "no client certificate")
        await refused(Auth(tls=Tls(ca=str(pki.ca), cert=str(pki.stranger.cert), key=str(pki.stranger.key))),
                      "a client certificate of another CA")

    anyio.run(main)


def test_the_sdk_and_the_cli_over_tls(tls_server: tuple[int, Pki], tmp_path: Path) -> None:
    port, pki = tls_server

    async def prepare() -> int:
        nc = await connect_nats(url(port, "service"), auth=Auth(tls=client_tls(pki)))
        log = JetStreamLog(nc, owns_connection=True)
        async with log:
            await log.ensure_stream()
            return await log.last_seq()

    async def submit(scheme: str, gang: str) -> int:
        async with Submitter(url(port, "submitter", scheme), source="sdk:tls", tls=client_tls(pki)) as submitter:
            return (await submitter.enqueue(gang=gang, pool="/a", count=1, resources={"cpu": 1})).seq

    before = anyio.run(prepare)
    assert anyio.run(submit, "nats", "over-tls") == before + 1
    assert anyio.run(submit, "tls", "over-tls-url") == before + 2

    # the CLI: the options, or their environment variables
    options = ["--tls-ca", str(pki.ca), "--tls-cert", str(pki.client.cert), "--tls-key", str(pki.client.key)]
    submit_args = ["submit", "--gang", "cli-tls", "--pool", "/a", "--tasks", "1", "--resources", "cpu=1"]
    done = subprocess.run([*POOLWISE, *options, *submit_args], env=cli_env(None, NATS_URL=url(port, "submitter")),
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert f"log position {before + 3}" in done.stdout, done.stdout
    done = subprocess.run([*POOLWISE, *submit_args], env=cli_env(pki, NATS_URL=url(port, "submitter", "tls")),
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr  # the same gang again: stored once, said so
    # without TLS settings: one line, exit 2
    done = subprocess.run([*POOLWISE, *submit_args], env=cli_env(None, NATS_URL=url(port, "submitter")),
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.startswith("error: ") and len(done.stderr.splitlines()) == 1, done


def test_a_service_serves_over_tls(tls_server: tuple[int, Pki], tmp_path: Path) -> None:
    """`poolwise serve tree` with the service role and the TLS settings in its environment (its
    log, its lease's own connection, its request handling), asked by an operator over TLS."""
    port, pki = tls_server
    env = cli_env(pki, NATS_URL=url(port, "service"))
    service = subprocess.Popen([*POOLWISE, "serve", "tree", "--data-dir", str(tmp_path / "data")], env=env,
                               cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            done = subprocess.run([*POOLWISE, "tree", "list"], cwd=tmp_path, capture_output=True,
                                  text=True, timeout=60, env=cli_env(pki, NATS_URL=url(port, "operator", "tls")))
            if done.returncode == 0:
                break
            assert "service is not running" in done.stderr, done.stderr  # not yet: it starts
            assert service.poll() is None, service.communicate()[0]
            assert time.monotonic() < deadline, done.stderr
            time.sleep(0.5)
        assert "default" in done.stdout or done.stdout.strip() == "" or "tree" in done.stdout.lower(), done.stdout
    finally:
        service.terminate()
        try:
            service.wait(timeout=20)
        except subprocess.TimeoutExpired:
            service.kill()
            service.wait(timeout=10)


def test_routes_between_two_nodes_are_tls(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    ports = {name: (free_port(), free_port()) for name in ("n1", "n2")}

    def config(name: str, other: str) -> str:
        client, route = ports[name]
        return (f"listen: 127.0.0.1:{client}\nserver_name: {name}\n"
                f"cluster {{\n  name: poolwise\n  listen: 127.0.0.1:{route}\n"
                f"  routes: [nats-route://127.0.0.1:{ports[other][1]}]\n  include \"tls-routes.conf\"\n}}\n")

    env = {k: v for k, v in server_env(pki).items() if k.startswith("POOLWISE_TLS")}
    (tmp_path / "n1").mkdir()
    (tmp_path / "n2").mkdir()
    with (nats_server(tmp_path / "n1", config("n1", "n2"), env=env, include=["tls-routes.conf"], port=ports["n1"][0]),
          nats_server(tmp_path / "n2", config("n2", "n1"), env=env, include=["tls-routes.conf"], port=ports["n2"][0])):

        async def main() -> None:
            one = await connect_nats(f"nats://127.0.0.1:{ports['n1'][0]}", auth=Auth())
            two = await connect_nats(f"nats://127.0.0.1:{ports['n2'][0]}", auth=Auth())
            try:
                sub = await two.subscribe("routed")
                with anyio.fail_after(30):  # until the route is up: then a message crosses it
                    while True:
                        await one.publish("routed", b"over tls")
                        await one.flush()
                        with anyio.move_on_after(0.5):
                            message = await sub.next_msg(timeout=0.5)
                            assert message.data == b"over tls"
                            return
            finally:
                await one.close()
                await two.close()

        anyio.run(main)
        # a route port speaks TLS from the first byte, with a certificate of the CA: a plain
        # connection gets nothing (closed at the handshake's timeout), one without a certificate
        # is refused in the handshake, a node's certificate is answered
        route = ("127.0.0.1", ports["n1"][1])
        with socket.create_connection(route, timeout=10) as raw:
            assert raw.recv(4096) == b""
        anonymous = ssl.create_default_context(cafile=str(pki.ca))
        with pytest.raises((ssl.SSLError, OSError)), socket.create_connection(route, timeout=10) as raw, \
                anonymous.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            assert tls.recv(4096) == b"", "served without a client certificate"
        node = ssl.create_default_context(cafile=str(pki.ca))
        node.load_cert_chain(pki.server.cert, pki.server.key)
        with socket.create_connection(route, timeout=10) as raw, \
                node.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            assert tls.recv(4096).startswith(b"INFO ")
