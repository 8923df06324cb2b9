"""`poolwise events schema`: the contract submitters code against."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from events import EVENT_TYPES, Envelope

app = typer.Typer(help="The event contract.", no_args_is_help=True)


@app.command()
def schema(
    event_type: Annotated[str | None, typer.Argument(help="One event type; default: the envelope with all.")] = None,
) -> None:
    """Print the JSON Schema of every event (the envelope with the union of all event types)."""
    if event_type is None:
        typer.echo(json.dumps(Envelope.model_json_schema(), indent=2, sort_keys=True))
        return
    cls = EVENT_TYPES.get(event_type)
    if cls is None:
        typer.echo(f"error: unknown event type {event_type!r}; known: {', '.join(sorted(EVENT_TYPES))}", err=True)
        raise typer.Exit(2)
    typer.echo(json.dumps(cls.model_json_schema(), indent=2, sort_keys=True))


@app.command("types")
def types_() -> None:
    """List the event types with their current versions."""
    for name, cls in sorted(EVENT_TYPES.items()):
        typer.echo(f"{name} v{cls.model_fields['version'].default}")
