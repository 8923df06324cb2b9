"""A tree's running and live jobs per pool, its admitted gangs per pool and its ledgers, as the
fold keeps them up (`state.py`) and the cycle, preemption and the metrics read them."""

from __future__ import annotations

from services.admission.domain.chains import pool_chain
from services.admission.domain.model import Gang, Ledger
from services.admission.domain.runtime import TreeRuntime


def ledger_of(rt: TreeRuntime, pool: str) -> Ledger:
    """The pool's ledger, made (empty) the first time it is asked for."""
    found = rt.ledgers.get(pool)
    if found is None:
        found = rt.ledgers[pool] = Ledger()
    return found


def started_running(rt: TreeRuntime, gang: Gang) -> None:
    """The gang is admitted: counted as running, and held in its pool's admitted gangs."""
    count_job(rt.running, gang, 1)
    held = rt.admitted.get(gang.pool)
    if held is None:
        held = rt.admitted[gang.pool] = {}
    held[gang.id] = gang


def stopped_running(rt: TreeRuntime, gang: Gang) -> None:
    """The gang is no longer admitted (requeued, cancelled or done)."""
    count_job(rt.running, gang, -1)
    held = rt.admitted[gang.pool]
    del held[gang.id]  # (it is there: `started_running` put it there; a KeyError is a bug)
    if not held:
        del rt.admitted[gang.pool]


def count_job(table: dict[str, dict[str, int]], gang: Gang, delta: int) -> None:
    """Count the gang's job up or down in its pool and every ancestor (root excluded)."""
    job = gang.job
    for pool in pool_chain(gang.pool):
        jobs = table.get(pool)
        if jobs is None:
            jobs = table[pool] = {}
        value = jobs.get(job, 0) + delta
        if value > 0:
            jobs[job] = value
        else:
            jobs.pop(job, None)


def job_done(rt: TreeRuntime, gang: Gang) -> None:
    """`stopped_running` then `stopping.forget_job`'s count (`count_job` of the running and the
    unfinished jobs, -1 each), in one walk up the pools: once per gang that ends done."""
    job = gang.job
    running, unfinished = rt.running, rt.jobs
    for pool in pool_chain(gang.pool):
        for table in (running, unfinished):
            jobs = table.get(pool)
            if jobs is None:
                jobs = table[pool] = {}
            value = jobs.get(job, 0) - 1
            if value > 0:
                jobs[job] = value
            else:
                jobs.pop(job, None)
    held = rt.admitted[gang.pool]
    del held[gang.id]
    if not held:
        del rt.admitted[gang.pool]


def running_jobs(rt: TreeRuntime, pool: str) -> int:
    return len(rt.running.get(pool, {}))


def total_jobs(rt: TreeRuntime, pool: str) -> int:
    return len(rt.jobs.get(pool, {}))
