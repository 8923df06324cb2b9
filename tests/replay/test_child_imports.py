"""The replay's child process (worker.py) holds what its fold needs, not the tree service's
projections (DuckDB, pyarrow), which only the reading process's tree fold brings: the child
imports `services.tools.replay` and its worker module, so neither may import `services.tree.service`
at module level (before 2026-11-28 `verify.py` and `derive.py` did, and each child mapped both
libraries: ~40 MB of its RSS)."""

from __future__ import annotations

from pathlib import Path

import anyio

import services.tree.service  # (this process holds the projections, as the replay's parent does)
from services.common.memlog import MemoryLog
from services.tools.replay import worker
from services.tools.replay.verify import TREE
from services.tools.replay_process import ChildProcess
from tests.replay.biglog import build

LIBRARIES = ("duckdb", "pyarrow", "libarrow")


def mapped(pid: int | str) -> set[str]:
    """Which of `LIBRARIES` the process has mapped."""
    maps = Path(f"/proc/{pid}/maps").read_text()
    return {name for name in LIBRARIES if name in maps}


def test_the_child_maps_no_projection_library() -> None:
    async def rows() -> list[tuple[int, str, bytes]]:
        log = MemoryLog()
        await build(log, 20, per_round=10, leaves=2)
        return [(s.seq, s.subject, s.data) for s in await log.read(1)]

    piece = anyio.run(rows, backend="asyncio")
    assert {"duckdb", "pyarrow"} <= mapped("self")  # (what is looked for is seen where it is)
    child = ChildProcess()
    child.start()
    try:
        child.send(("start", None, None, [], None, True, None))  # (snapshots sent whole: no source)
        child.send(("piece", piece))
        done = worker.take(child)  # the piece folded: every module of the fold imported
        assert done.events > len(piece) and done.matched.get("GangFinished")  # (its own records, read back)
        assert child.process.pid is not None and mapped(child.process.pid) == set()
    finally:
        child.stop()


def test_the_tree_is_named_as_its_service_names_itself() -> None:
    assert TREE == services.tree.service.SERVICE  # (verify.py names it without importing that module)
