"""The `poolwise` command: one CLI for everything a person does.

Sub-commands live in modules named for what they hold; this module only wires them. Each module
is imported when one of its commands runs (or when help lists them all), not when the CLI starts:
`poolwise serve tree`, which `poolwise up` runs once per service, would otherwise load the event
contract's models, the scenario runner, the submitter SDK and rich's tables it never uses, in
every process it starts. `up` and `serve` are registered at once (their module is light); every
other command is `LAZY`: a name, the module holding it, and how that module registers it."""

from __future__ import annotations

import importlib
from collections.abc import Iterator, MutableMapping
from typing import TYPE_CHECKING, Any

import typer
from typer import _click as click
from typer.core import TyperGroup
from typer.main import get_group

from services.tools.cli import credentials, serve_cmd
from services.tools.cli.args import InputError
from services.tools.cli.errors import guarded

if TYPE_CHECKING:
    import logging

# (command names, module, what registers them: "register" (its `register(app)`) or "app" (a
# sub-app added under the one name)), in the order help lists them: the commands the modules'
# `register` adds, then the sub-apps, as when every module was imported up front.
LAZY: tuple[tuple[tuple[str, ...], str, str], ...] = (
    (("sql",), "services.tools.cli.sql_cmd", "register"),
    (("export",), "services.tools.cli.export_cmd", "register"),
    (("bench",), "services.tools.cli.bench_cmd", "register"),
    (("replay",), "services.tools.cli.replay_cmd", "register"),
    (("demo",), "services.tools.cli.demo_cmd", "register"),
    (("preemptions",), "services.tools.cli.preemptions_cmd", "register"),
    (("submit", "cancel", "task", "gang"), "services.tools.cli.submit_cmd", "register"),
    (("gangs", "explain"), "services.tools.cli.gangs_cmd", "register"),
    (("pool",), "services.tools.cli.pool_cmd", "app"),
    (("host",), "services.tools.cli.host_cmd", "app"),
    (("tree",), "services.tools.cli.tree_cmd", "app"),
    (("events",), "services.tools.cli.events_cmd", "app"),
    (("scenario",), "services.tools.cli.scenario_cmd", "app"),
    (("apply", "export-config"), "services.tools.cli.apply_cmd", "register"),
    (("whatif",), "services.tools.cli.whatif_cmd", "register"),
    (("state",), "services.tools.cli.state_cmd", "register"),
)
# Where each name goes in help: its sub-apps last (`submit`'s `task` and `gang` after `scenario`).
ORDER: tuple[str, ...] = ("up", "serve", "sql", "export", "bench", "replay", "demo", "preemptions", "submit",
                          "cancel", "gangs", "explain", "state", "apply", "whatif", "export-config", "pool", "host",
                          "tree", "events", "scenario", "task", "gang")

SETTINGS: dict[str, Any] = {"pretty_exceptions_enable": False, "add_completion": False}


def load(module: str, how: str, names: tuple[str, ...]) -> dict[str, click.Command]:
    """The click commands `names` of `module`, built as typer builds them in a group of its own."""
    found = importlib.import_module(module)
    holder = typer.Typer(**SETTINGS)
    if how == "register":
        found.register(holder)
    else:
        holder.add_typer(getattr(found, how), name=names[0])
    commands = get_group(holder).commands
    return {name: commands[name] for name in names}


class LazyCommands(MutableMapping[str, click.Command]):
    """A group's commands by name: those given at once, the `LAZY` ones built when first asked
    for. Its names (what a mistyped command is matched against) need no import."""

    def __init__(self, given: MutableMapping[str, click.Command]) -> None:
        self._built: dict[str, click.Command] = dict(given)
        self._lazy = {name: (module, how, names) for names, module, how in LAZY for name in names}

    def _names(self) -> list[str]:
        known = [*self._built, *(name for name in self._lazy if name not in self._built)]
        return sorted(known, key=lambda name: ORDER.index(name) if name in ORDER else len(ORDER))

    def __getitem__(self, name: str) -> click.Command:
        if name not in self._built and name in self._lazy:
            module, how, names = self._lazy[name]
            self._built.update(load(module, how, names))
        return self._built[name]

    def __setitem__(self, name: str, command: click.Command) -> None:
        self._built[name] = command

    def __delitem__(self, name: str) -> None:
        self._built.pop(name, None)
        self._lazy.pop(name, None)

    def __contains__(self, name: object) -> bool:
        return name in self._built or name in self._lazy

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())


class LazyGroup(TyperGroup):
    """The top-level group, its commands a `LazyCommands`."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self.commands = LazyCommands(self.commands)


app = typer.Typer(
    name="poolwise",
    help="Event-sourced resource manager for shared compute clusters.",
    no_args_is_help=True,
    cls=LazyGroup,
    **SETTINGS,
)
credentials.register(app)  # --creds, --nkey, --tls-ca, --tls-cert, --tls-key (before any command)
serve_cmd.register(app)


def main() -> None:
    _log_level()
    _quiet_tls_close()
    try:
        serve_cmd.check_environment()
    except InputError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise SystemExit(2) from None
    guarded(app)


def _not_eof_received(record: logging.LogRecord) -> bool:
    return "eof_received()" not in record.getMessage()


def _quiet_tls_close() -> None:
    """asyncio logs `returning true from eof_received() has no effect when using ssl` whenever a
    server closes a TLS connection of nats-py's (its protocol returns true there): harmless, and
    printed before every command's own lines over TLS (and by the services). Not shown. The filter
    is one function, added once however often `main()` runs in a process (a logger keeps one of
    each; a new lambda per call was one more filter per command run in-process)."""
    import logging

    logging.getLogger("asyncio").addFilter(_not_eof_received)


def _log_level() -> None:
    """`POOLWISE_LOG=info` (or debug, warning...) shows the services' own log lines on stderr: a
    start from a snapshot, snapshots saved or passed over, a standby's fold. Default: warnings."""
    import logging
    import os

    level = os.environ.get("POOLWISE_LOG", "").strip().upper()
    if level:
        logging.basicConfig(level=getattr(logging, level, logging.WARNING),
                            format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s")


if __name__ == "__main__":
    main()
