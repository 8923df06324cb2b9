"""Gangs as rows, for `poolwise gangs`, `poolwise state` and the dashboard's queues."""

from __future__ import annotations

from collections.abc import Iterable

from services.admission.domain.model import PENDING, Gang
from services.admission.domain.runtime import TreeRuntime
from services.admission.domain.state import AdmissionState


def gang_rows(state: AdmissionState, tree: str | None = None, pool: str | None = None,
              states: Iterable[str] | None = None) -> list[dict[str, object]]:
    """One row per gang (in enqueue order, per tree), for `poolwise gangs`: `pool` matches that
    pool and every pool under it; `states` keeps only gangs in those states."""
    wanted = set(states) if states is not None else None
    below = None if pool is None else pool.rstrip("/") + "/"
    rows: list[dict[str, object]] = []
    for name in sorted(state.trees) if tree is None else [tree]:
        rt = state.trees.get(name)
        if rt is None:
            continue
        for gang in rt.gangs.values():
            if wanted is not None and gang.state not in wanted:
                continue
            if pool is not None and below is not None and gang.pool != pool and not gang.pool.startswith(below):
                continue
            rows.append(gang_row(rt, gang))
    return rows


def gang_row(rt: TreeRuntime, gang: Gang) -> dict[str, object]:
    """One gang as `poolwise gangs` and the dashboard show it (`position`: 1 at its queue's head)."""
    position: int | None = None
    if gang.state == PENDING and gang.queue is not None:
        queue = rt.queues.get(gang.pool, {}).get(gang.queue)
        at = queue.position(gang.id) if queue is not None else None
        position = None if at is None else at + 1
    return {
        "tree": rt.name, "gang": gang.id, "pool": gang.pool, "state": gang.state,
        "queue": gang.queue if gang.state == PENDING else None, "position": position,
        "members": len(gang.tasks), "size": gang.size, "resources": dict(gang.resources),
        "priority": gang.priority, "job": gang.job, "user": gang.user, "attempt": gang.attempt,
        "preemptible": gang.preemptible, "revocable": gang.revocable, "controller": gang.controller,
        "created_at": gang.created_at, "admitted_at": gang.admitted_at,
    }
