"""The derivation process started before the replay imports its modules (`poolwise replay` on a
long log: `replay_cmd.early_child`) is the one the replay folds in, and it is stopped whatever
becomes of the replay: used, not wanted after all, or the replay failing first."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from services.common.memlog import MemoryLog
from services.tools.cli.errors import leaves
from services.tools.cli.replay_cmd import early_child
from services.tools.replay.reader import verify_log
from services.tools.replay.verify import Verifier
from services.tools.replay_process import PROCESS_FROM, REPLAY_CHILD, ChildProcess, started_child, wants_child
from tests.replay.biglog import build


@pytest.fixture
def starts(monkeypatch: pytest.MonkeyPatch) -> list[ChildProcess]:
    """Every derivation process started, in order."""
    started: list[ChildProcess] = []
    start = ChildProcess.start

    def counted(self: ChildProcess) -> None:
        started.append(self)
        start(self)

    monkeypatch.setattr(ChildProcess, "start", counted)
    return started


async def _log() -> MemoryLog:
    log = MemoryLog()
    await build(log, 60, per_round=20, leaves=2)
    return log


def test_the_child_runs_the_worker_it_names() -> None:
    from services.tools.replay import worker

    module, name = REPLAY_CHILD.split(":")
    assert module == worker.__name__ and getattr(worker, name) is worker.child


def test_a_log_wants_a_child_from_its_length() -> None:
    assert PROCESS_FROM == 50_000
    assert wants_child(1, 50_000, None) and not wants_child(1, 49_999, None)
    assert wants_child(101, 150, 50) and not wants_child(101, 149, 50)


def test_the_replay_folds_in_the_child_it_was_given(starts: list[ChildProcess]) -> None:
    async def main() -> tuple[Any, Any]:
        log = await _log()
        alone = await verify_log(log, process_from=10**9)
        given = await early_child(log, to_seq=None, from_seq=None, process_from=1)  # type: ignore[arg-type]
        assert given is not None and starts == [given]
        return alone, await verify_log(log, process_from=1, chunk=40, child=given)

    alone, through_it = anyio.run(main, backend="asyncio")
    assert len(starts) == 1  # (no second child: the one given folded the log)
    assert through_it.ok and through_it.events == alone.events > 0
    assert through_it.to_dict() == alone.to_dict()
    assert not starts[0].process.is_alive()


def test_a_child_not_wanted_after_all_is_stopped_before_the_fold(starts: list[ChildProcess],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    alive_while_folding: list[bool] = []
    feed = Verifier.feed

    def fed(self: Verifier, *args: Any, **kwargs: Any) -> None:
        alive_while_folding.append(starts[0].process.is_alive())
        feed(self, *args, **kwargs)

    monkeypatch.setattr(Verifier, "feed", fed)

    async def main() -> Any:
        log = await _log()
        return await verify_log(log, process_from=10**9, child=await started_child())

    report = anyio.run(main, backend="asyncio")
    assert report.ok and len(starts) == 1 and not starts[0].process.is_alive()
    assert alive_while_folding and not any(alive_while_folding)  # (its memory not held meanwhile)


def test_no_child_for_a_short_log_or_a_start_from_snapshots(starts: list[ChildProcess]) -> None:
    async def main() -> list[Any]:
        log = await _log()
        return [await early_child(log, to_seq=None, from_seq=None, process_from=None),  # type: ignore[arg-type]
                await early_child(log, to_seq=5, from_seq=None, process_from=10),  # type: ignore[arg-type]
                await early_child(log, to_seq=None, from_seq=3, process_from=1)]  # type: ignore[arg-type]

    assert anyio.run(main, backend="asyncio") == [None, None, None] and starts == []


def test_a_replay_that_fails_before_folding_stops_the_child(starts: list[ChildProcess]) -> None:
    class Broken(MemoryLog):
        broken = False

        async def last_seq(self) -> int:  # (the replay's first question: before any piece is read)
            if self.broken:
                raise RuntimeError("the log went away")
            return await super().last_seq()

    async def main() -> None:
        log = Broken()
        await build(log, 10, per_round=10, leaves=2)
        log.broken = True
        await verify_log(log, process_from=1, child=await started_child())

    with pytest.raises(BaseException) as raised:
        anyio.run(main, backend="asyncio")
    assert [str(e) for e in leaves(raised.value)] == ["the log went away"]
    assert len(starts) == 1 and not starts[0].process.is_alive()
