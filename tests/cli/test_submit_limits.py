"""What the CLI's clients say about the server and the message size: a gang too large for one
message is one line naming the rule (exit 2), not `internal error: MaxPayloadError`; NATS_URL may
name several servers, comma-separated, and any that answers will do."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.cli.helpers import clean_env, one_error_line, run

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]


def dead_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"nats://127.0.0.1:{sock.getsockname()[1]}"


async def test_a_gang_too_large_for_one_message_is_one_line_and_exit_2(fresh_stream: str, tmp_path: Path) -> None:
    result = run("submit", "--gang", "big", "--pool", "/ATG", "--tasks", "40000", "--resources", "cpu=1,memory=2",
                 cwd=tmp_path, env=clean_env(NATS_URL=fresh_stream))
    line = one_error_line(result)
    assert line.startswith("error: tasks: gang big: its 40000 members take "), line
    assert "[message_too_large]" in line and "same gang id and size=40000" in line, line


async def test_nats_url_may_be_a_list_of_servers(fresh_stream: str, tmp_path: Path) -> None:
    servers = f"{dead_url()},{fresh_stream}"
    submitted = run("submit", "--gang", "l1", "--pool", "/ATG", "--tasks", "2", "--resources", "cpu=1",
                    cwd=tmp_path, env=clean_env(NATS_URL=servers))
    assert submitted.code == 0, submitted.err
    assert submitted.out.startswith("submitted gang l1: 2 member(s)"), submitted.out
    # a command that asks a service: the connection is made (no service answers on this bare server)
    listed = run("pool", "list", cwd=tmp_path, env=clean_env(NATS_URL=servers))
    assert "the tree service is not running" in one_error_line(listed)


async def test_a_list_of_unreachable_servers_is_named_in_one_line(tmp_path: Path) -> None:
    one, two = dead_url(), dead_url()
    result = run("pool", "list", cwd=tmp_path, env=clean_env(NATS_URL=f"{one},{two}"))
    assert f"cannot reach NATS at {one},{two}" in one_error_line(result)
    result = run("submit", "--gang", "g", "--pool", "/ATG", "--resources", "cpu=1", cwd=tmp_path,
                 env=clean_env(NATS_URL=f"{one},,{two}"))
    assert "an empty NATS server URL in" in one_error_line(result)


async def test_serve_and_replay_take_a_list_too(fresh_stream: str, tmp_path: Path) -> None:
    one, two = dead_url(), dead_url()
    served = run("serve", "admission", "--nats-url", f"{one},{two}", "--data-dir", str(tmp_path / "data"),
                 cwd=tmp_path, timeout=60)
    assert f"cannot reach NATS at {one},{two} within 10 s" in one_error_line(served)
    replayed = run("replay", "--verify", "--nats-url", f"{one},{fresh_stream}", cwd=tmp_path)
    assert replayed.code == 0, replayed.out + replayed.err
    assert replayed.out.startswith("replay: "), replayed.out


def test_the_ready_line_shows_the_servers_without_passwords() -> None:
    from services.tools.cli.serve_cmd import ready_line

    line = ready_line(["tree"], "nats://svc:s3cret@n1:4222,nats://n2:4222", Path("data"))
    assert line.startswith("poolwise: tree ready on nats://svc:***@n1:4222,nats://n2:4222 (data dir data)"), line
    assert "s3cret" not in line
