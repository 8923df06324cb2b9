"""A whole-lifecycle log of any size, made by the services' own folders (no NATS, no clock): the
log `poolwise replay --verify` is measured on.

One tree over one host, `leaves` leaf pools; per round, a pack of `per_round` gangs of two tasks
is enqueued and a tick decides them; the gangs admitted in the round before run (each task
`running`, then `succeeded`, one message each) and finish (admission's `GangFinished`). After
every input, admission and then preemption fold what is new and append what they decide, as
their shells would (a cycle's admissions in packs). About 7 events and 5 messages per gang, as the
100k-gang log of issue 18.

    python -m tests.replay.biglog GANGS [NATS_URL [SECONDS_PER_ROUND]]   # build it; copy it to a server
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime

import anyio

from events import (
    ClockTicked,
    Envelope,
    Event,
    GangAdmitted,
    GangEnqueued,
    HostRegistered,
    PoolConfig,
    PoolConfigChanged,
    TaskSpec,
    TaskStateChanged,
    TreeConfigured,
    TreeOptions,
    decode_all,
    read_envelope,
)
from events.config import GangTimeoutOptions
from services.admission.folder import SUBJECTS, AdmissionFolder
from services.common.folding import Folder, fold_batch
from services.common.log import EventLog, Stored
from services.common.memlog import MemoryLog, subject_filter
from services.preemption.folder import PreemptionFolder

TREE = "big"
START = 1.7e9


class Builder:
    def __init__(self, log: EventLog, leaves: int = 20) -> None:
        self.log = log
        self.leaves = leaves
        self.now = START
        self.ids = 0
        self.folders: list[tuple[Folder, list[int]]] = [(AdmissionFolder(), [0]), (PreemptionFolder(), [0])]
        self.wanted = subject_filter(SUBJECTS)

    def envelope(self, event: Event, source: str = "sdk:biglog") -> Envelope:
        self.ids += 1
        return Envelope(id=f"in-{self.ids:08d}", time=datetime.fromtimestamp(self.now, tz=UTC), source=source,
                        event=event)

    async def put(self, events: Sequence[Event], source: str = "sdk:biglog") -> None:
        await self.log.append([self.envelope(e, source) for e in events])
        await self.settle()

    async def settle(self) -> None:
        """Each service folds what is new and appends its decisions, until nothing more is decided."""
        while True:
            appended = False
            for folder, position in self.folders:
                new = await self.log.read(position[0] + 1)
                if not new:
                    continue
                result = fold_batch(folder, [m for m in new if self.wanted(m.subject)], position[0], read_envelope)
                position[0] = new[-1].seq
                if result.decisions:
                    await self.log.append(result.decisions)
                    appended = True
            if not appended:
                return

    async def configure(self, tasks: int) -> None:
        options = TreeOptions(resources=["cpu", "memory"],
                              gang_timeout=GangTimeoutOptions(default=3600.0, limit=3600.0, jitter=0.0))
        config: list[Event] = [TreeConfigured(tree=TREE, options=options),
                               HostRegistered(host="h1", resources={"cpu": float(tasks), "memory": 4.0 * tasks})]
        for i in range(self.leaves):
            share = {"cpu": tasks / self.leaves / 2, "memory": 4.0 * tasks / self.leaves / 2}
            config.append(PoolConfigChanged(tree=TREE, path=f"/l{i}", created=True,
                                            config=PoolConfig(reservation=share)))
        await self.put(config, source="tree")


async def build(log: EventLog, gangs: int, per_round: int = 500, leaves: int = 20, seconds: float = 1.0) -> None:
    """`seconds` of log time per round (500 gangs a round, 50 s: 10 gangs/s, so the trees' default
    `gang_retention` of an hour forgets what finished an hour before)."""
    builder = Builder(log, leaves)
    await builder.configure(tasks=4 * per_round)
    running: list[tuple[str, list[str]]] = []
    made = 0
    while made < gangs or running:
        builder.now += seconds
        batch = []
        for i in range(made, min(gangs, made + per_round)):
            name = f"g{i}"
            batch.append(GangEnqueued(tree=TREE, gang=name, pool=f"/l{i % leaves}", size=2, job=f"j{i % 7}", user="u",
                                      tasks=[TaskSpec(id=f"{name}.{t}", resources={"cpu": 1.0, "memory": 4.0})
                                             for t in range(2)]))
        made += len(batch)
        if batch:
            await builder.put(batch)
        seen = (await log.last_seq()) + 1
        await builder.put([ClockTicked(tree=TREE)], source="clock")
        for gang, tasks in running:  # last round's admissions run, then finish
            for state in ("running", "succeeded"):
                for task in tasks:
                    await builder.log.append([builder.envelope(TaskStateChanged(tree=TREE, gang=gang, task=task,
                                                                                state=state))])
        await builder.settle()
        running = [(e.event.gang, [t.id for t in e.event.tasks]) for m in await log.read(seen)
                   if m.subject.endswith(".admission") for e in decode_all(m.data)
                   if isinstance(e.event, GangAdmitted)]


async def copy(messages: Sequence[Stored], url: str) -> None:
    """The messages onto the poolwise stream of the server at `url` (as they are, ids kept)."""
    from services.common.jetstream import JetStreamLog

    log = await JetStreamLog.connect(url, name="biglog")
    try:
        await log.ensure_stream()
        js = log.nc.jetstream()
        for start in range(0, len(messages), 2000):
            acks = [await js.publish_async(m.subject, m.data, headers={"Nats-Msg-Id": m.msg_id} if m.msg_id else None)
                    for m in messages[start:start + 2000]]
            for ack in acks:
                await ack
    finally:
        await log.close()


def main(argv: list[str]) -> None:
    gangs = int(argv[0])
    seconds = float(argv[2]) if len(argv) > 2 else 1.0

    async def go() -> None:
        log = MemoryLog()
        began = time.perf_counter()
        await build(log, gangs, seconds=seconds)
        messages = await log.read(1)
        events = sum(len(decode_all(m.data, read_envelope)) for m in messages)
        print(f"{gangs} gangs: {len(messages)} messages, {events} events, "
              f"{sum(len(m.data) for m in messages) / 1e6:.1f} MB, built in {time.perf_counter() - began:.0f} s")
        if len(argv) > 1:
            await copy(messages, argv[1])
            print(f"copied to {argv[1]}")

    anyio.run(go, backend="asyncio")


if __name__ == "__main__":
    main(sys.argv[1:])
