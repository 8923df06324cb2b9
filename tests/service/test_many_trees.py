"""Several trees on one log, one clock: a tick that names no tree (the production clock's) starts a
cycle in every tree that wants one, and every tree's decisions reach the log, even where two trees
use the same gang ids and their decisions have the same basis."""

from __future__ import annotations

from datetime import UTC, datetime

import anyio

from events import ClockTicked, CycleCompleted, EntitlementsComputed, Envelope, Event, GangAdmitted
from services.admission.folder import SUBJECTS, AdmissionFolder
from services.common.folding import run_folder
from services.common.memlog import MemoryLog
from tests.admission.builders import gang, host, pool, tree
from tests.service.helpers import envelopes, wait_until

T0 = datetime(2026, 1, 1, tzinfo=UTC)
TREES = ("alpha", "beta")


def _env(n: int, event: Event, source: str = "test") -> Envelope:
    return Envelope(id=f"in-{n}", time=T0, source=source, event=event)


def test_one_tick_runs_every_trees_cycle_and_keeps_every_decision() -> None:
    async def main() -> None:
        log = MemoryLog()
        setup: list[Event] = [host(cpu=100.0)]
        for name in TREES:
            setup += [tree(name=name), pool("/a", tree_name=name, reservation={"cpu": 10.0})]
            setup += [gang("g1", "/a").model_copy(update={"tree": name})]
        await log.append([_env(i, e, "tree" if i < len(setup) - 2 else "sdk") for i, e in enumerate(setup)])
        async with anyio.create_task_group() as tg:
            await tg.start(lambda task_status: run_folder(log, AdmissionFolder(), SUBJECTS, durable="admission",
                                                          task_status=task_status))
            for n in (1, 2):
                await log.append([_env(100 + n, ClockTicked(), "admission:clock")])

                async def closed(n: int = n) -> bool:
                    done = [e for _, e in await envelopes(log)
                            if isinstance(e.event, CycleCompleted) and e.event.service == "admission"]
                    return len(done) >= 2 * n

                await wait_until(closed, f"tick {n}: a closed cycle in each tree")
            tg.cancel_scope.cancel()
        decided = [e.event for _, e in await envelopes(log) if getattr(e.event, "tree", None) in TREES]
        assert sorted(e.tree for e in decided if isinstance(e, CycleCompleted)) == ["alpha", "alpha", "beta", "beta"]
        assert sorted(e.tree for e in decided if isinstance(e, EntitlementsComputed)) == \
            ["alpha", "alpha", "beta", "beta"]
        assert sorted((e.tree, e.gang) for e in decided if isinstance(e, GangAdmitted)) == \
            [("alpha", "g1"), ("beta", "g1")]

    anyio.run(main)
