"""What a gang gives back when it stops: what its live tasks hold (`release`: requeued or
cancelled), and, when it has finished, its place among its job's unfinished gangs
(`forget_job`)."""

from __future__ import annotations

from services.admission.domain.job_counts import count_job, ledger_of, stopped_running
from services.admission.domain.model import TERMINAL, Gang
from services.admission.domain.runtime import TreeRuntime


def release(rt: TreeRuntime, gang: Gang) -> None:
    """Release what the gang's live tasks hold and stop counting it as running."""
    ledger = ledger_of(rt, gang.pool)
    for task in gang.tasks:
        if task.state not in TERMINAL and task.state != "pending":
            ledger.hold(gang, task.resources, -1.0)
    stopped_running(rt, gang)


def forget_job(rt: TreeRuntime, gang: Gang) -> None:
    """The gang has finished (timed out, done or cancelled): its job counts one gang less,
    and the gang is no longer live. Its members' specs go: only an admission reads them (what
    `GangAdmitted` lists), a finished gang is never admitted again, and kept they were an
    object per task of every gang kept for `gang_retention`, in memory and in each snapshot
    (a fifth of the time a snapshot took to load)."""
    count_job(rt.jobs, gang, -1)
    forget_specs(rt, gang)


def forget_specs(rt: TreeRuntime, gang: Gang) -> None:
    """`forget_job` but the count (the caller counted the job out)."""
    del rt.live[gang.id]
    for task in gang.tasks:
        task.spec = None
