"""A nats-server of a test's own, on a config the test writes (the deploy files included from
it), and what the server refuses a client: the tests of deploy/nats/ (roles, teams, TLS)."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import nats

from services.common.natsserver import find_nats_server

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "nats"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def nats_server(where: Path, config: str, *, env: Mapping[str, str] = {}, include: Iterable[str] = (),
                port: int | None = None) -> Iterator[int]:
    """nats-server on `config` (written to `where/server.conf`; `{port}` and `{store}` filled in),
    with the deploy files `include` copied beside it, variables `env` set; yields its port once it
    listens. Stopped at the end."""
    for name in include:
        shutil.copy(DEPLOY / name, where / name)
    port = port or free_port()
    (where / "server.conf").write_text(config.replace("{port}", str(port)).replace("{store}", str(where / "js")))
    log = where / "server.log"
    with log.open("wb") as out:
        process = subprocess.Popen([find_nats_server(), "-c", str(where / "server.conf")], env={**os.environ, **env},
                                   stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError(f"nats-server did not start on {where / 'server.conf'}: "
                                       f"{log.read_text()[-2000:]}") from None
                time.sleep(0.05)
        yield port
    finally:
        process.terminate()
        process.wait(timeout=10)


_VIOLATION = re.compile(r'permissions violation for (publish|subscription) to "?([^"\s]+)"?', re.IGNORECASE)


async def refusals(url: str, *, publish: Sequence[str] = (), subscribe: Sequence[str] = (),
                   **options: Any) -> set[tuple[str, str]]:
    """What the server refuses a client at `url` (`options`: nats-py's, e.g. credentials) of
    publishing on each of `publish` and subscribing to each of `subscribe`: `("publish", subject)`
    and `("subscribe", subject)` for each permissions violation it reports. Publishes carry `{}`:
    give only subjects where a message does no harm when allowed."""
    errors: list[str] = []

    async def on_error(error: Exception) -> None:
        errors.append(str(error))

    nc = await nats.connect(url, error_cb=on_error, max_reconnect_attempts=0, **options)
    try:
        for subject in subscribe:
            await nc.subscribe(subject)
        for subject in publish:
            await nc.publish(subject, b"{}")
        await nc.flush()
        # a refusal comes back at once, in order: wait until none came for a while
        seen, quiet_since = 0, time.monotonic()
        with anyio.move_on_after(5):
            while time.monotonic() - quiet_since < 0.5:
                await anyio.sleep(0.05)
                if len(errors) != seen:
                    seen, quiet_since = len(errors), time.monotonic()
    finally:
        await nc.close()
    # nats-py gives the server's message in lower case: the subject as it was asked
    asked = {s.lower(): s for s in (*publish, *subscribe)}
    found = set()
    for error in errors:
        match = _VIOLATION.search(error)
        if match:
            kind = "publish" if match.group(1).lower() == "publish" else "subscribe"
            found.add((kind, asked.get(match.group(2).lower(), match.group(2))))
    return found
