"""The id record (`UsedIds`) alone: CPU per add and per check, RSS, and a snapshot of it.

    python -m bench.id_record [N] [--phase add|snapshot]

`add`: N ids added (as a fold adds them: gang and task ids), then N fresh ids checked and N used
ones; prints CPU per operation (process time) and the process's RSS after (from /proc). With the
file-backed runs when the code has them (`services.common.id_runs`), in a temporary data dir.
`snapshot`: a snapshot of N ids' record: its bytes (and its runs' bytes, stored apart) and the
CPU to load it as a restart does (a new process's run store on the same data dir: the runs are
read back from their files and checked against their keys). Works on the code before the change
too (`PYTHONPATH=<worktree>`), to compare. Prints one JSON line.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _file_store(directory: Path) -> Any:
    try:
        from services.common import id_runs
    except ImportError:
        return None
    return id_runs.install(directory)


def add_and_check(n: int) -> dict[str, Any]:
    from services.tree.domain.used_ids import UsedIds

    directory = Path(tempfile.mkdtemp(prefix="bench-ids-"))
    try:
        files = _file_store(directory) is not None
        base = rss_mb()
        ids = UsedIds()
        names = [f"gang-{i:09d}/{i % 3}" for i in range(n)]
        began = time.process_time()
        for name in names:
            ids.add(name)
        added = time.process_time() - began
        del names
        fresh = [f"fresh-{i:09d}/{i % 3}" for i in range(n)]
        began = time.process_time()
        hits = sum(1 for name in fresh if name in ids)
        checked_fresh = time.process_time() - began
        del fresh
        used = [f"gang-{i:09d}/{i % 3}" for i in range(0, n)]
        began = time.process_time()
        found = sum(1 for name in used if name in ids)
        checked_used = time.process_time() - began
        del used
        assert hits == 0 and found == n, (hits, found)
        return {"n": n, "files": files, "add_us": added / n * 1e6, "fresh_us": checked_fresh / n * 1e6,
                "used_us": checked_used / n * 1e6, "rss_mb_after": rss_mb(), "rss_mb_grown": rss_mb() - base,
                "nbytes": ids.nbytes}
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def snapshot(n: int) -> dict[str, Any]:
    import anyio

    from services.common import snapshots
    from services.tree.domain.used_ids import UsedIds

    directory = Path(tempfile.mkdtemp(prefix="bench-ids-"))
    try:
        files = _file_store(directory) is not None
        ids = UsedIds(f"gang-{i:09d}/{i % 3}" for i in range(n))
        store = snapshots.MemorySnapshots()
        began = time.process_time()
        data = snapshots.Snapshot("admission", 1, "bench", ids).encode()
        encoded = time.process_time() - began
        runs_bytes = 0
        if files:
            keys = snapshots.split_pickled(snapshots.pickled(ids))[0]
            runs = snapshots.runs_to_save(None, keys)
            anyio.run(lambda: store.save("admission", 1, data, runs))
            runs_bytes = sum(len(v) for v in store.runs.values())
            from services.common import id_runs
            from services.tree.domain import used_ids

            used_ids.use_store(id_runs.FileRuns(directory))  # a restart: nothing alive, the files there
        else:
            anyio.run(lambda: store.save("admission", 1, data))
        del ids
        began = time.process_time()
        loaded, _ = anyio.run(lambda: snapshots.load_newest(store, "admission", "bench"))
        load_cpu = time.process_time() - began
        assert loaded is not None and f"gang-{n - 1:09d}/{(n - 1) % 3}" in loaded.state
        return {"n": n, "files": files, "snapshot_bytes": len(data), "runs_bytes": runs_bytes,
                "encode_cpu_s": encoded, "load_cpu_s": load_cpu, "rss_mb_after_load": rss_mb()}
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    n = int(args[0]) if args else 3_000_000
    phase = "snapshot" if "--phase=snapshot" in sys.argv or "snapshot" in sys.argv[1:] else "add"
    print(json.dumps(snapshot(n) if phase == "snapshot" else add_and_check(n)))


if __name__ == "__main__":
    main()
