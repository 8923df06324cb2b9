"""`services.common.supervisor` with small Python children: ready once every child is up, restarts
with a backoff, gives up on a child that keeps failing before it is up, stops its children (SIGTERM,
then SIGKILL) when cancelled, and splits their stderr into lines."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import anyio
import pytest

from services.common.supervisor import MAX_LINE, Child, GaveUp, LineReader, Restarts, Supervisor, describe_exit
from tests.cli.helpers import WAIT, alive

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]

QUICK = Restarts(first=0.01, factor=2.0, most=0.05, reset_after=600.0, start_failures=3, stop_timeout=WAIT)


def python(name: str, code: str) -> Child:
    return Child(name, (sys.executable, "-c", code))


SLEEPER = "import sys, time; print('up', file=sys.stderr, flush=True); time.sleep(600)"


class Heard:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []
        self.said: list[str] = []

    def supervisor(self, children: Sequence[Child], restarts: Restarts = QUICK) -> Supervisor:
        return Supervisor(children, is_up=lambda _, line: line == "up", on_line=lambda *heard: self.lines.append(heard),
                          echo=self.said.append, restarts=restarts)


async def test_ready_once_every_child_is_up_and_stopped_when_cancelled() -> None:
    heard = Heard()
    supervisor = heard.supervisor([python("a", SLEEPER), python("b", SLEEPER)])
    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:
            pids = await tg.start(supervisor.run)
            assert set(pids) == {"a", "b"} and all(alive(pid) for pid in pids.values())
            assert supervisor.pids == pids
            assert sorted(heard.lines) == [("a", "up"), ("b", "up")]
            tg.cancel_scope.cancel()
    assert not any(alive(pid) for pid in pids.values())  # stopped and waited for
    assert supervisor.pids == {}
    assert sorted(heard.said) == sorted(f"{name} started (pid {pid})" for name, pid in pids.items())


async def test_a_child_that_ignores_sigterm_is_killed() -> None:
    stubborn = ("import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                "print('up', file=sys.stderr, flush=True); time.sleep(600)")
    heard = Heard()
    supervisor = heard.supervisor([python("a", stubborn)], Restarts(stop_timeout=0.2))
    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:
            pids = await tg.start(supervisor.run)
            tg.cancel_scope.cancel()
    assert not alive(pids["a"])
    assert "a did not stop within 0.2 s of SIGTERM; killing it" in heard.said


async def test_restarts_a_child_and_gives_up_when_it_keeps_failing_at_start(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    # run 1: up, then exits (restarted, not a failure); runs 2-4: exit before being up (3 failures in a row)
    flaky = (f"import pathlib, sys; p = pathlib.Path({str(runs)!r}); n = len(p.read_text()) if p.exists() else 0; "
             "p.write_text('x' * (n + 1)); print('up' if n == 0 else f'run {n + 1} failing', file=sys.stderr); "
             "sys.exit(3 if n == 0 else 2)")
    heard = Heard()
    supervisor = heard.supervisor([python("flaky", flaky), python("steady", SLEEPER)])
    with anyio.fail_after(WAIT), pytest.raises(GaveUp) as raised:
        await supervisor.run()
    assert str(raised.value) == ("flaky exited before it was ready 3 times in a row "
                                 "(last: exit code 2; its last line: run 4 failing)")
    assert runs.read_text() == "xxxx"
    restarts = [said for said in heard.said if said.startswith("flaky exited")]
    assert len(restarts) == 3 and "(exit code 3)" in restarts[0] and "(exit code 2)" in restarts[1]
    assert [said.rsplit(" ", 2)[-2] for said in restarts] == ["0.01", "0.02", "0.04"]  # the backoff doubles
    started = [int(said.rsplit(" ", 1)[-1].strip("()")) for said in heard.said if said.startswith("steady started")]
    assert len(started) == 1 and not alive(started[0])  # the other child was stopped on the way out


async def test_a_child_that_cannot_be_run_gives_up_at_once(tmp_path: Path) -> None:
    heard = Heard()
    supervisor = heard.supervisor([Child("ghost", (str(tmp_path / "no-such-program"),))])
    with anyio.fail_after(WAIT), pytest.raises(GaveUp, match="cannot start ghost"):
        await supervisor.run()


class Chunks:
    """A byte stream that delivers the given chunks, then ends."""

    def __init__(self, *chunks: bytes) -> None:
        self.chunks = list(chunks)

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if not self.chunks:
            raise anyio.EndOfStream
        return self.chunks.pop(0)

    async def aclose(self) -> None:
        pass


async def test_lines_are_split_across_chunks() -> None:
    chunks = (b"one\ntw", b"o\r\n\nthr", b"ee \xff\n", b"y" * MAX_LINE, b"y" * 10 + b"\nlast")
    lines = LineReader(Chunks(*chunks))  # type: ignore[arg-type]
    found = []
    while (line := await lines.receive()) is not None:
        found.append(line)
    assert found == ["one", "two", "", "three \ufffd", "y" * MAX_LINE, "y" * 10, "last"]


def test_exits_are_described() -> None:
    assert describe_exit(0) == "exit code 0"
    assert describe_exit(-9) == "killed by SIGKILL"
