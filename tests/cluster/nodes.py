"""A 3-node NATS cluster from `deploy/nats/cluster-n{1,2,3}.conf` as shipped, on loopback: free
ports and a temporary store per node given through the variables the files read (as
deploy/README.md's "Three nodes on one machine" does), plain-text passwords for accounts.conf.
Nodes can be killed and started again on the same store; every process is stopped at the end."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from services.common.natsserver import find_nats_server

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "nats"
PASSWORDS = {"service": "svc-pw", "submitter": "sub-pw", "operator": "op-pw"}
WAIT = 60.0


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


class Node:
    def __init__(self, number: int, client: int, route: int, http: int, store: Path, log: Path) -> None:
        self.number = number
        self.name = f"poolwise-n{number}"
        self.client, self.route, self.http = client, route, http
        self.store, self.log = store, log
        self.proc: subprocess.Popen[bytes] | None = None

    def url(self, role: str) -> str:
        return f"nats://{role}:{PASSWORDS[role]}@127.0.0.1:{self.client}"

    def start(self, routes: str) -> None:
        env = {**os.environ,
               "POOLWISE_NATS_LISTEN": f"127.0.0.1:{self.client}", "POOLWISE_NATS_HTTP": f"127.0.0.1:{self.http}",
               "POOLWISE_NATS_CLUSTER_LISTEN": f"127.0.0.1:{self.route}", "POOLWISE_NATS_ROUTES": routes,
               "POOLWISE_NATS_STORE": str(self.store),
               **{f"{role.upper()}_PASSWORD_BCRYPT": pw for role, pw in PASSWORDS.items()}}
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen([find_nats_server(), "-c", str(DEPLOY / f"cluster-n{self.number}.conf")],
                                         env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out)

    def wait_listening(self) -> None:
        deadline = time.monotonic() + WAIT
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.name} exited with {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.client), timeout=1).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise AssertionError(f"{self.name} does not listen after {WAIT:g} s") from None
                time.sleep(0.05)

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(sig)
        try:
            self.proc.wait(WAIT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(WAIT)


class Cluster:
    def __init__(self, where: Path) -> None:
        ports = free_ports(9)
        where.mkdir(parents=True, exist_ok=True)
        self.nodes = [Node(n, ports[3 * (n - 1)], ports[3 * (n - 1) + 1], ports[3 * (n - 1) + 2],
                           where / f"n{n}", where / f"n{n}.log") for n in (1, 2, 3)]
        self.routes = "[" + ", ".join(f"nats-route://127.0.0.1:{node.route}" for node in self.nodes) + "]"

    def urls(self, role: str) -> str:
        """Every node's URL for `role`, comma-separated (as the systemd units give NATS_URL)."""
        return ",".join(node.url(role) for node in self.nodes)

    def node(self, name: str) -> Node:
        return next(node for node in self.nodes if node.name == name)

    def start(self, node: Node | None = None) -> None:
        for each in [node] if node else self.nodes:
            each.start(self.routes)
        for each in [node] if node else self.nodes:
            each.wait_listening()

    def close(self) -> None:
        for node in self.nodes:
            with contextlib.suppress(Exception):
                node.stop()


def started_cluster(where: Path, attempts: int = 3) -> Cluster:
    """A started cluster in `where/<attempt>`; again on other free ports when a node could not
    listen (a port taken between the look for a free one and the server's start, by another test)."""
    for attempt in range(1, attempts + 1):
        cluster = Cluster(where / f"try{attempt}")
        try:
            cluster.start()
            return cluster
        except AssertionError:
            logs = " ".join(node.log.read_text() for node in cluster.nodes if node.log.exists())
            cluster.close()
            if "address already in use" not in logs or attempt == attempts:
                raise
    raise AssertionError("unreachable")
