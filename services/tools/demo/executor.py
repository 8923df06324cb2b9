"""The demo's executor simulator: what the machines would report of the tasks poolwise admits.

It reads admission's state as folded from the log (never the services' own) and answers with task
reports, the events an executor sends (`TaskStateChanged`, through the submitter SDK):

- a gang admitted (attempt n): its ready tasks report `running` at once, and, the job's runtime
  later, `succeeded` (the first task of a job that fails: `failed`), if that attempt still runs;
- a task asked to stop (`PreemptionRequested` of a running task): it reports `preempted` at once,
  and its attempt's end is forgotten (admission requeues the gang; its next attempt runs anew).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass, field

from events import TaskStateChanged
from services.admission.domain.model import ADMITTED, TERMINAL
from services.admission.domain.state import AdmissionState
from services.tools.demo.workload import Job

Report = tuple[TaskStateChanged, int]  # the event and the gang's attempt it is about


@dataclass
class Executor:
    jobs: dict[str, Job]
    tree: str = "default"
    _ends: list[tuple[int, str, int]] = field(default_factory=list)  # (log ms, gang, attempt)

    def started(self, state: AdmissionState, gangs: Iterable[str], now_ms: int) -> list[Report]:
        """Reports for the gangs a step's decisions touched: ready tasks run, requested ones stop."""
        rt = state.trees.get(self.tree)
        reports: list[Report] = []
        if rt is None:
            return reports
        for gang_id in sorted(set(gangs)):
            gang = rt.gangs.get(gang_id)
            if gang is None or gang.state != ADMITTED:
                continue
            for task in gang.tasks:
                if task.state == "ready":
                    reports.append((self._report(gang_id, task.id, "running"), gang.attempt))
                elif task.preemption_requested and task.state not in TERMINAL:
                    reports.append((self._report(gang_id, task.id, "preempted"), gang.attempt))
            if any(t.state == "ready" for t in gang.tasks):
                job = self.jobs.get(gang_id)
                heapq.heappush(self._ends, (now_ms + (job.runtime_ms if job else 0), gang_id, gang.attempt))
        return reports

    def next_end(self) -> int | None:
        return self._ends[0][0] if self._ends else None

    def ended(self, state: AdmissionState, now_ms: int) -> list[Report]:
        """Reports of the attempts whose runtime is over by `now_ms` (those still running)."""
        rt = state.trees.get(self.tree)
        reports: list[Report] = []
        while self._ends and self._ends[0][0] <= now_ms:
            _, gang_id, attempt = heapq.heappop(self._ends)
            gang = rt.gangs.get(gang_id) if rt is not None else None
            if gang is None or gang.state != ADMITTED or gang.attempt != attempt:
                continue  # preempted, cancelled or requeued meanwhile
            job = self.jobs.get(gang_id)
            for n, task in enumerate(gang.tasks):
                if task.state not in TERMINAL and not task.preemption_requested:
                    state_name = "failed" if job is not None and job.fails and n == 0 else "succeeded"
                    reports.append((self._report(gang_id, task.id, state_name), attempt))
        return reports

    def _report(self, gang: str, task: str, state: str) -> TaskStateChanged:
        return TaskStateChanged(tree=self.tree, gang=gang, task=task, state=state)
