"""The submitter SDK: submit gangs to poolwise, report task states, cancel gangs, from any Python
program (what `poolwise submit`, `poolwise task set` and `poolwise cancel` use).

    import anyio
    from services.submitter import Submitter

    async def main() -> None:
        async with Submitter("nats://127.0.0.1:4222", source="sdk:nightly") as poolwise:
            # a gang of 4 members, each cpu 2 and memory 100, for leaf pool /ATG
            receipt = await poolwise.enqueue(gang="nightly-42", pool="/ATG", count=4,
                                             resources={"cpu": 2, "memory": 100},
                                             job="nightly", user="alice", priority=10)
            print(receipt.seq, receipt.duplicate)  # log position; True if sent before
            # members one by one: same gang id and size, their own member ids
            await poolwise.enqueue(gang="train-7", pool="/ATG", size=2, tasks=[{"id": "w0", "resources": {"gpu": 1}}])
            await poolwise.enqueue(gang="train-7", pool="/ATG", size=2, tasks=[{"id": "w1", "resources": {"gpu": 1}}])
            # an executor reports its tasks (attempt: from the gang's GangAdmitted)
            await poolwise.task_state("nightly-42/0", gang="nightly-42", state="running", attempt=1)
            await poolwise.cancel("train-7", reason="superseded")

    anyio.run(main)

Not async? `SyncSubmitter` has the same methods, blocking:

    from services.submitter import SyncSubmitter

    with SyncSubmitter("nats://127.0.0.1:4222") as poolwise:
        poolwise.enqueue(gang="g1", pool="/ATG", count=2, resources={"cpu": 1})

Retrying is safe: an event's id is derived from what identifies it (the gang and its member ids;
the task, its state and attempt; the gang to cancel), and JetStream stores an id once. Every
call returns when the event is stored (`Receipt`), and raises `SubmitError` (bad input, with the
field and the rule) or `PublishError` (NATS unreachable, no poolwise stream). Whether admission
accepts the gang is decided on the log: ask `poolwise explain GANG`.
"""

from services.submitter.build import SubmitError, cancel_event, enqueue_event, envelope, event_id, task_state_event
from services.submitter.client import PublishError, Receipt, Submitter, SyncSubmitter

__all__ = [
    "PublishError",
    "Receipt",
    "SubmitError",
    "Submitter",
    "SyncSubmitter",
    "cancel_event",
    "enqueue_event",
    "envelope",
    "event_id",
    "task_state_event",
]
