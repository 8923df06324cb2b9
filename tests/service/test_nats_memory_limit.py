"""The embedded nats-server runs with a Go soft memory limit (GOMEMLIMIT): docs/performance.md,
"nats-server memory". These check that the setting reaches the server, not how much memory it uses."""

from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path

import pytest

from services.common.natsserver import (
    DEFAULT_MEMORY_LIMIT,
    ENV_MEMORY_LIMIT,
    GOMEMLIMIT,
    EmbeddedNats,
    NatsServerError,
    server_environment,
)

MIB = 1024 * 1024


def test_the_default_limit_is_set() -> None:
    env = server_environment(environ={"PATH": "/bin"})
    assert env == {"PATH": "/bin", GOMEMLIMIT: DEFAULT_MEMORY_LIMIT}


def test_the_environment_variable_overrides_the_default() -> None:
    assert server_environment(environ={ENV_MEMORY_LIMIT: "512MiB"})[GOMEMLIMIT] == "512MiB"
    assert server_environment(environ={ENV_MEMORY_LIMIT: " 2147483648 "})[GOMEMLIMIT] == "2147483648"


def test_an_explicit_limit_overrides_the_environment_variable() -> None:
    assert server_environment("256MiB", environ={ENV_MEMORY_LIMIT: "512MiB"})[GOMEMLIMIT] == "256MiB"


@pytest.mark.parametrize("off", ["off", "OFF", ""])
def test_off_sets_no_limit(off: str) -> None:
    assert GOMEMLIMIT not in server_environment(environ={ENV_MEMORY_LIMIT: off})
    assert GOMEMLIMIT not in server_environment(off, environ={})


def test_a_gomemlimit_already_set_is_kept() -> None:
    env = server_environment("256MiB", environ={GOMEMLIMIT: "3GiB", ENV_MEMORY_LIMIT: "512MiB"})
    assert env[GOMEMLIMIT] == "3GiB"


@pytest.mark.parametrize("bad", ["1GB", "lots", "-5", "1.5GiB"])
def test_a_size_go_would_refuse_is_refused_here(bad: str) -> None:
    with pytest.raises(NatsServerError, match=ENV_MEMORY_LIMIT):
        server_environment(environ={ENV_MEMORY_LIMIT: bad})


def _environ_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode(errors="replace").partition("=")[::2] for item in raw if item)


def _jetstream_max_memory(server: EmbeddedNats) -> int:
    with urllib.request.urlopen(f"{server.monitoring_url}/varz", timeout=5) as response:
        return int(json.loads(response.read())["jetstream"]["config"]["max_memory"])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/<pid>/environ")
@pytest.mark.parametrize(("setting", "limit"), [("256MiB", 256 * MIB), ("off", None)])
def test_the_embedded_server_runs_with_the_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, setting: str, limit: int | None
) -> None:
    monkeypatch.delenv(GOMEMLIMIT, raising=False)
    monkeypatch.setenv(ENV_MEMORY_LIMIT, setting)
    with EmbeddedNats(tmp_path) as server:
        assert server.pid is not None
        environ = _environ_of(server.pid)
        max_memory = _jetstream_max_memory(server)
    if limit is None:
        assert GOMEMLIMIT not in environ
        assert max_memory > 256 * MIB * 3 // 4  # sized from the machine's memory
    else:
        assert environ[GOMEMLIMIT] == setting
        # the server's Go runtime took it: nats-server sizes JetStream's memory storage from it (75%)
        assert max_memory == limit * 3 // 4
