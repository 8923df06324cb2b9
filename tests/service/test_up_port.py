"""`poolwise up` keeps its embedded server's port across restarts when it is free (clients given
its URL, such as an SDK's NATS_URL, find it again), and takes any free port when it is not."""

from __future__ import annotations

import socket
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from services.common.natsserver import PORT_FILE, port_free, remembered_port
from services.launcher import nats_server

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


async def port_of_up(data_dir: Path) -> int:
    """The port a start of `up`'s server on `data_dir` gets (the server is stopped again)."""
    async with nats_server(data_dir, None) as server:
        port = urlsplit(server.url).port
        assert port is not None
        assert (data_dir / PORT_FILE).read_text().strip() == str(port)  # recorded while it runs
    return port


async def test_up_starts_its_server_on_the_same_port_again(tmp_path: Path) -> None:
    first = await port_of_up(tmp_path)
    assert remembered_port(tmp_path) == first  # stopped: its port is free again, and kept
    assert await port_of_up(tmp_path) == first
    assert await port_of_up(tmp_path) == first


async def test_a_port_taken_meanwhile_gives_another_port_which_is_kept_from_then_on(tmp_path: Path) -> None:
    first = await port_of_up(tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", first))
        taken.listen()
        assert not port_free("127.0.0.1", first)
        assert remembered_port(tmp_path) == -1
        second = await port_of_up(tmp_path)
    assert second != first
    assert await port_of_up(tmp_path) == second


@pytest.mark.parametrize("text", ["", "not a port", "0", "70000"])
async def test_an_unreadable_port_file_means_any_port(tmp_path: Path, text: str) -> None:
    (tmp_path / PORT_FILE).write_text(text)
    assert remembered_port(tmp_path) == -1
    port = await port_of_up(tmp_path)
    assert remembered_port(tmp_path) == port


async def test_a_port_taken_between_the_look_and_the_start_gives_another_port(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import services.launcher as launcher

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        monkeypatch.setattr(launcher, "remembered_port", lambda data_dir: busy)  # looked free, taken since
        port = await port_of_up(tmp_path)
    assert port != busy
