"""The `poolwise` command: one CLI for everything a person does.

Sub-commands live in modules named for what they hold; this module only wires them."""

from __future__ import annotations

import typer

from services.cli import demo_cmd, events_cmd, host_cmd, pool_cmd, scenario_cmd, serve_cmd, sql_cmd, tree_cmd
from services.cli.bench_cmd import register as register_bench
from services.cli.errors import guarded
from services.cli.gangs_cmd import register as register_gangs
from services.cli.preemptions_cmd import register as register_preemptions
from services.cli.replay_cmd import register as register_replay
from services.cli.submit_cmd import register as register_submit

app = typer.Typer(
    name="poolwise",
    help="Event-sourced resource manager for shared compute clusters.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.add_typer(pool_cmd.app, name="pool")
app.add_typer(host_cmd.app, name="host")
app.add_typer(tree_cmd.app, name="tree")
app.add_typer(events_cmd.app, name="events")
app.add_typer(scenario_cmd.app, name="scenario")
serve_cmd.register(app)
sql_cmd.register(app)
register_bench(app)
register_replay(app)
demo_cmd.register(app)
register_preemptions(app)
register_submit(app)
register_gangs(app)


def main() -> None:
    _log_level()
    guarded(app)


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
