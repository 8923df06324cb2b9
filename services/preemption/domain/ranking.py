"""The victim orders: named total orders over candidate tasks, each ending in a tie-break on id.

Candidates are preemptible tasks in state `ready`, then `placing`, then `running` (never
`pending`, `placed` or `launching`) with no preemption request outstanding.

- `victim_key` (between pools; Peloton's ranker): state (`ready`, `placing`, `running`), then the
  lowest priority, then the most recently started, then the highest task id.
- `lower_priority_key` (inside a pool, `preempt_lower_priority`): the lowest priority first, then
  the victim order (state, most recently started, highest task id).
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

    __hash__ = None  # type: ignore[assignment]


def _started(task: Task) -> float:
    """Negated start time: the most recently started first; never started before any started."""
    return -(task.started_at if task.started_at is not None else float("inf"))


def victim_key(task: Task, gang: Gang) -> tuple[int, int, float, _Desc]:
    return (STATE_ORDER[task.state], gang.priority, _started(task), _Desc(task.id))


def lower_priority_key(task: Task, gang: Gang) -> tuple[int, int, float, _Desc]:
    return (gang.priority, STATE_ORDER[task.state], _started(task), _Desc(task.id))


def is_candidate(task: Task, gang: Gang) -> bool:
    return gang.preemptible and task.state in STATE_ORDER and not task.preemption_requested
