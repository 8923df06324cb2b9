"""`poolwise up --http-port P`: one port for the metrics and health of every service process.

Each child (`poolwise serve <service>`) serves its own routes on a loopback port of its own, any
free one (`--http-port 0`), and says which on stderr (`http_line`); `up` reads that line
(`Children.heard`) and, on its own port, answers:

- `/metrics`: every child's page, fetched when scraped (concurrently, `FETCH_WITHIN` each) and
  merged family by family (`merge`: one HELP/TYPE per metric, every child's samples under it; the
  children's series differ by their `service` label), plus `poolwise_up_child_scraped{service}`
  (1 when the child answered this scrape);
- `/healthz`: 200 while `up` answers (its children's ports in the body);
- `/readyz`: 200 when every child answered its own `/readyz` with 200; else 503 with each one's
  answer.

A child restarted by the supervisor comes back on another port and says so: the next scrape
follows it. The services' processes are never called into beyond those GETs."""

from __future__ import annotations

import json
import re
from typing import Any

import anyio

from services.common.health_http import Response, Route, get, json_response
from services.common.metrics import CONTENT_TYPE

FETCH_WITHIN = 5.0  # seconds for a child to answer one GET
HTTP_LINE = re.compile(r"^poolwise: (\w+) http on (\S+):(\d+)$")


def http_line(names: list[str], host: str, port: int) -> str:
    """What a service process says once its HTTP port is bound."""
    return f"poolwise: {','.join(names)} http on {host}:{port}"


class Children:
    """Where each child of `up` serves its routes, as its stderr said last."""

    def __init__(self, names: list[str]) -> None:
        self.names = list(names)
        self.where: dict[str, tuple[str, int]] = {}

    def heard(self, line: str) -> None:
        found = HTTP_LINE.match(line.strip())
        if found is not None and found.group(1) in self.names:
            self.where[found.group(1)] = (found.group(2), int(found.group(3)))

    async def fetch(self, path: str) -> dict[str, tuple[int, bytes] | None]:
        """GET `path` of every child at once: (status, body), or None for a child not heard of or
        not answering."""
        got: dict[str, tuple[int, bytes] | None] = dict.fromkeys(self.names)

        async def one(name: str, host: str, port: int) -> None:
            try:
                got[name] = await get(host, port, path, FETCH_WITHIN)
            except (OSError, TimeoutError):
                got[name] = None

        async with anyio.create_task_group() as tg:
            for name, (host, port) in list(self.where.items()):
                tg.start_soon(one, name, host, port)
        return got


def merge(pages: list[bytes]) -> bytes:
    """Prometheus text pages merged: each family once (its HELP and TYPE from the first page that
    has it), with the samples of every page, in the order first seen."""
    families: dict[str, tuple[list[str], list[str]]] = {}
    current: str | None = None
    for page in pages:
        for line in page.decode("utf-8").splitlines():
            if not line.strip():
                continue
            if line.startswith("# "):
                parts = line.split(" ", 3)
                if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                    current = parts[2]
                    heads, _ = families.setdefault(current, ([], []))
                    if not any(h.split(" ", 3)[1] == parts[1] for h in heads):
                        heads.append(line)
                continue
            if current is None:  # a sample before any family: its own name is its family
                current = re.split(r"[{ ]", line, maxsplit=1)[0]
            families.setdefault(current, ([], []))[1].append(line)
        current = None
    out = [line for heads, samples in families.values() for line in (*heads, *samples)]
    return ("\n".join(out) + "\n").encode("utf-8")


def up_routes(children: Children) -> dict[str, Route]:
    async def page() -> Response:
        got = await children.fetch("/metrics")
        pages = [answer[1] for answer in got.values() if answer is not None and answer[0] == 200]
        scraped = ["# HELP poolwise_up_child_scraped 1 when the service's process answered this scrape",
                   "# TYPE poolwise_up_child_scraped gauge"]
        scraped += [f'poolwise_up_child_scraped{{service="{name}"}} '
                    f'{1.0 if answer is not None and answer[0] == 200 else 0.0}' for name, answer in got.items()]
        return Response(200, merge([*pages, ("\n".join(scraped) + "\n").encode()]), CONTENT_TYPE)

    async def healthz() -> Response:
        return json_response(200, {"alive": True, "services": {name: f"{where[0]}:{where[1]}"
                                                               for name, where in children.where.items()}})

    async def readyz() -> Response:
        got = await children.fetch("/readyz")
        services: dict[str, Any] = {}
        for name, answer in got.items():
            if answer is None:
                services[name] = {"ready": False, "why": "not answering"}
                continue
            try:
                body = json.loads(answer[1])
            except ValueError:
                body = {}
            detail = body.get("services", {}).get(name) if isinstance(body, dict) else None
            services[name] = {"ready": answer[0] == 200, **(detail or {})}
        ready = all(s["ready"] for s in services.values())
        return json_response(200 if ready else 503, {"ready": ready, "services": services})

    return {"/metrics": page, "/healthz": healthz, "/readyz": readyz}
