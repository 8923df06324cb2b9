"""`poolwise demo` (workload `teams`): several teams sharing eight machines, watched live.

The cluster is `teams.yaml` (research with vision and nlp, production with serving and etl, dev
with ci, and a revocable spot tier). The jobs arrive as a steady mix, with a surge of production
etl a little before the middle: production claims its guarantee back from the teams that
borrowed it, by preemption. Among them: gangs of several tasks, non-preemptible services,
revocable sweeps, jobs that fail, jobs cancelled while they wait or run, and jobs asking more
than their pool's limit (refused). The mix is drawn from a fixed seed: the same duration gives the
same jobs.

Log time runs `SPEED` times the wall clock: a one-minute demo is ten minutes of the cluster's day.
"""

from __future__ import annotations

import random
from importlib import resources

from services.tools.demo.workload import Job, Workload

SPEED = 10.0  # log seconds per wall second
STEP_MS = 1000  # the driver ticks every log second
SHARE_OF_DURATION = 0.75  # of --duration, the rest left for starting, the summary and the replay


def cluster_file() -> str:
    return resources.files("services.tools.demo").joinpath("teams.yaml").read_text()


def teams(duration: float, seed: int = 21) -> Workload:
    """The jobs of a demo of `duration` wall seconds (arrivals stop at 85% of its log time)."""
    horizon_s = max(5, int(duration * SHARE_OF_DURATION * SPEED))
    arrivals_s = max(1, int(horizon_s * 0.85))
    rng = random.Random(seed)
    jobs: list[Job] = []
    counts: dict[str, int] = {}

    def add(at_s: int, pool: str, klass: str, **options: object) -> None:
        number = counts[klass] = counts.get(klass, 0) + 1
        gang = f"{klass}-{number}"
        jobs.append(Job(gang=gang, pool=pool, klass=klass, at_ms=at_s * 1000, **options))  # type: ignore[arg-type]

    def every(mean_s: float, start_s: int = 0, end_s: int = arrivals_s) -> list[int]:
        """Arrival seconds in [start_s, end_s), about one per `mean_s` (exponential gaps)."""
        times, t = [], float(start_s) + rng.expovariate(1 / mean_s)
        while t < end_s:
            times.append(int(t))
            t += rng.expovariate(1 / mean_s)
        return times

    def seconds(low: int, high: int) -> int:
        return rng.randint(low, high) * 1000

    for at in every(20):
        add(at, "/research/vision", "training", size=rng.choice((2, 4)), runtime_ms=seconds(60, 180),
            resources=(("cpu", 16.0), ("memory", 64.0), ("gpu", 1.0)), priority=rng.choice((5, 10)),
            user=rng.choice(("ana", "bo")))
    for at in every(30):
        add(at, "/research/nlp", "finetune", size=2, runtime_ms=seconds(60, 120),
            resources=(("cpu", 8.0), ("memory", 64.0), ("gpu", 1.0)), priority=5, user="chen")
    for at in every(6):
        add(at, "/research/nlp", "sweep", runtime_ms=seconds(20, 40), resources=(("cpu", 4.0),), revocable=True,
            user="chen")
    for at in every(60):
        add(at, "/production/serving", "service", size=rng.choice((2, 3, 4)), runtime_ms=seconds(200, 400),
            resources=(("cpu", 8.0), ("memory", 32.0)), priority=100, preemptible=False, user="ops")
    surge = (int(arrivals_s * 0.35), int(arrivals_s * 0.5))
    for at in sorted(every(4) + every(1.5, *surge)):
        add(at, "/production/etl", "etl", size=rng.randint(1, 4), runtime_ms=seconds(20, 60),
            resources=(("cpu", 4.0), ("memory", 32.0)), priority=20, user="etl")
    for at in every(2):
        cancel = at + rng.randint(3, 15) if rng.random() < 0.1 else None
        add(at, "/dev/ci", "ci", runtime_ms=seconds(5, 20), resources=(("cpu", 2.0), ("memory", 8.0)),
            user=rng.choice(("dee", "eli", "fay")), fails=rng.random() < 0.05,
            cancel_ms=None if cancel is None else cancel * 1000)
    for at in every(40):
        add(at, "/dev/ci", "too-big", runtime_ms=10_000, resources=(("cpu", 128.0),), user="eli")
    for at in every(3):
        add(at, "/spot", "spot", runtime_ms=seconds(20, 60), resources=(("cpu", 4.0),), revocable=True,
            user=rng.choice(("ana", "dee")))
    jobs.sort(key=lambda j: (j.at_ms, j.gang))
    return Workload(name="teams", cluster=cluster_file(), jobs=tuple(jobs), step_ms=STEP_MS, paced=True,
                    speed=SPEED, horizon_ms=horizon_s * 1000, classes=tuple(counts),  # in the order first added
                    description=(f"three teams on 8 machines, {len(jobs):,} jobs over {horizon_s} s of log time "
                                 f"({SPEED:g}x the wall clock)"))
