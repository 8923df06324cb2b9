"""Snapshots of a service's folded state: a cache of the fold, never a source.

A snapshot is what a folder held after folding the log through position `seq`, with the
decisions it had made then that were not known to be in the log yet (`pending`), and the
`fingerprint` of the code that made it. A service starts from the newest snapshot whose
fingerprint is its own and folds only the tail after `seq`; one that is missing, corrupt, or made
by other code is passed over, and with none left the service folds the log from the start. So a
snapshot can make a start faster, never make a state different: the state from a snapshot and
its tail equals the state from the whole log (`tests/snapshots/`).

On JetStream snapshots live in the object store `poolwise_snapshots` (one object per snapshot,
`<stream>.<service>.<seq>`), replicated with the log, so a new machine finds them; the newest
`KEEP` of each service are kept. The in-memory log's twin is `MemorySnapshots`.

The modules: what a snapshot is in bytes, and the pickling of a state (`services.common.
snapshot_encoding`); where snapshots are kept (`services.common.snapshot_stores`); when a service
takes one (`services.common.snapshot_policy`); and here, the newest usable one found and loaded at
a start (`load_newest`) with the id runs it names (`runs_for`), and the runs a save stores
(`runs_to_save`). Every name of those modules is importable from here, as it was before they
were split out.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from services.common.snapshot_encoding import (
    FORMAT,
    Corrupt,
    Parts,
    Snapshot,
    code_fingerprint,
    named_in,
    optional_named,
    pickled,
    pickled_naming_files,
    runs_named,
    split_pickled,
    unpickled_from_files,
)
from services.common.snapshot_policy import SnapshotPolicy, policy_for
from services.common.snapshot_stores import (
    BUCKET,
    CREATE_ATTEMPTS,
    KEEP,
    RUN_GRACE,
    RUNS,
    MemorySnapshots,
    ObjectStoreSnapshots,
    SnapshotStore,
    to_delete,
    unreferenced,
)
from services.tree.domain import used_ids
from services.tree.domain.used_ids import IdFilter, Run

__all__ = [
    "BUCKET", "CREATE_ATTEMPTS", "FORMAT", "KEEP", "RUNS", "RUN_GRACE", "Anchored", "Corrupt", "MemorySnapshots",
    "ObjectStoreSnapshots", "Parts", "Snapshot", "SnapshotPolicy", "SnapshotStore", "Snapshotting",
    "code_fingerprint", "load_newest", "named_in", "optional_named", "pickled", "pickled_naming_files", "policy_for",
    "runs_for", "runs_named", "runs_to_save", "split_pickled", "to_delete", "unpickled_from_files", "unreferenced",
]

log = logging.getLogger(__name__)


class Snapshotting(Protocol):
    """A folder that can hand out its state and take one back (in place: the service's other
    parts, the clock and the query handlers, keep their references to it)."""

    def export(self) -> Any: ...

    def load(self, state: Any) -> None: ...


Anchored = Callable[[int, int | None], Awaitable[bool]]


async def load_newest(store: SnapshotStore, service: str, fingerprint: str | None = None, at_most: int | None = None,
                      anchored: Anchored | None = None, part: int | None = None, *,
                      freeze: bool = False) -> tuple[Snapshot | None, list[str]]:
    """The newest usable snapshot of `service` (at or before `at_most`), and why the newer ones
    were passed over. `anchored(seq, anchor)` says whether the log holds, at `seq`, the message
    the snapshot was made after (a stream deleted and made again under the same name does not).
    `part`: only that part of its state is loaded; `freeze`: what it loaded frozen, for a
    service that unfreezes it when it stops (`Snapshot.decode`)."""
    fingerprint = fingerprint or code_fingerprint()
    skipped: list[str] = []
    try:
        positions = await store.candidates(service)
    except Exception as exc:  # no store, or the server would not list it: fold from the start
        return None, [f"snapshots not listed: {type(exc).__name__}: {exc}"]
    for seq in positions:
        if at_most is not None and seq > at_most:
            continue
        try:
            data = await store.fetch(service, seq)
            if data is None:
                skipped.append(f"{service}@{seq}: gone")
                continue
            head = Snapshot.header(data)
            if head.get("fingerprint") != fingerprint:
                skipped.append(f"{service}@{seq}: made by other code ({head.get('fingerprint')})")
                continue
            snapshot = Snapshot.decode(data, part, await runs_for(store, runs_named(head), optional_named(head)),
                                       freeze=freeze)
        except Corrupt as exc:
            skipped.append(f"{service}@{seq}: corrupt ({exc})")
            continue
        except Exception as exc:
            skipped.append(f"{service}@{seq}: not read ({type(exc).__name__}: {exc})")
            continue
        if snapshot.service != service or snapshot.seq != seq:
            skipped.append(f"{service}@{seq}: names {snapshot.service}@{snapshot.seq}")
            continue
        if anchored is not None and not await anchored(seq, snapshot.anchor):
            skipped.append(f"{service}@{seq}: made from another log (its message at {seq} differs)")
            continue
        return snapshot, skipped
    return None, skipped


async def runs_for(store: SnapshotStore, keys: Sequence[str], optional: Sequence[str] = ()
                   ) -> dict[str, Run | IdFilter]:
    """The runs (and filters) named `keys`: from this process's run store (its files:
    `services.common.id_runs`, each checked against its key), else fetched from the snapshot store
    once and kept there. Corrupt if a run is in neither, or fetched does not match its key; an
    `optional` one (a filter) is left out instead, with a warning, whatever kept it from being
    fetched (a network error too: the start makes it from the runs rather than fail)."""
    runs = used_ids.current_store()
    found: dict[str, Run | IdFilter] = {}
    for key in keys:
        try:
            run = runs.local(key)
            if run is None:
                data = await store.fetch_run(key)
                if data is None:
                    raise Corrupt(f"id run {key} is gone")
                try:
                    run = runs.adopt(key, data)
                except ValueError as exc:
                    raise Corrupt(f"id run {key}: {exc}") from None
        except Exception as exc:  # (a filter not fetched, for whatever reason: made again from the runs)
            if key not in optional:
                raise
            log.warning("id filter not used (made again from the runs): %s: %s", type(exc).__name__, exc)
            continue
        found[key] = run
    return found


def runs_to_save(pickling: object, keys: Sequence[str]) -> dict[str, Run | IdFilter]:
    """The runs (and filters) a pickled state names, by key: those held since it was pickled
    (`Pickling.runs`), else those this process's store has; Corrupt if one is gone (merged away
    and deleted: the snapshot is not saved, the next one is)."""
    held = {run.key: run for run in getattr(pickling, "runs", ())}
    stores = used_ids.stores_in_use()  # (a record may seal into a store of its own: a replay's)
    found: dict[str, Run | IdFilter] = {}
    for key in keys:
        run = held.get(key) or next((one for store in stores if (one := store.local(key)) is not None), None)
        if run is None:
            raise Corrupt(f"id run {key} is gone")
        found[key] = run
    return found
