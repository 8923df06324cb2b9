"""`poolwise up` (everything in one process, on an embedded NATS) and `poolwise serve <service>`.

Both run each service under its leadership lease (`services.common.leadership`): one instance of
a service decides, the others stand by and take over when it stops or loses its lease. `up` is
ready once its services lead; `serve` is ready once its service leads or stands by. Changes of
role are told on stderr (`poolwise: admission leading`, `... standing by (leader: ...)`)."""

from __future__ import annotations

from typing import Annotated

import typer

from services.cli.args import InputError
from services.cli.options import DEFAULT_DATA_DIR, DataDir

# The names of `services.launcher.SERVICES`, in its order (a test keeps them equal): the launcher
# imports every service (DuckDB, Arrow, ...), which only `up` and `serve` need, not every command.
SERVICES: tuple[str, ...] = ("tree", "admission", "preemption")


def register(app: typer.Typer) -> None:
    app.command("up")(up)
    app.command("serve")(serve)


def up(
    data_dir: DataDir = DEFAULT_DATA_DIR,
    nats_url: Annotated[str | None, typer.Option("--nats-url", envvar="NATS_URL",
                                                  help="Use this NATS server instead of an embedded one.")] = None,
) -> None:
    """Run poolwise on this machine: an embedded NATS server (unless NATS_URL is set) and every service."""
    _run(list(SERVICES), data_dir, nats_url, ready_on_standby=False)


def serve(
    service: Annotated[str, typer.Argument(help=f"One of: {', '.join(SERVICES)}.")],
    data_dir: DataDir = DEFAULT_DATA_DIR,
    nats_url: Annotated[str | None, typer.Option("--nats-url", envvar="NATS_URL",
                                                  help="NATS server; default: the one `poolwise up` started.")] = None,
) -> None:
    """Run one service alone against a NATS server (NATS_URL, or the data dir's embedded one)."""
    if service not in SERVICES:
        raise InputError(f"unknown service {service!r}; one of: {', '.join(SERVICES)}")
    if nats_url is None:
        from services.common.natsserver import resolve_nats_url

        nats_url = resolve_nats_url(data_dir)
        if nats_url is None:
            raise InputError("no NATS server: set NATS_URL or start `poolwise up` first")
    _run([service], data_dir, nats_url, embedded=False, ready_on_standby=True)


def role_line(lease: str, state: str, holder: str | None) -> str:
    """What stderr says when a service's role changes (`lease` is `<stream>.<service>`)."""
    service = lease.split(".", 1)[-1]
    if state == "leading":
        return f"poolwise: {service} leading (as {holder})"
    if state == "standby":
        return f"poolwise: {service} standing by (leader: {holder or 'unknown'})"
    return f"poolwise: {service} lost its lease; stopped deciding"


def _run(names: list[str], data_dir: DataDir, nats_url: str | None, *, embedded: bool = True,
         ready_on_standby: bool) -> None:
    from services.common.runtime import run_until_signalled
    from services.launcher import run_system

    def on_ready(url: str) -> None:
        typer.echo(f"poolwise: {', '.join(names)} ready on {url} (data dir {data_dir}); Ctrl-C to stop", err=True)

    def on_change(lease: str, state: str, holder: str | None) -> None:
        typer.echo(role_line(lease, state, holder), err=True)

    run_until_signalled(lambda: run_system(names, data_dir, nats_url if not embedded or nats_url else None,
                                           on_ready=on_ready, ready_on_standby=ready_on_standby,
                                           on_change=on_change))
