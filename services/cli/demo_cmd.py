"""`poolwise demo`: the Peloton user guide example on the real services (embedded NATS by default)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated

import anyio
import typer

from services.cli.render import console


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)


def demo(bus: Annotated[str, typer.Option("--bus", help="nats (embedded JetStream) or memory.")] = "nats") -> None:
    """Three pools share 100 cpu; watch RP1's loan taken back: RP2 and RP3 each give back 11.67."""
    from services.demo.story import render, scenario
    from services.scenario.runner import run_file

    if bus not in ("nats", "memory"):
        typer.echo(f"error: --bus must be nats or memory, not {bus!r}", err=True)
        raise typer.Exit(2)

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
