"""A burst on the real services, admission's clock on, on JetStream: packs of enqueues start
cycles as they are folded (the tree's `cycle_gangs`), ticks come while decisions are still on their way,
and cancels and task reports land between the cycles' triggers and their decisions. Whatever the
timing, the log replays clean (every decision re-derived, byte for byte), and the tree's `gangs`
and `tasks` tables hold what a fresh fold of admission's state holds."""

from __future__ import annotations

import json
from contextlib import suppress
from pathlib import Path

import anyio
import duckdb
import pytest

from bench.workload import Workload, config_events, envelope, gang_event
from events import CycleCompleted, Envelope, GangCancelled, TaskStateChanged, TreeOptions, decode_all
from events.subjects import command
from services.admission.folder import SUBJECTS, AdmissionFolder
from services.common.folding import fold_batch
from services.common.jetstream import JetStreamLog
from services.common.log import Stored
from services.common.memlog import subject_filter
from services.common.packs import PACK_EVENTS
from services.launcher import start_services
from services.tools.replay import verify

pytestmark = pytest.mark.anyio

T0 = 1_767_225_600.0
WAIT = 60.0  # seconds: a hung system fails the test instead of hanging the run (not a timing assertion)


async def quiet_log(log: JetStreamLog) -> list[Stored]:
    """The whole log once nothing has been appended for a while (the clock has nothing to tick
    for) and the tree's read models have committed all of it (their checkpoints, asked over
    `poolwise.cmd.tree.sql`)."""
    query = json.dumps({"sql": "SELECT min(last_seq) FROM checkpoints"}).encode()
    with anyio.fail_after(WAIT):
        last = -1
        while True:
            await anyio.sleep(0.3)
            now = await log.last_seq()
            if now == last:
                with suppress(Exception):  # no answer yet: ask again
                    reply = json.loads((await log.nc.request(command("tree", "sql"), query, timeout=2.0)).data)
                    rows = reply.get("data", {}).get("rows") or [[None]]
                    if rows[0][0] is not None and int(rows[0][0]) >= now:
                        return await log.read()
            last = now


async def test_a_burst_decided_cycle_by_cycle_replays_clean_and_projects_as_admission_folds(
        jetstream_log: JetStreamLog, tmp_path: Path) -> None:
    log = jetstream_log
    cycle_gangs = TreeOptions().cycle_gangs  # the workload's tree keeps the default
    w = Workload(gangs=2 * cycle_gangs + PACK_EVENTS, leaves=16, hosts=4, fill=0.6)
    await log.append([envelope(e, f"setup-{i}", T0, source="tree") for i, e in enumerate(config_events(w))])
    async with anyio.create_task_group() as tg:
        await start_services(tg, log, ["tree", "admission", "preemption"], tmp_path, leadership=False)
        # 1. packs of enqueues at once (admission folds them in one go: each 5,000th gang ends a cycle);
        # 2. cancels and reports of some of them, likely before those cycles' decisions land;
        # 3. one pack more.
        burst = 2 * cycle_gangs
        await log.append([envelope(gang_event(w, i, "b"), f"b{i}", T0 + 1) for i in range(burst)])
        some = range(0, burst, 97)
        await log.append([envelope(GangCancelled(tree=w.tree, gang=f"b{i}"), f"cancel-{i}", T0 + 2)
                          for i in some[::2]])
        await log.append([envelope(TaskStateChanged(tree=w.tree, gang=f"b{i}", task=f"b{i}.0", state="placed"),
                                   f"placed-{i}", T0 + 2) for i in some[1::2]])
        await log.append([envelope(gang_event(w, i, "b"), f"b{i}", T0 + 3) for i in range(burst, w.gangs)])
        messages = await quiet_log(log)
        tg.cancel_scope.cancel()
    envelopes: list[Envelope] = [e for s in messages for e in decode_all(s.data)]
    triggers = {e.event.trigger_seq for e in envelopes
                if isinstance(e.event, CycleCompleted) and e.event.service == "admission"}
    enqueue_packs = {s.seq for s in messages if s.subject.startswith("poolwise.gang.")}
    assert triggers & enqueue_packs  # some cycles were started by a pack, not a tick
    inputs = [s.seq for s in messages if s.subject.startswith(("poolwise.gang.", "poolwise.task."))]
    closed = {e.event.trigger_seq: s.seq for s in messages for e in decode_all(s.data)
              if isinstance(e.event, CycleCompleted) and e.event.service == "admission"}
    overtaken = [seq for seq in inputs if any(t < seq < d for t, d in closed.items())]
    assert overtaken  # inputs landed between a cycle's trigger and its decisions

    report = verify(messages)
    assert report.ok, [f.line() for f in report.findings[:5]]

    gangs = projected_as_admission_folds(messages, w.tree, tmp_path)
    assert {"admitted", "pending", "cancelled"} <= set(gangs.values())


def projected_as_admission_folds(messages: list[Stored], tree: str, data_dir: Path) -> dict[str, str]:
    """Assert that the tree service's `gangs` and `tasks` tables (in `data_dir`) hold each gang's
    and task's state as a fresh fold of admission's state from `messages` has it; the gangs' states."""
    folder = AdmissionFolder()
    wanted = subject_filter(SUBJECTS)
    fold_batch(folder, [s for s in messages if wanted(s.subject)], 0)
    rt = folder.state.runtime(tree)
    with duckdb.connect(str(data_dir / "tree" / "tree.duckdb"), read_only=True) as conn:
        gangs = dict(conn.execute("SELECT gang, state FROM gangs").fetchall())
        tasks = dict(conn.execute("SELECT task, state FROM tasks").fetchall())
    assert gangs == {g.id: g.state for g in rt.gangs.values()}
    assert tasks == {t.id: t.state for t in rt.tasks.values()}
    return {str(g): str(state) for g, state in gangs.items()}
