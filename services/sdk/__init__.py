"""The submitter SDK: submit gangs to poolwise, report task states, cancel gangs, from any Python
program (what `poolwise submit`, `poolwise task set` and `poolwise cancel` use).

    import anyio
    from services.sdk import Submitter

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

    from services.sdk import SyncSubmitter

    with SyncSubmitter("nats://127.0.0.1:4222") as poolwise:
        poolwise.enqueue(gang="g1", pool="/ATG", count=2, resources={"cpu": 1})

The URL may name several servers, comma-separated (`nats://n1:4222,nats://n2:4222`), or be a
list: the client connects, and reconnects, to any of them.

Credentials and TLS, when the server asks for them (docs/security.md): a user and password in the
URL, or a `.creds` file, or an nkey seed file; TLS with the CA that signed the servers'
certificates (and a client certificate, for servers that verify clients):

    from services.sdk import Submitter, Tls

    Submitter("tls://n1:4222", nkey="team-a.nk", tls=Tls(ca="ca.pem", cert="client.pem", key="client-key.pem"))

What is not given is read from NATS_CREDS, NATS_NKEY, NATS_CA, NATS_CERT and NATS_KEY.

Retrying is safe: an event's id covers its content (what identifies it: the gang; the task, its
state and attempt; and a digest of the event's body), and JetStream stores an id once (within its
10-minute duplicate window; a copy after it is refused by admission as `duplicate_task`). The same
gang and member ids with other content are another event, which admission refuses as
`member_conflict`: never a duplicate of the first.

Every call returns when the event is stored (`Receipt`), within the client's deadline
(`timeout=10.0` seconds by default), and raises `SubmitError` (bad input, with the field and the
rule; a gang too large for one message, `message_too_large`, before anything is sent) or
`PublishError` (NATS unreachable or not acknowledging within the deadline, no poolwise stream);
after a `PublishError` the connection goes on reconnecting in the background, so a later call
succeeds once NATS is back. Whether admission accepts the gang is decided on the log: ask
`poolwise explain GANG`.
"""

from services.common.connection import Tls
from services.sdk.build import SubmitError, cancel_event, enqueue_event, envelope, event_id, task_state_event
from services.sdk.client import PublishError, Receipt, Submitter, SyncSubmitter

__all__ = [
    "PublishError",
    "Receipt",
    "SubmitError",
    "Submitter",
    "SyncSubmitter",
    "Tls",
    "cancel_event",
    "enqueue_event",
    "envelope",
    "event_id",
    "task_state_event",
]
