"""`poolwise preemptions [--pool P] [--tree T] [--state requested|completed] [--json]`: the
preemptions the running system asked for and how they ended, with their reasons, and the pools
that are below their fair share or starving. Answered by the preemption service from its state
(`poolwise.cmd.preemption.list`)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import typer
from rich.table import Table

from services.preemption.commands import SERVICE, PreemptionList
from services.tools.cli.client import find_url, request
from services.tools.cli.errors import run_async
from services.tools.cli.options import DEFAULT_DATA_DIR, AsJson, DataDir
from services.tools.cli.render import console


def register(app: typer.Typer) -> None:
    app.command("preemptions")(preemptions)


def preemptions(
    pool: Annotated[str | None, typer.Option("--pool", help="Only this pool and the pools under it.")] = None,
    tree: Annotated[str | None, typer.Option("--tree", help="Only this pool tree.")] = None,
    state: Annotated[str | None, typer.Option("--state", help="requested or completed.")] = None,
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="Only the last N.")] = None,
    as_json: AsJson = False,
    data_dir: DataDir = DEFAULT_DATA_DIR,
) -> None:
    """Preemptions requested and completed, with their reasons, and starving pools."""
    if state not in (None, "requested", "completed"):
        raise typer.BadParameter("must be requested or completed", param_hint="--state")
    wanted: Literal["requested", "completed"] | None = state  # type: ignore[assignment]
    command = PreemptionList(tree=tree, pool=pool, state=wanted, limit=limit)
    url = find_url(data_dir)

    async def go() -> None:
        reply = await request(url, SERVICE, command)
        data: dict[str, Any] = reply.data
        if as_json:
            typer.echo(json.dumps(data, indent=2, sort_keys=True))
            return
        out = console()
        out.print(preemption_table(data["preemptions"]))
        below = [s for s in data["starvation"] if s["status"] != "ok"]
        for status in below:
            out.print(f"pool {status['pool']} (tree {status['tree']}) is {status['status'].replace('_', ' ')} "
                      f"since {_when(status['since'])}")

    run_async(go)


def preemption_table(records: list[dict[str, Any]]) -> Table:
    table = Table("at", "tree", "pool", "gang", "tasks", "state", "outcome", "reason")
    for r in records:
        outcome = r["outcome"] or "-"
        if r["completed_at"] is not None:
            outcome = f"{outcome} at {_when(r['completed_at'])}"
        table.add_row(_when(r["time"]), r["tree"], r["pool"], r["gang"], str(len(r["tasks"])), r["state"], outcome,
                      r["reason"])
    if not records:
        table.caption = "no preemptions"
    return table


def _when(seconds: float) -> str:
    """Log time for people: UTC, to the millisecond."""
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
