"""The preemption service: its folder on the log (it runs a pass after each admission cycle),
and its queries over NATS request/reply (`poolwise.cmd.preemption.list`), answered from the
folded state."""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, cast

import anyio
from anyio.abc import TaskStatus

from events.commands import Reply
from services.admission.held_trees import WhenSettled
from services.common import tracing, tree_gate
from services.common.folding import Warm, run_folder
from services.common.log import EventLog
from services.common.requests import answer_until_cancelled, parse_request, serve_requests
from services.common.snapshots import policy_for
from services.common.tree_gate import TreeGate, naming_holders, while_holding
from services.common.tree_leases import TreeLeases
from services.preemption.commands import COMMANDS, SERVICE, PreemptionList
from services.preemption.folder import SUBJECTS, PreemptionFolder
from services.preemption.held_trees import HeldTreesPreemption

if TYPE_CHECKING:
    from projections.store import ProjectionStore

# Seconds the consumer pauses after a short batch, so that a trickle of messages (an admission
# cycle's tick, entitlements, admissions and completion; a submitter's packs) is folded in fewer,
# larger batches: each batch has a fixed cost (a wake-up, a fold, an acknowledgement), paid fewer
# times (docs/performance.md, session 4: "Consumers may linger"). Preemption's decisions are not
# on the path from enqueue to admission; they come up to this much later.
LINGER = 0.01


def answer(folder: PreemptionFolder, op: str, data: bytes) -> Reply:
    """One request, as it comes over NATS: the op from the subject, the command as JSON."""
    command = parse_request(COMMANDS, op, data, SERVICE)
    if isinstance(command, Reply):
        return command
    assert isinstance(command, PreemptionList)
    state = folder.state
    records = state.preemptions(tree=command.tree, pool=command.pool, state=command.state)
    if command.limit is not None:
        records = records[-command.limit:]
    return Reply(ok=True, seq=state.admission.last_seq, data={
        "preemptions": [r.to_dict() for r in records],
        "starvation": state.starvation(tree=command.tree, pool=command.pool),
    })


def standby() -> Warm:
    """What a standby instance folds while another leads (see `serve_admission`'s)."""
    return Warm(PreemptionFolder(), SUBJECTS)


class FollowHeld:
    """Keeps a per-tree instance's `folder.held` the trees whose lease it holds, and says on stderr
    what it has decided and read at each change and when it stops. A tree taken over while its
    pass is parked is decided at once (`take_over`): on a quiet log no message would come to fold.
    `settled`: nothing parked, and nothing decided at a takeover still on its way to the log's
    `kept` (a snapshot waits: its `pending` is what `kept` holds)."""

    def __init__(self, trees: TreeLeases, folder: HeldTreesPreemption, log: EventLog) -> None:
        self.trees, self.folder, self.log = trees, folder, log
        self.sending = 0

    def settled(self) -> bool:
        return self.folder.settled() and not self.sending

    async def run(self) -> None:
        folder = self.folder
        try:
            while True:
                held = self.trees.held()
                if held != folder.held:
                    folder.held = held
                    print(work_line(folder), file=sys.stderr, flush=True)
                    with tracing.live():  # (its decisions carry their gangs' traces, as a batch's do)
                        made = folder.take_over()
                    if made:
                        self.sending += 1
                        try:
                            await self.log.append(made)  # (the tree gate: sent if held, else kept)
                        finally:
                            self.sending -= 1
                with anyio.move_on_after(0.5):  # (a change while sending is seen at the next look)
                    await self.trees.changed()
        finally:
            print(work_line(folder), file=sys.stderr, flush=True)  # (and when it stops)


def work_line(folder: HeldTreesPreemption) -> str:
    """What an instance deciding per tree has done so far: passes decided here and read from the log."""
    return tree_gate.work_line("preemption passes", folder.decided, folder.read)


async def serve_preemption(log: EventLog, data_dir: Path | None, *, folder: PreemptionFolder | None = None,
                           warm: Warm | None = None, trees: TreeLeases | None = None,
                           task_status: TaskStatus[str] = anyio.TASK_STATUS_IGNORED) -> None:
    """Preemption on `log`; `warm`: a standby's fold, caught up already (it decides from there);
    `trees`: an instance deciding per tree (`services.common.tree_gate`): it decides the passes of
    the trees it holds and reads the others' from the log (`services.preemption.held_trees`), and
    answers requests while it holds a tree, for any tree, naming each tree's holder."""
    if warm is not None:
        folder = cast(PreemptionFolder, warm.folder)
    snapshots = policy_for(log, "preemption")
    follow: FollowHeld | None = None
    if trees is not None and folder is None:
        folder = held = HeldTreesPreemption()
        held.on_waiting = trees.learn
        follow = FollowHeld(trees, held, log)
        if snapshots is not None:
            snapshots = WhenSettled.of(snapshots, follow.settled)
    folder = folder or PreemptionFolder()
    subjects = folder.subjects  # (a per-tree instance also reads the refusals: `HeldTreesPreemption`)
    store: ProjectionStore | None = None  # the history is projected once, by the tree service
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(lambda task_status: run_folder(log, folder, subjects, durable="preemption", store=store,
                                                          snapshots=snapshots, warm=warm,
                                                          linger=LINGER, task_status=task_status))
            if follow is not None:
                tg.start_soon(follow.run)
            nc = getattr(log, "nc", None)
            if nc is not None and trees is not None:  # naming each tree's holder (`naming_holders`)
                asked = naming_holders(cast(TreeGate, log), partial(answer, folder))
                tg.start_soon(while_holding, trees, partial(answer_until_cancelled, nc, SERVICE, asked))
            elif nc is not None:
                await serve_requests(nc, SERVICE, partial(answer, folder))
            task_status.started("preemption")
    finally:
        if store is not None:
            store.close()
