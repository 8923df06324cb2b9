"""`poolwise tree configure|list`: pool trees and their options."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from pydantic import ValidationError

from events.commands import TreeConfigure, TreeList
from events.config import TreeOptions
from services.tools.cli.args import InputError, parse_list
from services.tools.cli.client import find_url, request
from services.tools.cli.errors import run_async
from services.tools.cli.options import DEFAULT_DATA_DIR, DataDir

app = typer.Typer(help="Pool trees: independent hierarchies with their own capacity and options.",
                  no_args_is_help=True)


def options_from(file: Path | None, policy: str | None, resources: str | None) -> TreeOptions:
    data: dict[str, Any] = {}
    if file is not None:
        try:
            loaded = yaml.safe_load(file.read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise InputError(f"--file {file}: {exc}") from None
        if not isinstance(loaded, dict):
            raise InputError(f"--file {file}: must hold a mapping of tree options")
        data.update(loaded)
    if policy is not None:
        data["policy"] = policy
    if resources is not None:
        data["resources"] = parse_list(resources)
    try:
        return TreeOptions.model_validate(data)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        raise InputError(f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}") from None


@app.command()
def configure(
    name: str,
    file: Annotated[Path | None, typer.Option("--file", "-f", help="YAML/JSON file of tree options.")] = None,
    policy: Annotated[str | None, typer.Option("--policy", help="per_resource, dominant or hdrf.")] = None,
    resources: Annotated[str | None, typer.Option("--resources", help="Kinds in play, e.g. cpu,memory,gpu.")] = None,
    data_dir: DataDir = DEFAULT_DATA_DIR,
) -> None:
    """Create a tree or replace its options (options not given take their defaults)."""
    options = options_from(file, policy, resources)
    url = find_url(data_dir)

    async def go() -> None:
        reply = await request(url, "tree", TreeConfigure(tree=name, options=options))
        typer.echo(f"configured tree {name} (log position {reply.seq})")

    run_async(go)


@app.command("list")
def list_(data_dir: DataDir = DEFAULT_DATA_DIR) -> None:
    """List trees with their options as JSON."""
    url = find_url(data_dir)

    async def go() -> None:
        reply = await request(url, "tree", TreeList())
        typer.echo(json.dumps(reply.data, indent=2, sort_keys=True))

    run_async(go)
