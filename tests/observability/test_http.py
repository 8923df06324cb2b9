"""The HTTP side on the real processes: `poolwise up --http-port P` serves every service's metrics
gathered on one port (a pool's entitlement and allocation after a gang is admitted, with their
labels), `/healthz`, `/readyz`, and a JSON 404 / 405 / 400 for what it does not serve; a
`poolwise serve admission --http-port` beside it stands by and says so on its own port (ready,
lease not held). Then the server alone: a client that sends nothing holds no one else up."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import anyio
import pytest

from services.common.exposition import merge
from services.common.health_http import Response, get, serve_http
from tests.cli.helpers import POOLWISE, WAIT, Up, clean_env, stop_service_processes, wait_for


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def fetch(port: int, path: str, method: str = "GET") -> tuple[int, str, str]:
    """(status, content type, body) of `method path` on 127.0.0.1:port."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.headers["Content-Type"], answer.read().decode()
    except urllib.error.HTTPError as answer:
        return answer.code, answer.headers["Content-Type"], answer.read().decode()


def sample(page: str, name: str, **labels: str) -> float | None:
    """The value of series `name{labels}` on a Prometheus page (labels in any order)."""
    for line in page.splitlines():
        found = re.match(r"^(\w+)\{(.*)\} (\S+)$", line)
        if found is None or found.group(1) != name:
            continue
        got = dict(re.findall(r'(\w+)="([^"]*)"', found.group(2)))
        if got == labels:
            return float(found.group(3))
    return None


@pytest.mark.nats
def test_up_serves_every_service_on_one_port(tmp_path: Path) -> None:
    port = free_port()
    with Up(tmp_path / "data", tmp_path, "--http-port", str(port)) as up:
        up.start()
        assert f"poolwise: up http on 127.0.0.1:{port}" in up.stderr
        assert up.cli("host", "add", "h1", "--resources", "cpu=100,memory=1000").code == 0
        assert up.cli("pool", "create", "/A", "--reservation", "cpu=60", "--limit", "cpu=100").code == 0
        assert up.cli("pool", "create", "/A/X", "--reservation", "cpu=80").code == 2  # more than /A reserves
        done = up.cli("submit", "--gang", "g1", "--pool", "/A", "--tasks", "4", "--resources", "cpu=5",
                      "--wait", "20")
        assert done.code == 0 and "admitted" in done.out, done

        def page_with_admission() -> str | None:
            status, kind, page = fetch(port, "/metrics")
            assert status == 200 and kind.startswith("text/plain"), (status, kind)
            return page if sample(page, "poolwise_gangs_admitted_total", tree="default", pool="/A") == 1 else None

        page = wait_for(page_with_admission, "g1 counted as admitted on up's /metrics")
        entitlement = sample(page, "poolwise_pool_entitlement", tree="default", pool="/A", kind="cpu")
        assert entitlement == 100.0  # the only pool: the whole cluster, up to its limit
        assert sample(page, "poolwise_pool_allocation", tree="default", pool="/A", kind="cpu") == 20.0
        assert sample(page, "poolwise_pool_reservation", tree="default", pool="/A", kind="cpu") == 60.0
        assert sample(page, "poolwise_queue_gangs", tree="default", pool="/A", queue="pending") == 0.0
        assert sample(page, "poolwise_pool_starvation_status", tree="default", pool="/A") == 0.0
        assert sample(page, "poolwise_admission_wait_seconds_count", tree="default", pool="/A") == 1.0
        # counters of what has not happened yet read 0 for each leaf pool, not "no data"
        assert sample(page, "poolwise_gangs_timed_out_total", tree="default", pool="/A") == 0.0
        for cause in ("placement_timeout", "preempted"):
            assert sample(page, "poolwise_gangs_requeued_total", tree="default", pool="/A", cause=cause) == 0.0
        for reason in ("over_entitlement", "lower_priority"):
            assert sample(page, "poolwise_preemptions_total", tree="default", pool="/A", reason=reason) == 0.0
        for service in ("tree", "admission", "preemption"):
            assert sample(page, "poolwise_lease_held", service=service) == 1.0
            assert sample(page, "poolwise_up_child_scraped", service=service) == 1.0
            assert (sample(page, "poolwise_process_resident_memory_bytes", service=service) or 0) > 1e7
        refused = re.findall(r'^poolwise_inputs_rejected_total\{rule="\w+",service="tree",tree="default"\} (\S+)$',
                             page, re.MULTILINE)
        assert refused == ["1.0"], refused  # the tree service's refusal of /A/X, under its rule
        for service in ("tree", "admission", "preemption"):
            lag = sample(page, "poolwise_consumer_lag_events", service=service)
            assert lag is not None and lag >= 0
        assert len(re.findall(r"^# TYPE poolwise_pool_entitlement ", page, re.MULTILINE)) == 1  # merged

        status, kind, body = fetch(port, "/healthz")
        assert status == 200 and json.loads(body)["alive"] is True
        ready = wait_for(lambda: (answer := fetch(port, "/readyz"))[0] == 200 and answer, "up's /readyz 200")
        services = json.loads(ready[2])["services"]
        assert {name: s["role"] for name, s in services.items()} == dict.fromkeys(("tree", "admission",
                                                                                "preemption"), "leading")
        status, kind, body = fetch(port, "/api/nothing")
        assert (status, kind, json.loads(body)["error"]) == (404, "application/json", "not found")
        status, _, body = fetch(port, "/metrics", method="POST")
        assert status == 405 and "read-only" in json.loads(body)["error"]
        assert "Traceback" not in up.stderr

        standby_port = free_port()
        err = (tmp_path / "standby.err").open("wb")
        standby = subprocess.Popen([POOLWISE, "serve", "admission", "--data-dir", str(tmp_path / "data"),
                                    "--http-port", str(standby_port)], cwd=tmp_path, env=clean_env(),
                                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
        try:
            def standby_ready() -> dict[str, Any] | None:
                try:
                    status, _, body = fetch(standby_port, "/readyz")
                except OSError:
                    return None
                return json.loads(body) if status == 200 else None

            answer = wait_for(standby_ready, "the standby's /readyz 200")
            assert answer["services"]["admission"]["role"] == "standby"
            _, _, page = fetch(standby_port, "/metrics")
            assert sample(page, "poolwise_lease_held", service="admission") == 0.0
            # a warm standby folds the log too: the same pool numbers as the leader's
            assert sample(page, "poolwise_pool_allocation", tree="default", pool="/A", kind="cpu") == 20.0
        finally:
            standby.send_signal(signal.SIGTERM)
            try:
                standby.wait(WAIT)
            except subprocess.TimeoutExpired:
                standby.kill()
                standby.wait(WAIT)
            err.close()
            stop_service_processes({standby.pid})
        assert "Traceback" not in (tmp_path / "standby.err").read_text()


@pytest.mark.anyio
async def test_a_silent_client_holds_no_one_up_and_bad_requests_get_json() -> None:
    async def hello() -> Response:
        return Response(200, b"hi\n", "text/plain")

    async def broken() -> Response:
        raise RuntimeError("a defect")

    async with anyio.create_task_group() as tg:
        port = await tg.start(serve_http, "127.0.0.1", 0, {"/hello": hello, "/broken": broken})
        async with await anyio.connect_tcp("127.0.0.1", port):  # connected, sends nothing
            with anyio.fail_after(3):
                assert await get("127.0.0.1", port, "/hello") == (200, b"hi\n")
        status, body = await get("127.0.0.1", port, "/broken")
        assert status == 500 and json.loads(body) == {"error": "internal error", "detail": "RuntimeError"}
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            await stream.send(b"NONSENSE\r\n\r\n")
            data = b""
            with anyio.fail_after(3):
                try:
                    while True:
                        data += await stream.receive()
                except anyio.EndOfStream:
                    pass
        assert data.startswith(b"HTTP/1.1 400 ") and b'"error": "malformed request"' in data
        tg.cancel_scope.cancel()


def test_pages_merge_family_by_family() -> None:
    one = b'# HELP m a metric\n# TYPE m gauge\nm{service="a"} 1.0\n# HELP n other\n# TYPE n counter\nn_total 2.0\n'
    two = b'# HELP m a metric\n# TYPE m gauge\nm{service="b"} 3.0\n'
    assert merge([one, two]).decode().splitlines() == [
        "# HELP m a metric", "# TYPE m gauge", 'm{service="a"} 1.0', 'm{service="b"} 3.0',
        "# HELP n other", "# TYPE n counter", "n_total 2.0"]
