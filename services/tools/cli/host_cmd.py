"""`poolwise host add|remove|list`."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from events.commands import HostAdd, HostList, HostRemove
from services.tools.cli.args import parse_list, parse_resources
from services.tools.cli.client import find_url, request
from services.tools.cli.errors import run_async
from services.tools.cli.options import DEFAULT_DATA_DIR, AsJson, DataDir
from services.tools.cli.render import console, host_table

app = typer.Typer(help="Hosts: the machines whose resources make up the trees' capacity.", no_args_is_help=True)


@app.command()
def add(
    name: str,
    resources: Annotated[str, typer.Option("--resources", "-r", help="e.g. cpu=64,memory=256")],
    revocable: Annotated[str, typer.Option("--revocable", help="Slack it offers, e.g. cpu=16")] = "",
    tags: Annotated[str, typer.Option("--tags", help="Comma-separated tags (node_tag_filter)")] = "",
    data_dir: DataDir = DEFAULT_DATA_DIR,
) -> None:
    """Register a host (or change one)."""
    command = HostAdd(host=name, resources=parse_resources(resources, option="resources"),
                      revocable=parse_resources(revocable, option="revocable"), tags=parse_list(tags) or [])
    url = find_url(data_dir)

    async def go() -> None:
        reply = await request(url, "tree", command)
        typer.echo(f"registered host {name} (log position {reply.seq})")

    run_async(go)


@app.command()
def remove(name: str, data_dir: DataDir = DEFAULT_DATA_DIR) -> None:
    """Remove a host."""
    url = find_url(data_dir)

    async def go() -> None:
        reply = await request(url, "tree", HostRemove(host=name))
        typer.echo(f"removed host {name} (log position {reply.seq})")

    run_async(go)


@app.command("list")
def list_(as_json: AsJson = False, data_dir: DataDir = DEFAULT_DATA_DIR) -> None:
    """List hosts."""
    url = find_url(data_dir)

    async def go() -> None:
        reply = await request(url, "tree", HostList())
        hosts = reply.data["hosts"]
        if as_json:
            typer.echo(json.dumps(hosts, indent=2, sort_keys=True))
        else:
            console().print(host_table(hosts))

    run_async(go)
