"""`poolwise apply -f FILE [--prune] [--json]` and `poolwise export-config [-o yaml|json]`: the
cluster's configuration as a file (docs/cluster-files.md).

apply: read the file (`services.tools.scenario.cluster_file`), read the live configuration from the
tree service (its `tree_list`, `pool_list` and `host_list` answers, rebuilt into a tree state),
plan the changes with the service's own rules (`services.tree.domain.change_plan`): a file that
breaks any rule is refused whole, every broken rule listed with its place in the file, exit 2,
before any command is sent. Otherwise the commands go one by one, in the planned order, each
with the tree's version it was planned on (`expected_version`): a change made by someone else
meanwhile stops the apply with what was done (run it again: it plans from what is live then).
`--dry-run` sends nothing: it plans on admission's fold of the live log (`services.tools.cli.dry_run`)
and prints each pool's entitlement before and after, what the next cycle would admit, the pools
then over their entitlement and the tasks preemption would pick.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from services.tools.cli.args import InputError, format_resources
from services.tools.cli.errors import fail, one_line, run_async
from services.tools.cli.options import DEFAULT_DATA_DIR, DataDir

FileArg = Annotated[Path, typer.Option("--file", "-f", help="The cluster file (YAML or JSON): a scenario's "
                                                            "header, without steps.")]
DryRunFile = Annotated[Path, typer.Option("--file", "-f", help="The change: a cluster file (YAML or JSON), or a "
                                                               "scenario file whose steps run after it.")]
Prune = Annotated[bool, typer.Option("--prune", help="Delete the pools and hosts the file does not name "
                                                     "(of the sections it has).")]
Output = Annotated[str, typer.Option("--output", "-o", help="yaml (a cluster file) or json.")]
OutcomeJson = Annotated[bool, typer.Option("--json", help="The outcome as one JSON document.")]
DryRun = Annotated[bool, typer.Option("--dry-run", help="Append nothing: print the changes, each pool's "
                                                        "entitlement per kind before and after, the gangs "
                                                        "the next cycle would admit, the pools over their "
                                                        "entitlement and the tasks preemption would pick, "
                                                        "computed on a copy of the live state.")]


def register(app: typer.Typer) -> None:
    app.command("apply")(apply)
    app.command("export-config")(export_config)


def apply(file: FileArg, prune: Prune = False, dry_run: DryRun = False, as_json: OutcomeJson = False,
          data_dir: DataDir = DEFAULT_DATA_DIR) -> None:
    """Make the live pools, hosts and trees match a cluster file (docs/cluster-files.md): the whole
    file is checked first; `no change` when it matches."""
    from services.tools.scenario.cluster_file import load_cluster
    from services.tools.scenario.errors import ScenarioError

    try:
        cluster = load_cluster(file)
    except ScenarioError as exc:
        raise fail(str(exc)) from None
    from services.tools.cli.client import find_url

    url = find_url(data_dir)
    outcome = run_async(lambda: dry_run_outcome(url, cluster, prune) if dry_run else apply_cluster(url, cluster, prune))
    shown(cluster, outcome, as_json, "nothing was applied")
    if not as_json:
        print_outcome(outcome)
        if dry_run:
            print_predictions(outcome)
    if outcome.get("stopped"):
        typer.echo(f"error: {one_line(outcome['stopped'])}", err=True)
        raise typer.Exit(2)


def shown(cluster: Any, outcome: dict[str, Any], as_json: bool, nothing: str) -> None:
    """The outcome as JSON if asked for; a file that breaks rules: each rule broken, one line
    each (unless as JSON), a last line saying `nothing` was done, and exit 2."""
    if as_json:
        sys.stdout.write(json.dumps(outcome, indent=2) + "\n")
    if outcome["violations"]:
        if not as_json:
            for violation in outcome["violations"]:
                typer.echo(f"error: {violation_line(cluster.file, violation)}", err=True)
        count = len(outcome["violations"])
        typer.echo(f"error: {cluster.file}: {count} rule(s) broken; {nothing}", err=True)
        raise typer.Exit(2)


async def apply_cluster(url: str, cluster: Any, prune: bool) -> dict[str, Any]:
    """Make the live system match `cluster` (a checked cluster file): the plan's commands sent in
    order, or nothing when the plan breaks a rule; apply's outcome document (what `--json` prints)."""
    from events.commands import PoolDelete, PoolUpsert, TreeConfigure
    from services.tools.cli.args import ServiceError
    from services.tools.cli.client import request
    from services.tree.domain.change_plan import plan_changes

    state, versions = await _live_state(url)
    plan = plan_changes(state, cluster.config, prune)
    outcome: dict[str, Any] = {
        "file": cluster.file, "applied": False, "changes": [c.to_dict() for c in plan.changes],
        "left": [c.to_dict() for c in plan.left], "commands": 0, "log_positions": [], "violations": [],
    }
    if not plan.ok:
        outcome["changes"] = []
        outcome["violations"] = _violations(cluster, plan.violations)
        return outcome
    for n, command in enumerate(plan.commands):
        tree = getattr(command, "tree", None)
        if isinstance(command, PoolUpsert | PoolDelete | TreeConfigure) and tree is not None:
            # planned on this version of the tree: another writer in between makes it `stale`
            command = command.model_copy(update={"expected_version": versions.get(tree, 0)})
        try:
            reply = await request(url, "tree", command)
        except ServiceError as exc:
            outcome["stopped"] = (f"{cluster.file}: stopped after {n} of {len(plan.commands)} command(s): "
                                  f"{exc} [{exc.rule}]; the live configuration changed meanwhile? run apply "
                                  "again to plan from it")
            break
        outcome["commands"] = n + 1
        if reply.seq is not None:
            outcome["log_positions"].append(reply.seq)
            if tree is not None:
                versions[tree] = reply.seq
    outcome["applied"] = "stopped" not in outcome
    return outcome


def _violations(cluster: Any, violations: Any) -> list[dict[str, Any]]:
    """Each violation as a document, with its place and line in the file, in the file's order
    (those with no place in it, e.g. a live pool --prune cannot delete, last)."""
    found = []
    for violation in violations:
        place, line = cluster.place_of(violation)
        found.append({**violation.to_dict(), "place": place, "line": line})
    return sorted(found, key=lambda v: (v["line"] is None, v["line"] or 0))


async def dry_run_outcome(url: str, cluster: Any, prune: bool, steps: Any = None) -> dict[str, Any]:
    """What `apply --dry-run` (and `whatif`, with the file's `steps`) prints, as a document."""
    from services.tools.cli.dry_run import live_state, what_if

    state = await live_state(url)
    found = what_if(state, cluster.config, prune, steps)
    plan = found.plan
    return {"file": cluster.file, "dry_run": True, "applied": False,
            "changes": [c.to_dict() for c in plan.changes] if plan.ok else [],
            "left": [c.to_dict() for c in plan.left], "commands": len(plan.commands), "log_positions": [],
            "violations": _violations(cluster, plan.violations), **found.to_dict()}


async def _live_state(url: str) -> tuple[Any, dict[str, int]]:
    """The live configuration as a tree state (from the tree service's answers), and each tree's version."""
    from events.commands import HostList, PoolList, TreeList
    from services.tools.cli.client import request
    from services.tree.domain.cluster import state_of_views

    trees = (await request(url, "tree", TreeList())).data["trees"]
    pools: list[dict[str, Any]] = []
    for tree in trees:  # one reply per tree: each is bounded by NATS's max_payload (1 MiB: ~1,000 pools)
        pools.extend(p for t in (await request(url, "tree", PoolList(tree=tree["name"]))).data["trees"]
                     for p in t["pools"])
    hosts = (await request(url, "tree", HostList())).data["hosts"]
    return state_of_views(trees, pools, hosts), {t["name"]: int(t["version"]) for t in trees}


def export_config(output: Output = "yaml", data_dir: DataDir = DEFAULT_DATA_DIR) -> None:
    """Write the live configuration as a cluster file (docs/cluster-files.md): `poolwise apply -f`
    of it changes nothing."""
    if output not in ("yaml", "json"):
        raise InputError(f"--output must be yaml or json, not {output!r}")
    from services.tools.cli.client import find_url
    from services.tools.scenario.cluster_file import render_cluster
    from services.tree.domain.cluster import config_of

    url = find_url(data_dir)
    state, versions = run_async(lambda: _live_state(url))
    config = config_of(state)
    if output == "yaml":
        shown = ", ".join(f"{name} {version}" for name, version in sorted(versions.items()))
        comment = (f"poolwise export-config: the live configuration (tree versions: {shown}).\n"
                   "poolwise apply -f FILE makes a system match it; it is a scenario's header too.")
        sys.stdout.write(render_cluster(config, comment))
        return
    import yaml

    sys.stdout.write(json.dumps(yaml.safe_load(render_cluster(config)), indent=2) + "\n")


# --- printing --------------------------------------------------------------------------------


def violation_line(file: str, violation: dict[str, Any]) -> str:
    where = violation["place"] or ""
    if violation["line"] is not None:
        where = f"{where} (line {violation['line']})" if where else f"line {violation['line']}"
    what = f"{violation['what']} {violation['ref']}" if violation["ref"] else violation["what"]
    if violation["what"] == "pool" and violation["tree"]:
        what += f" (tree {violation['tree']})"
    field = f", {violation['field']}" if violation["field"] else ""
    head = f"{file}: {where}: " if where else f"{file}: "
    return one_line(f"{head}{what}{field}: {violation['message']} [{violation['rule']}]")


def _show(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict) and all(isinstance(v, int | float) and not isinstance(v, bool)
                                       for v in value.values()):
        return format_resources({str(k): float(v) for k, v in value.items()}) if value else "{}"
    return json.dumps(value, sort_keys=True)


def _change_line(change: dict[str, Any]) -> str:
    tree = f" (tree {change['tree']})" if change["what"] == "pool" and change["tree"] else ""
    fields = change["fields"]
    if change["action"] == "created":
        detail = ", ".join(f"{k} {_show(v['after'])}" for k, v in fields.items() if v["after"] not in ({}, []))
    elif change["action"] == "deleted":
        detail = ""
    else:
        detail = ", ".join(f"{k} {_show(v['before'])} -> {_show(v['after'])}" for k, v in fields.items())
    return f"{change['action']} {change['what']} {change['ref']}{tree}" + (f": {detail}" if detail else "")


def print_outcome(outcome: dict[str, Any]) -> None:
    if outcome.get("dry_run"):
        typer.echo(f"dry run of {outcome['file']}: nothing was appended")
    if not outcome["changes"]:
        typer.echo("no change")
    elif outcome.get("dry_run"):
        typer.echo(f"{len(outcome['changes'])} change(s) in {outcome['commands']} command(s) would be made:")
        for change in outcome["changes"]:
            typer.echo(f"  {_change_line(change)}")
    elif outcome.get("stopped"):
        typer.echo(f"{outcome['file']}: {outcome['commands']} command(s) sent before it stopped; the changes "
                   "planned:")
        for change in outcome["changes"]:
            typer.echo(f"  {_change_line(change)}")
    else:
        positions = outcome["log_positions"]
        at = (f", log positions {positions[0]}..{positions[-1]}" if len(positions) > 1
              else f", log position {positions[0]}" if positions else "")
        typer.echo(f"{outcome['file']}: {len(outcome['changes'])} change(s) in {outcome['commands']} "
                   f"command(s){at}")
        for change in outcome["changes"]:
            typer.echo(f"  {_change_line(change)}")
    if outcome["left"]:
        typer.echo("left as they are (not in the file; --prune deletes them):")
        for change in outcome["left"]:
            tree = f" (tree {change['tree']})" if change["what"] == "pool" and change["tree"] else ""
            typer.echo(f"  {change['what']} {change['ref']}{tree}")


def _print_entitlements(rows: list[dict[str, Any]]) -> None:
    """Each pool's entitlement per kind before and after, `*` where it changes."""
    if not rows:
        return
    typer.echo("entitlement per pool and kind, before -> after (computed now on the live state):")
    width = max(len(r["pool"]) for r in rows)
    several = len({r["tree"] for r in rows}) > 1
    for row in rows:
        pool = f"{row['tree']}:{row['pool']}" if several else row["pool"]
        before, after = (_amount(row[k]) for k in ("before", "after"))
        mark = "*" if row["changed"] else " "
        typer.echo(f"{mark} {pool:<{width + (len(row['tree']) + 1 if several else 0)}}  {row['kind']:<8} "
                   f"{before:>10} -> {after}")


def _amount(value: float | None) -> str:
    return "-" if value is None else f"{value:.6g}"


def print_predictions(outcome: dict[str, Any]) -> None:
    """A what-if's predictions (`WhatIf.to_dict`): entitlements, admissions, pools over their
    entitlement, preemption's picks."""
    _print_entitlements(outcome["entitlement"])
    _print_admissions(outcome["admitted"])
    _print_over(outcome["over_entitlement"])
    _print_picks(outcome["preemptions"])


def _anyway(row: dict[str, Any]) -> str:
    return " (without the change too)" if row["without_the_change"] else ""


def _print_admissions(admitted: list[dict[str, Any]]) -> None:
    if not admitted:
        typer.echo("admission's next cycle would admit no gang")
        return
    typer.echo("admission's next cycle would admit:")
    for row in admitted:
        typer.echo(f"  {row['gang']} in {row['pool']} (tree {row['tree']}){_anyway(row)}")


def _print_over(over: list[dict[str, Any]]) -> None:
    if not over:
        typer.echo("no pool would hold more than its entitlement")
        return
    typer.echo("pools that would hold more than their entitlement (held, entitled, over):")
    for row in over:
        kinds = ", ".join(f"{k} {_amount(row['allocation'][k])}, {_amount(row['entitlement'][k])}, "
                          f"{_amount(row['excess'][k])}" for k in row["excess"])
        gangs = ", ".join(row["gangs"]) or "none"
        typer.echo(f"  {row['pool']} (tree {row['tree']}, {row['bucket'].replace('_', '-')}): {kinds}; "
                   f"admitted gangs {gangs}{_anyway(row)}")


def _print_picks(picks: list[dict[str, Any]]) -> None:
    if not picks:
        typer.echo("preemption would pick no task")
        return
    typer.echo("preemption would pick:")
    for row in picks:
        when = "at once" if row["after"] == 0 else f"after the grace period ({row['after']:g} s)"
        cause = row["cause"].replace("_", " ")
        typer.echo(f"  {row['gang']} in {row['pool']} (tree {row['tree']}), tasks {', '.join(row['tasks'])}: "
                   f"{cause}, {when}{_anyway(row)}")
