"""One `poolwise up --http-port P` for the dashboard's tests (its services each in a process of
their own, on an embedded nats-server), with a host of cpu=1000,memory=1000 and two pool
subtrees: /ATG (the API's tests: g1 admitted, g2 waiting on /ATG/Sim's limit) and /W (the page's
test, which changes it: gw1 admitted, gw2 waiting on /W/L's). The host is big enough that
neither subtree's entitlement depends on the other's demand."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cli.helpers import Up, wait_for


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Board:
    """The running system and its HTTP port."""

    def __init__(self, up: Up, port: int) -> None:
        self.up = up
        self.port = port
        self.url = f"http://127.0.0.1:{port}"

    def fetch(self, path: str, method: str = "GET") -> tuple[int, str, bytes]:
        """(status, content type, body) of `method path`."""
        request = urllib.request.Request(self.url + path, method=method)
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return answer.status, answer.headers["Content-Type"], answer.read()
        except urllib.error.HTTPError as answer:
            return answer.code, answer.headers["Content-Type"], answer.read()

    def json(self, path: str, status: int = 200) -> Any:
        """The JSON body of GET `path`, once its status is `status`."""
        got, kind, body = self.fetch(path)
        assert (got, kind) == (status, "application/json"), (path, got, kind, body[:300])
        return json.loads(body)

    def cli(self, *args: str) -> None:
        done = self.up.cli(*args)
        assert done.code == 0, done


CLUSTER = """
resources: [cpu, memory]
hosts: [{name: h1, resources: {cpu: 1000, memory: 1000}}]
trees:
  - name: default
    gang_timeout: {default: 3600, limit: 3600, jitter: 0}   # nothing requeued while the tests run
pools:
  - {path: /ATG, reservation: {cpu: 60, memory: 600}, limit: {cpu: 100, memory: 1000}}
  - {path: /ATG/Sim, reservation: {cpu: 20}, limit: {cpu: 30}}
  - {path: /W, reservation: {cpu: 10}, limit: {cpu: 50}}
  - {path: /W/L, reservation: {cpu: 10}, limit: {cpu: 10}}
"""
# One enqueue, so one cycle: each first gang fits its pool's limit, each second one does not.
GANGS = """
- {gang: g1, pool: /ATG/Sim, tasks: 4, resources: {cpu: 5, memory: 10}}
- {gang: g2, pool: /ATG/Sim, tasks: 4, resources: {cpu: 5}}
- {gang: gw1, pool: /W/L, tasks: 4, resources: {cpu: 2}}
- {gang: gw2, pool: /W/L, tasks: 2, resources: {cpu: 2}}
"""


@pytest.fixture(scope="package")
def board(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Board]:
    where: Path = tmp_path_factory.mktemp("dashboard")
    port = free_port()
    (where / "cluster.yaml").write_text(CLUSTER)
    (where / "gangs.yaml").write_text(GANGS)
    with Up(where / "data", where, "--http-port", str(port), "--dashboard-refresh", "0.2") as up:
        up.start()
        found = Board(up, port)
        found.cli("apply", "-f", str(where / "cluster.yaml"))
        found.cli("submit", "--file", str(where / "gangs.yaml"))

        def decided() -> bool:
            trees = found.json("/api/overview")["trees"]
            return any(len(leaf["pending"]["gangs"]) == 1 for t in trees for leaf in t["queues"].values()) and \
                sum(len(leaf["pending"]["gangs"]) for t in trees for leaf in t["queues"].values()) == 2

        wait_for(decided, "g2 and gw2 waiting in their queues on the dashboard")
        yield found
