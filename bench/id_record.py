"""The id record (`UsedIds`) alone: CPU per add and per check, RSS, and a snapshot of it.

    python -m bench.id_record [N] [snapshot|stop]

`add`: N ids added (as a fold adds them: gang and task ids), then N fresh ids checked and N used
ones; prints CPU per operation (process time) and the process's RSS after (from /proc). With the
file-backed runs when the code has them (`services.common.id_runs`), in a temporary data dir.
`snapshot`: a snapshot of N ids' record, taken as a service takes one (its filter stored first
where the code does: `used_ids.freeze_filters`): its bytes (and its runs' and filter's bytes,
stored apart) and the CPU to load it as a restart does (a new process's run store on the same
data dir: the runs and filter read back from their files and checked against their keys; or on a
fresh one, fetched) and to answer the first check (`start_cpu_s`: both, what a start costs). Works
on the code before the change too (`PYTHONPATH=<worktree>`), to compare. `stop`: a clean stop's
save of that snapshot into a JetStream object store (a private nats-server), wall and CPU
seconds: with every run still to store (`all_to_store`: the save stores them), and, where the code
stores runs as they seal (`folding.store_runs_as_they_seal`), after that has stored them
(`runs_stored`: the save stores the filter and the snapshot). Prints one JSON line.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

STEP = 100_000


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _trimmed_rss() -> float:
    """RSS once the C heap's free pages are handed back, as the services do every few seconds
    (`services.common.runtime.give_back_memory`)."""
    import ctypes
    import gc

    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    return rss_mb()


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
        # the ids made 100,000 at a time, outside the timed loops (and their memory used again)
        added = checked_fresh = checked_used = 0.0
        hits = found = 0
        for start in range(0, n, STEP):
            names = [f"gang-{i:09d}/{i % 3}" for i in range(start, min(n, start + STEP))]
            began = time.process_time()
            for name in names:
                ids.add(name)
            added += time.process_time() - began
        for start in range(0, n, STEP):
            fresh = [f"fresh-{i:09d}/{i % 3}" for i in range(start, min(n, start + STEP))]
            began = time.process_time()
            hits += sum(1 for name in fresh if name in ids)
            checked_fresh += time.process_time() - began
        for start in range(0, n, STEP):
            used = [f"gang-{i:09d}/{i % 3}" for i in range(start, min(n, start + STEP))]
            began = time.process_time()
            found += sum(1 for name in used if name in ids)
            checked_used += time.process_time() - began
        assert hits == 0 and found == n, (hits, found)
        after = rss_mb()
        trimmed = _trimmed_rss()
        return {"n": n, "files": files, "add_us": added / n * 1e6, "fresh_us": checked_fresh / n * 1e6,
                "used_us": checked_used / n * 1e6, "rss_mb_after": after, "rss_mb_grown": after - base,
                "rss_mb_after_trim": trimmed, "nbytes": ids.nbytes}
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def snapshot(n: int) -> dict[str, Any]:
    """Snapshot a record of `n` ids into a directory, then load it in a new process (a restart),
    once with the runs in its data dir and once on a fresh one (fetched from the store)."""
    import pickle
    import subprocess

    import anyio

    from services.common import snapshots
    from services.tree.domain import used_ids
    from services.tree.domain.used_ids import UsedIds

    directory = Path(tempfile.mkdtemp(prefix="bench-ids-"))
    try:
        files = _file_store(directory / "runs") is not None
        ids = UsedIds(f"gang-{i:09d}/{i % 3}" for i in range(n))
        assert "fresh-0" not in ids  # (the filter made, as a service's checks have made it)
        store = snapshots.MemorySnapshots()
        began = time.process_time()
        freeze = getattr(used_ids, "freeze_filters", None)  # (what `folding.pickled_later` does first)
        if freeze is not None:
            freeze()
        data = snapshots.Snapshot("admission", 1, "bench", ids).encode()
        encoded = time.process_time() - began
        if files:
            keys = snapshots.split_pickled(snapshots.pickled(ids))[0]
            anyio.run(store.save, "admission", 1, data, snapshots.runs_to_save(None, keys))
        else:
            anyio.run(store.save, "admission", 1, data)
        (directory / "store.pickle").write_bytes(pickle.dumps((store.objects, getattr(store, "runs", {}))))
        result: dict[str, Any] = {"n": n, "files": files, "snapshot_bytes": len(data),
                                  "runs_bytes": sum(len(v) for v in getattr(store, "runs", {}).values()),
                                  "encode_cpu_s": encoded}
        del ids, store
        for where in ("runs", "fresh"):
            out = subprocess.run([sys.executable, __file__, str(n), "restart", str(directory), where],
                                 check=True, capture_output=True, text=True).stdout
            result.update({f"{k}_{where}": v for k, v in json.loads(out).items()})
            if not files:
                break
        return result
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def stop(n: int) -> dict[str, Any]:
    """A stop's save of a record of `n` ids into an object store, its runs all to store or stored
    already (see the module doc)."""
    import anyio
    import nats

    from services.common import snapshots
    from services.common.natsserver import EmbeddedNats
    from services.tree.domain import used_ids
    from services.tree.domain.used_ids import UsedIds

    directory = Path(tempfile.mkdtemp(prefix="bench-ids-"))
    try:
        _file_store(directory / "runs")
        ids = UsedIds(f"gang-{i:09d}/{i % 3}" for i in range(n))
        assert "fresh-0" not in ids
        freeze = getattr(used_ids, "freeze_filters", None)
        if freeze is not None:
            freeze()
        state = snapshots.pickled(ids)
        data = snapshots.Snapshot.encode_pickled("admission", 1, "bench", state)
        named = snapshots.runs_to_save(None, snapshots.split_pickled(state)[0])
        result: dict[str, Any] = {"n": n, "bytes_named": sum(len(b"".join(r.byte_chunks())) for r in named.values())}

        async def measure(bucket: str, ahead: bool) -> tuple[float, float]:
            nc = await nats.connect(server.url)
            try:
                store = snapshots.ObjectStoreSnapshots(nc.jetstream(), "S", bucket=bucket)
                if ahead:  # (what the running service did as the runs sealed)
                    await store.store_runs({k: r for k, r in named.items() if k in snapshots.named_in(state)[0]})
                wall, cpu = time.perf_counter(), time.process_time()
                await store.save("admission", 1, data, named)
                return time.perf_counter() - wall, time.process_time() - cpu
            finally:
                await nc.close()

        with EmbeddedNats(directory / "server") as server:
            result["all_to_store_wall_s"], result["all_to_store_cpu_s"] = anyio.run(measure, "bench_all", False)
            if hasattr(snapshots.ObjectStoreSnapshots, "store_runs"):
                result["runs_stored_wall_s"], result["runs_stored_cpu_s"] = anyio.run(measure, "bench_ahead", True)
        return result
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def restart(n: int, directory: Path, where: str) -> dict[str, Any]:
    """A new process loads the snapshot `snapshot` left in `directory` (its runs from the data dir
    `runs`, or fetched into a `fresh` one): CPU of the load and of the first check, RSS after."""
    import pickle

    import anyio

    from services.common import snapshots

    _file_store(directory / where)
    objects, runs = pickle.loads((directory / "store.pickle").read_bytes())
    store = snapshots.MemorySnapshots()
    store.objects = objects
    if runs:
        store.runs = runs
    del objects, runs
    base = _trimmed_rss()

    class Held:  # (asyncio makes a repr of a task's result: of this, not of the state)
        def __init__(self, value: Any) -> None:
            self.value = value

    async def load() -> Held:
        return Held(await snapshots.load_newest(store, "admission", "bench"))

    began = time.process_time()
    loaded, skipped = anyio.run(load).value
    load_cpu = time.process_time() - began
    assert loaded is not None, skipped
    began = time.process_time()
    assert f"gang-{n - 1:09d}/{(n - 1) % 3}" in loaded.state and "fresh-1" not in loaded.state
    first_check = time.process_time() - began  # (without a stored filter: made from the runs' CRCs here)
    return {"load_cpu_s": load_cpu, "first_check_cpu_s": first_check, "start_cpu_s": load_cpu + first_check,
            "rss_mb_grown": rss_mb() - base, "rss_mb_grown_after_trim": _trimmed_rss() - base}


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    n = int(args[0]) if args else 3_000_000
    if "restart" in args:
        print(json.dumps(restart(n, Path(args[2]), args[3])))
    elif "snapshot" in args:
        print(json.dumps(snapshot(n)))
    elif "stop" in args:
        print(json.dumps(stop(n)))
    else:
        print(json.dumps(add_and_check(n)))


if __name__ == "__main__":
    main()
