"""The victim order (Peloton's ranker), a named total order with a final tie-breaker on id.

Candidates are preemptible tasks in state `ready`, then `placing`, then `running` (never
`pending`, `placed` or `launching`); within a state the lowest priority first, then the most
recently started, then the highest task id.
"""

from __future__ import annotations

from services.admission.domain.model import Gang, Task

STATE_ORDER: dict[str, int] = {"ready": 0, "placing": 1, "running": 2}


class _Desc:
    """Wraps a string so that sorting puts the larger first."""

    __slots__ = ("value",)

    def __init__(self, value: str) -> None:
        self.value = value

    def __lt__(self, other: _Desc) -> bool:
        return self.value > other.value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Desc) and self.value == other.value


def victim_key(task: Task, gang: Gang) -> tuple[int, int, float, _Desc]:
    started = task.started_at if task.started_at is not None else float("inf")
    return (STATE_ORDER[task.state], gang.priority, -started, _Desc(task.id))


def is_candidate(task: Task, gang: Gang) -> bool:
    return gang.preemptible and task.state in STATE_ORDER and not task.preemption_requested
