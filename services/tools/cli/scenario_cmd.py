"""`poolwise scenario run FILE... [--bus memory|nats] [--json]` (docs/scenarios.md)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import anyio
import typer

from services.tools.scenario.errors import ScenarioError
from services.tools.scenario.format import load_scenario
from services.tools.scenario.report import ScenarioReport, print_text

app = typer.Typer(help="What-if runs of pool trees and workloads (format: docs/scenarios.md).", no_args_is_help=True)


@app.command()
def run(
    files: Annotated[list[Path], typer.Argument(help="Scenario files (YAML or JSON).")],
    bus: Annotated[str, typer.Option("--bus", help="memory (in-process log) or nats (embedded JetStream).")] = "memory",
    as_json: Annotated[bool, typer.Option("--json", help="One JSON report per file, one per line.")] = False,
) -> None:
    """Run scenarios; exit 0 when every expectation holds, 1 when one fails, 2 for an invalid file."""
    if bus not in ("memory", "nats"):
        typer.echo(f"error: --bus must be memory or nats, not {bus!r}", err=True)
        raise typer.Exit(2)
    try:
        scenarios = [load_scenario(f) for f in files]
    except ScenarioError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    try:
        reports = anyio.run(_run_all, scenarios, bus)
    except ScenarioError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if as_json:
        for report in reports:
            sys.stdout.write(report.to_json() + "\n")
    else:
        print_text(reports)
    raise typer.Exit(0 if all(r.passed for r in reports) else 1)


async def _run_all(scenarios: list, bus: str) -> list[ScenarioReport]:  # type: ignore[type-arg]
    from services.tools.scenario.runner import run_file

    if bus == "memory":
        return [await run_file(s, bus, None, i) for i, s in enumerate(scenarios)]
    import tempfile

    from services.common.natsserver import EmbeddedNats

    with tempfile.TemporaryDirectory(prefix="poolwise-scenario-") as tmp:
        async with EmbeddedNats(Path(tmp)) as server:  # it dies with this process (natsserver doc)
            return [await run_file(s, bus, server.url, i) for i, s in enumerate(scenarios)]
