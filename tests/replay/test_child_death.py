"""A replay whose derivation process dies ends at once with one `ChildFailed` naming its exit code
(review: it raised a group of broken pipes and streams; it must never hang or report OK)."""

from __future__ import annotations

import anyio
import pytest

from services.common.memlog import MemoryLog
from services.tools.replay import worker
from services.tools.replay.reader import verify_log
from services.tools.replay_process import ChildProcess
from tests.replay.biglog import build


def test_a_killed_derivation_process_fails_the_replay_with_its_exit_code(monkeypatch: pytest.MonkeyPatch) -> None:
    started = ChildProcess.start

    def start_then_kill(self: ChildProcess) -> None:
        started(self)
        self.process.kill()

    monkeypatch.setattr(ChildProcess, "start", start_then_kill)

    async def main() -> None:
        log = MemoryLog()
        await build(log, 200, per_round=50, leaves=3)
        with anyio.fail_after(60):
            await verify_log(log, process_from=1, chunk=50)

    with pytest.raises(worker.ChildFailed, match=r"exit code -9"):
        anyio.run(main, backend="asyncio")
