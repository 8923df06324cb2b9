"""When a service snapshots its state (`SnapshotPolicy`), and the policy of a service on a log
(`policy_for`: on JetStream, the object store of the log's server)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from events import Envelope
from services.common.snapshot_stores import ObjectStoreSnapshots, SnapshotStore


@dataclass(slots=True)
class SnapshotPolicy:
    """When a service snapshots its state: after `every` log positions folded since the last one,
    or `seconds` of log time with at least `least` positions, and when it stops cleanly.

    `last_seq`/`last_time`: where the last snapshot was started (what `due` counts from);
    `saved`: the newest position known to be kept, a snapshot stored (or where the service
    started). They differ while a snapshot is being saved, and for good when that save fails or is
    cancelled with the service: a clean stop right after a snapshot was started must still save
    (`unsaved`), or the stop leaves nothing."""

    store: SnapshotStore
    every: int = 100_000
    seconds: float = 600.0
    least: int = 1_000
    last_seq: int = 0
    last_time: float = 0.0
    saved: int = 0
    # The decisions made and kept back from the log (an instance deciding per tree keeps those of
    # trees it does not hold: `services.common.tree_gate`): saved as the snapshot's `pending`.
    kept: Callable[[], Sequence[Envelope]] | None = None

    def due(self, folded: int, now: float) -> bool:
        since = folded - self.last_seq
        return (since >= self.every or (since >= self.least and now - self.last_time >= self.seconds)) \
            and self.fold_settled()

    def fold_settled(self) -> bool:
        """Whether the fold's state is the fold's through the position it stands at (every
        predicate that lets a snapshot be saved, `due`, `due_folding_again` and `unsaved`, asks
        it, so that a policy overriding it alone, `WhenSettled`, holds on every save path)."""
        return True

    def started(self, folded: int, now: float, restored: int | None = None) -> None:
        """The service starts with its state at `folded`, made from a snapshot at `restored` (0: from
        the start of the log; None: the snapshot is at `folded`) and the log after it. What was
        folded after that snapshot is not kept until a snapshot is saved: a clean stop saves it,
        and the next batch does when the rebuild folded `every` positions or more. (Counting a
        rebuild as saved left a quiet system, after an upgrade passed its snapshots over, folding
        the whole history again at every start: a 1M-gang log restarted in minutes.)"""
        saved = folded if restored is None else restored
        self.last_seq, self.last_time, self.saved = saved, now, saved

    def due_folding_again(self, folded: int) -> bool:
        """Whether a rebuild (the log folded again after a start) snapshots at `folded`: every
        `every` positions only (its log time runs far faster than the clock's)."""
        return folded - self.last_seq >= self.every and self.fold_settled()

    def unsaved(self, folded: int) -> bool:
        """Whether a clean stop at `folded` has state to keep (not whether one was started there)."""
        return folded > self.saved and self.fold_settled()


def policy_for(log: Any, service: str) -> SnapshotPolicy | None:
    """The snapshot policy of a service on `log`: on JetStream, the object store of the log's
    server, every `POOLWISE_SNAPSHOT_EVERY` positions (default 100,000; 0 turns snapshots off);
    None on other logs."""
    import os

    every = int(os.environ.get("POOLWISE_SNAPSHOT_EVERY", "100000") or 0)
    nc, stream = getattr(log, "nc", None), getattr(log, "stream", None)  # a JetStream log (or a wrapper of one)
    if nc is None or not isinstance(stream, str) or every <= 0:
        return None
    from nats.js import JetStreamContext

    js = JetStreamContext(nc)  # through the log's connection: a term's publishes are fenced
    # a log that keeps decisions back (`services.common.tree_gate`) has them saved as the pending
    kept = getattr(log, "kept", None)
    return SnapshotPolicy(ObjectStoreSnapshots(js, stream), every=every, least=min(1_000, every), kept=kept)
