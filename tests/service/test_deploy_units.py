"""deploy/systemd's units against the defects issue 19 found in them (no systemd here to load them):
`NATS_URL` given in `Environment=` with `${SERVICE_PASSWORD}` (which systemd does not expand there)
and as a list the connection code refused, the third node missing from it, and no `--replicas`.
What the units now say: `NATS_URL` from `EnvironmentFile=/etc/poolwise/env`, the line to put
there naming all three nodes and read by the code that connects, `serve <service> --replicas 3`."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from services.common.connection import nats_servers

SYSTEMD = Path(__file__).resolve().parents[2] / "deploy" / "systemd"
SERVICES = ("tree", "admission", "preemption")


def directives(text: str, key: str) -> list[str]:
    return [line.split("=", 1)[1] for line in text.splitlines() if line.startswith(f"{key}=")]


@pytest.mark.parametrize("service", SERVICES)
def test_a_unit_takes_nats_url_from_its_environment_file_and_runs_its_service_with_three_replicas(
        service: str) -> None:
    unit = (SYSTEMD / f"poolwise-{service}.service").read_text()
    assert directives(unit, "EnvironmentFile") == ["/etc/poolwise/env"]
    assert not [value for value in directives(unit, "Environment") if "$" in value]  # not expanded by systemd
    [command] = directives(unit, "ExecStart")
    args = shlex.split(command)
    assert args[0] == "/opt/poolwise/.venv/bin/poolwise" and args[1:3] == ["serve", service], args
    assert args[args.index("--replicas") + 1] == "3", args
    assert "NATS_URL" not in command and "--nats-url" not in command  # the password stays in the file


@pytest.mark.parametrize("service", SERVICES)
def test_the_nats_url_a_unit_asks_for_names_the_three_nodes_and_is_read_by_the_connection_code(
        service: str) -> None:
    unit = (SYSTEMD / f"poolwise-{service}.service").read_text()
    [line] = [m.group(1) for m in re.finditer(r"^#\s+NATS_URL=(\S+)$", unit, re.M)]
    servers = nats_servers(line)  # ConnectionError, as "invalid connect url option" was, if it cannot
    assert [re.sub(r".*@", "", s) for s in servers] == [f"poolwise-n{n}:4222" for n in (1, 2, 3)]
    assert all(s.startswith("nats://service:") for s in servers)
    readme = (SYSTEMD.parent / "README.md").read_text()
    assert f"NATS_URL={line}" in readme  # deploy/README.md tells the operator the same line
