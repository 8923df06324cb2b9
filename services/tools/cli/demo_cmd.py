"""`poolwise demo`: the whole system on its own embedded NATS, a cluster applied, a workload driven
through it with an executor simulator, its numbers live, a summary, and `replay --verify`.

`--workload teams` (default): several teams on eight machines, paced to be watched (docs/demo.md);
`--workload kueue-baseline`: Kueue's scheduler performance test in log time (`--scale` cuts it);
`--workload peloton`: the Peloton user guide's sharing example, told step by step.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import anyio
import typer
from anyio.abc import TaskStatus

from services.tools.cli.args import InputError
from services.tools.cli.render import console

WORKLOADS = ("teams", "kueue-baseline", "peloton")


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)


def demo(
    workload: Annotated[str, typer.Option("--workload", "-w", help="teams (default), kueue-baseline or peloton.")]
    = "teams",
    duration: Annotated[float, typer.Option("--duration", help=(
        "Wall seconds the teams demo takes, summary and replay included (its log time runs 10x).")
    )] = 60.0,
    scale: Annotated[float, typer.Option("--scale", help=(
        "kueue-baseline: the share of its 15,000 jobs to run (0 < scale <= 1; the cluster stays whole)."))] = 1.0,
    data_dir: Annotated[Path | None, typer.Option("--data-dir", help=(
        "Keep the demo's NATS store and read models here (a new directory; `poolwise sql --data-dir` and "
        "`replay` read them after). Default: a temporary directory, removed at the end."))] = None,
    as_json: Annotated[bool, typer.Option("--json", help="The summary as one JSON document, nothing live.")] = False,
    http_port: Annotated[int | None, typer.Option("--http-port", min=0, max=65535, metavar="PORT", help=(
        "Serve the dashboard (docs/dashboard.md) on 127.0.0.1:PORT while the demo runs (0: any free port); its "
        "address is printed first."))] = None,
    bus: Annotated[str, typer.Option("--bus", help="peloton only: nats (embedded JetStream) or memory.")] = "nats",
) -> None:
    """Run poolwise on a workload and watch it decide; ends with a summary and `replay --verify`."""
    started = time.monotonic()
    if workload not in WORKLOADS:
        raise InputError(f"--workload must be one of {', '.join(WORKLOADS)}, not {workload!r}")
    if workload == "peloton":
        peloton(bus)
        return
    if not duration > 0:
        raise InputError(f"--duration: wall seconds above 0, got {duration:g}")
    if data_dir is not None and data_dir.exists() and any(data_dir.iterdir()):
        raise InputError(f"--data-dir {data_dir}: not empty; the demo starts a new log (give a new directory)")
    from services.tools.demo.driver import run_demo
    from services.tools.demo.kueue import kueue_baseline
    from services.tools.demo.live import LiveView, PlainLines
    from services.tools.demo.summary import print_summary, result_document
    from services.tools.demo.teams import teams

    try:
        chosen = teams(duration) if workload == "teams" else kueue_baseline(scale)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    out = console()
    if as_json:
        watcher: object = PlainLines(chosen, lambda line: None)
    elif out.is_terminal:
        watcher = LiveView(chosen, out)
    else:
        watcher = PlainLines(chosen, typer.echo)
    if not as_json:
        typer.echo(f"poolwise demo: {chosen.description}")
    where = data_dir or Path(tempfile.mkdtemp(prefix="poolwise-demo-"))
    # the teams demo keeps a part of --duration for its replay and summary; kueue-baseline runs whole
    deadline = started + duration - max(2.5, 0.1 * duration) if workload == "teams" else None
    try:
        board = None if http_port is None else partial(dashboard, http_port, err=as_json)  # (stdout: the JSON)
        result = anyio.run(lambda: run_demo(chosen, where, watcher, apply_file, deadline=deadline,  # type: ignore[arg-type]
                                            beside=board, settle=None if data_dir is None else read_models_settled))
    finally:
        if data_dir is None:
            shutil.rmtree(where, ignore_errors=True)
    if result.read_models_behind is not None:
        held, end = result.read_models_behind
        typer.echo(f"note: the SQL tables in {where} hold the log up to position {held:,} of {end:,}; "
                   f"`poolwise up --data-dir {where}` folds the rest", err=True)
    if as_json:
        sys.stdout.write(json.dumps(result_document(result), sort_keys=True) + "\n")
    else:
        print_summary(result, typer.echo)
        from services.tools.cli.replay_cmd import print_report

        typer.echo("")
        typer.echo("poolwise replay --verify:")
        print_report(result.replay)
    raise typer.Exit(0 if result.replay.ok else 1)


async def apply_file(url: str, path: Path) -> dict[str, Any]:
    """`poolwise apply -f PATH` against the system at `url` (the demo's cluster): apply's outcome
    document; a file the plan refuses, or an apply stopped half-way, is an error here."""
    from services.tools.cli.apply_cmd import apply_cluster
    from services.tools.scenario.cluster_file import load_cluster

    outcome = await apply_cluster(url, load_cluster(path), False)
    if outcome["violations"] or outcome.get("stopped"):
        raise RuntimeError(f"{path}: not applied: {outcome}")
    return outcome


CHECKPOINTS = "SELECT min(last_seq) AS held FROM checkpoints"


async def read_models_settled(url: str, patience: float = 60.0) -> tuple[int, int] | None:
    """Wait until the tree service's read models hold the log at `url` to its end (their lowest
    checkpoint, asked over SQL as `poolwise sql` asks): None, or, after `patience` seconds, where
    they stopped and where the log ends. The demo keeps its data dir for `poolwise sql --data-dir`:
    without this the tables lagged where the demo stopped (the tree service projects behind its fold)."""
    from services.common.jetstream import JetStreamLog
    from services.tools.cli.answers import SqlRequest
    from services.tools.cli.client import request

    log = await JetStreamLog.connect(url, name="poolwise-demo-settle")
    try:
        end = await log.last_seq()
    finally:
        await log.close()
    held = 0
    with anyio.move_on_after(patience):
        while True:
            rows = (await request(url, "tree", SqlRequest(sql=CHECKPOINTS, max_rows=1, format="rows"))).data["rows"]
            held = int(rows[0][0] or 0) if rows else 0
            if held >= end:
                return None
            await anyio.sleep(0.1)
    return held, end


async def dashboard(port: int, url: str, *, err: bool = False,
                    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
    """The dashboard of `poolwise up --http-port` on the demo's system, on 127.0.0.1:`port`, until
    cancelled; its address said once it is bound."""
    from services.common.health_http import serve_http
    from services.tools.dashboard import Dashboard

    board = Dashboard(lambda: url)
    async with anyio.create_task_group() as tg:
        tg.start_soon(board.run)
        bound = await tg.start(partial(serve_http, "127.0.0.1", port, {}, board.handler))
        typer.echo(f"dashboard: http://127.0.0.1:{bound}/ (while the demo runs)", err=err)
        task_status.started()


def peloton(bus: str) -> None:
    """Three pools share 100 cpu; watch RP1's loan taken back: RP2 and RP3 each give back 11.67."""
    from services.tools.demo.story import render, scenario
    from services.tools.scenario.runner import run_file

    if bus not in ("nats", "memory"):
        raise InputError(f"--bus must be nats or memory, not {bus!r}")

    async def go() -> object:
        if bus == "memory":
            return await run_file(scenario(), "memory", None, 0)
        from services.common.natsserver import EmbeddedNats

        with tempfile.TemporaryDirectory(prefix="poolwise-demo-") as tmp:
            async with EmbeddedNats(Path(tmp)) as server:  # it dies with this process (natsserver doc)
                return await run_file(scenario(), "nats", server.url, 0)

    report = anyio.run(go)
    render(report, console())  # type: ignore[arg-type]
    raise typer.Exit(0 if report.passed else 1)  # type: ignore[attr-defined]
