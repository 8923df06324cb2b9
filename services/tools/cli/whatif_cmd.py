"""`poolwise whatif -f FILE [--prune] [--json]`: what a change would do to the live system, with
nothing appended (issue 21; docs/whatif.md).

FILE is a cluster file (docs/cluster-files.md), the change: what `apply --dry-run` prints for it
(the config diff, each pool's entitlement per kind before and after, the gangs the next cycle
would admit, the pools then over their entitlement, the tasks preemption would pick). It may
also be a scenario file with `steps` (docs/scenarios.md): the steps then run after the change on
the same copy of the live state, `at` counted from the log's time now, and their report and
expectations follow (exit 1 when one fails, as `scenario run`).
"""

from __future__ import annotations

from typing import Any

import typer

from services.tools.cli.apply_cmd import DryRunFile, OutcomeJson, Prune, print_outcome, print_predictions, shown
from services.tools.cli.errors import fail, run_async
from services.tools.cli.options import DEFAULT_DATA_DIR, DataDir


def register(app: typer.Typer) -> None:
    app.command("whatif")(whatif)


def whatif(file: DryRunFile, prune: Prune = False, as_json: OutcomeJson = False,
           data_dir: DataDir = DEFAULT_DATA_DIR) -> None:
    """What a change (a cluster file, with `steps` after it if it is a scenario) would do to the live
    system, computed on a copy of its state: nothing is appended (docs/whatif.md)."""
    from services.tools.cli.apply_cmd import dry_run_outcome
    from services.tools.cli.client import find_url
    from services.tools.scenario.cluster_file import load_cluster
    from services.tools.scenario.errors import ScenarioError
    from services.tools.scenario.format import load_scenario

    try:
        cluster = load_cluster(file, steps=True)
        data = cluster.source.data
        steps = load_scenario(file) if isinstance(data, dict) and data.get("steps") else None
    except ScenarioError as exc:
        raise fail(str(exc)) from None
    url = find_url(data_dir)
    outcome = run_async(lambda: dry_run_outcome(url, cluster, prune, steps))
    shown(cluster, outcome, as_json, "nothing was computed")
    if not as_json:
        print_outcome(outcome)
        print_predictions(outcome)
        if "steps" in outcome:
            _print_steps(outcome["steps"])
    if "steps" in outcome and not outcome["steps"]["passed"]:
        raise typer.Exit(1)


def _print_steps(report: dict[str, Any]) -> None:
    from services.tools.scenario.report import ScenarioReport, render_text

    typer.echo("the steps, after the change:")
    typer.echo(render_text(ScenarioReport.model_validate(report)), nl=False)
