"""What each service of this process is, for the metrics and `/readyz`: its role, where its fold
stands (`ServiceStatus`, one per service in `STATUS`), the log's end as last asked of NATS
(`STREAM`), and what they make of it (`lag`, `readiness`).

Written by the shells (`services.common.folding`, the tree service, the CLI's role callbacks) as
plain numbers; read at scrape time (`services.common.metric_instruments`). A service that stops
takes its entry out (`stopped`): the entry holds the whole fold."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

ROLES = ("starting", "leading", "standby", "per-tree", "lost")


@dataclass(slots=True)
class ServiceStatus:
    """One service of this process: its role, and where its fold stands. Written by the shells
    (`services.common.folding`, the CLI's role callbacks); read at scrape time."""

    name: str
    role: str = "starting"  # ROLES; "per-tree": an instance sharing the trees (`trees_held` of them)
    trees_held: int = 0
    folder: Any = None  # the fold the gauges read (the leader's, or a warm standby's)
    folded: int = 0  # the last log position folded
    events: int = 0  # log messages folded since the process started (leader and standby folds)
    decisions: int = 0  # decisions this process published
    snapshots: Any = None  # the leader's `SnapshotPolicy`, when it keeps snapshots

    @property
    def lease_held(self) -> bool:
        return self.role == "leading" or (self.role == "per-tree" and self.trees_held > 0)


STATUS: dict[str, ServiceStatus] = {}


def status(service: str) -> ServiceStatus:
    found = STATUS.get(service)
    if found is None:
        found = STATUS[service] = ServiceStatus(service)
    return found


# Roles leadership tells of an instance that goes on without a fold for a moment (it stands by,
# or shares the trees): kept by `stopped`, in an entry that holds no fold.
_TOLD = ("standby", "lost", "per-tree")


def stopped(service: str, folder: Any) -> None:
    """`service`'s fold `folder` stopped: its entry goes, and with it the fold it held (the whole
    state, its id records alive: a stopped service's were kept for as long as the process lived).
    Left as it is if another fold took it over since (a standby's, the next term's); kept, holding
    no fold, if leadership told a role meanwhile (`_TOLD`: the instance is still there, `/readyz`
    says why it is not ready, and its counters go on)."""
    found = STATUS.get(service)
    if found is None or (found.folder is not None and found.folder is not folder):
        return
    if found.role in _TOLD:
        found.folder = found.snapshots = None
        return
    del STATUS[service]


def set_role(service: str, role: str, trees_held: int = 0) -> None:
    """A service's role changed (`poolwise serve`'s callbacks; `lost` after a lost lease)."""
    found = status(service)
    found.role, found.trees_held = role, trees_held

@dataclass(slots=True)
class StreamPosition:
    """The log's last sequence as last asked of NATS (`follow_stream`); None: not known yet."""

    last_seq: int | None = None
    asked_at: float = 0.0  # monotonic


STREAM = StreamPosition()
STALE_AFTER = 10.0  # seconds without an answer from NATS after which a folding service is not ready


async def follow_stream(url: Callable[[], str | None], every: float = 1.0, stream: str | None = None) -> None:
    """Keep `STREAM` current: the stream's last sequence, asked every `every` seconds on a
    connection of its own (what consumer lag and readiness are measured against). Waits for a URL
    (`poolwise up` knows its embedded server's only once it runs). `stream`: another than the
    default (tests)."""
    import anyio

    from services.common.jetstream import JetStreamLog

    while (where := url()) is None:
        await anyio.sleep(0.1)
    while True:  # NATS not there yet: the service waits for it too; this must not end the process
        try:
            log = await (JetStreamLog.connect(where, name="poolwise-metrics") if stream is None
                         else JetStreamLog.connect(where, name="poolwise-metrics", stream=stream))
            break
        except Exception:
            await anyio.sleep(every)
    try:
        while True:
            with contextlib.suppress(Exception):  # NATS away a moment: the last answer stands
                with anyio.fail_after(5):
                    STREAM.last_seq = await log.last_seq()
                STREAM.asked_at = time.monotonic()
            await anyio.sleep(every)
    finally:
        with anyio.CancelScope(shield=True):
            await log.close()


def lag(found: ServiceStatus) -> int | None:
    """How many log positions the service's fold is behind the stream's end (None: unknown, or a
    service that folds nothing here: the tree service's standby starts from its snapshot)."""
    if STREAM.last_seq is None or found.folder is None:
        return None
    return max(0, STREAM.last_seq - found.folded)


def readiness(found: ServiceStatus, max_lag: int) -> tuple[bool, str]:
    """Whether a service is ready (leading, sharing the trees, or a standby; its fold within
    `max_lag` positions of the log's end) and why not."""
    if found.role in ("starting", "lost"):
        return False, found.role
    if found.folder is not None and STREAM.last_seq is not None and time.monotonic() - STREAM.asked_at > STALE_AFTER:
        return False, f"NATS has not said where the log ends for {time.monotonic() - STREAM.asked_at:.0f} s"
    behind = lag(found)
    if found.folder is not None and behind is None:
        return False, "the log's end is not known yet"
    if behind is not None and behind > max_lag:
        return False, f"{behind} positions behind the log (more than {max_lag})"
    return True, found.role


def resident_bytes() -> int | None:
    """This process's resident set size (Linux /proc; None elsewhere)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None
