"""`poolwise pool create|update|delete|get|list|tree`."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from events.commands import PoolDelete, PoolGet, PoolList, PoolUpsert
from events.config import PoolConfig
from services.tools.cli.args import InputError, parse_list, parse_resources, parse_share
from services.tools.cli.client import find_url, request
from services.tools.cli.errors import run_async
from services.tools.cli.options import DEFAULT_DATA_DIR, AsJson, DataDir, TreeName
from services.tools.cli.render import console, pool_table, pool_tree

app = typer.Typer(help="Create, change, delete and look at resource pools.", no_args_is_help=True)

Opt = typer.Option
Reservation = Annotated[str | None, Opt("--reservation", "-r", help="Guaranteed minimum, e.g. cpu=100,memory=1000.")]
Limit = Annotated[str | None, Opt("--limit", "-l", help="Hard maximum, e.g. cpu=200.")]
Share = Annotated[str | None, Opt("--share", "-s", help="Weight for what is left over: 2, or cpu=2,gpu=1.")]
ReservationType = Annotated[str | None, Opt("--reservation-type", help="elastic or static.")]
ControllerLimit = Annotated[float | None, Opt("--controller-limit", help="Percent of reservation for controllers.")]
SlackLimit = Annotated[float | None, Opt("--slack-limit", help="Percent of reservation for revocable tasks.")]
Mode = Annotated[str | None, Opt("--mode", help="fifo or fair_share.")]
FifoSort = Annotated[str | None, Opt("--fifo-sort", help="Keys, e.g. priority,arrival,pending_tasks.")]
MaxRunning = Annotated[int | None, Opt("--max-running-jobs", help="Jobs with admitted gangs, here and below.")]
MaxJobs = Annotated[int | None, Opt("--max-jobs", help="Running plus waiting jobs, here and below.")]
Ephemeral = Annotated[bool | None, Opt("--ephemeral-subpools/--no-ephemeral-subpools",
                                       help="Gangs go to per-user child pools pool$user.")]
PreemptLower = Annotated[bool | None, Opt("--preempt-lower-priority/--no-preempt-lower-priority",
                                          help="A blocked gang may preempt lower-priority tasks of the pool.")]
Presets = Annotated[str | None, Opt("--presets", help="Tree presets applied first, comma-separated.")]
ConfigFile = Annotated[str | None, Opt("--config-json", help="Options as JSON (pool keys: docs/cluster-files.md).")]
ExpectedVersion = Annotated[int | None, Opt("--if-version", help="Refuse if the tree changed since this version.")]


def _config(
    reservation: str | None, limit: str | None, share: str | None, reservation_type: str | None,
    controller_limit: float | None, slack_limit: float | None, mode: str | None, fifo_sort: str | None,
    max_running_jobs: int | None, max_jobs: int | None, ephemeral: bool | None, preempt_lower: bool | None,
    presets: str | None, config_json: str | None,
) -> PoolConfig:
    data: dict[str, Any] = {}
    if config_json:
        try:
            loaded = json.loads(config_json)
        except ValueError as exc:
            raise InputError(f"--config-json: not valid JSON: {exc}") from None
        if not isinstance(loaded, dict):
            raise InputError("--config-json: must be a JSON object of pool options")
        data.update(loaded)
    flags: dict[str, Any] = {
        "reservation": parse_resources(reservation, option="reservation") if reservation is not None else None,
        "limit": parse_resources(limit, option="limit") if limit is not None else None,
        "share": parse_share(share) if share is not None else None,
        "reservation_type": reservation_type,
        "controller_limit": controller_limit,
        "slack_limit": slack_limit,
        "mode": mode,
        "fifo_sort": parse_list(fifo_sort),
        "max_running_jobs": max_running_jobs,
        "max_jobs": max_jobs,
        "create_ephemeral_subpools": ephemeral,
        "preempt_lower_priority": preempt_lower,
        "config_presets": parse_list(presets),
    }
    data.update({k: v for k, v in flags.items() if v is not None})
    from pydantic import ValidationError

    try:
        return PoolConfig.model_validate(data)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        field = ".".join(str(p) for p in err["loc"])
        raise InputError(f"{field}: {err['msg']}") from None


def _upsert(path: str, tree: str, config: PoolConfig, data_dir: DataDir, expected: int | None, create: bool,
            replace: bool = False) -> None:
    url = find_url(data_dir)
    command = PoolUpsert(tree=tree, path=path, config=config, expected_version=expected,
                         require="new" if create else "existing", replace=replace)

    async def go() -> None:
        reply = await request(url, "tree", command)
        verb = "created" if create else "updated"
        typer.echo(f"{verb} {path} in tree {tree} (log position {reply.seq})")

    run_async(go)


@app.command()
def create(
    path: str, reservation: Reservation = None, limit: Limit = None, share: Share = None,
    reservation_type: ReservationType = None, controller_limit: ControllerLimit = None,
    slack_limit: SlackLimit = None, mode: Mode = None, fifo_sort: FifoSort = None,
    max_running_jobs: MaxRunning = None, max_jobs: MaxJobs = None, ephemeral_subpools: Ephemeral = None,
    preempt_lower_priority: PreemptLower = None, presets: Presets = None, config_json: ConfigFile = None,
    tree: TreeName = "default", if_version: ExpectedVersion = None, data_dir: DataDir = DEFAULT_DATA_DIR,
) -> None:
    """Create a pool, e.g. `poolwise pool create /ATG --reservation cpu=100 --limit cpu=200 --share 2`."""
    config = _config(reservation, limit, share, reservation_type, controller_limit, slack_limit, mode, fifo_sort,
                     max_running_jobs, max_jobs, ephemeral_subpools, preempt_lower_priority, presets, config_json)
    _upsert(path, tree, config, data_dir, if_version, create=True)


@app.command()
def update(
    path: str, reservation: Reservation = None, limit: Limit = None, share: Share = None,
    reservation_type: ReservationType = None, controller_limit: ControllerLimit = None,
    slack_limit: SlackLimit = None, mode: Mode = None, fifo_sort: FifoSort = None,
    max_running_jobs: MaxRunning = None, max_jobs: MaxJobs = None, ephemeral_subpools: Ephemeral = None,
    preempt_lower_priority: PreemptLower = None, presets: Presets = None, config_json: ConfigFile = None,
    tree: TreeName = "default", if_version: ExpectedVersion = None, data_dir: DataDir = DEFAULT_DATA_DIR,
    replace: Annotated[bool, Opt("--replace", help="The options given become the whole config: "
                                                    "every other option is unset (back to its default).")] = False,
) -> None:
    """Change the options named; the others keep their values (a resource map is replaced whole)."""
    config = _config(reservation, limit, share, reservation_type, controller_limit, slack_limit, mode, fifo_sort,
                     max_running_jobs, max_jobs, ephemeral_subpools, preempt_lower_priority, presets, config_json)
    _upsert(path, tree, config, data_dir, if_version, create=False, replace=replace)


@app.command()
def delete(path: str, tree: TreeName = "default", if_version: ExpectedVersion = None,
           data_dir: DataDir = DEFAULT_DATA_DIR) -> None:
    """Delete a pool that has no children and no unfinished gangs."""
    url = find_url(data_dir)

    async def go() -> None:
        reply = await request(url, "tree", PoolDelete(tree=tree, path=path, expected_version=if_version))
        typer.echo(f"deleted {path} from tree {tree} (log position {reply.seq})")

    run_async(go)


@app.command()
def get(path: str, tree: TreeName = "default", data_dir: DataDir = DEFAULT_DATA_DIR) -> None:
    """Show one pool: its explicit options and the effective ones, as JSON."""
    url = find_url(data_dir)

    async def go() -> None:
        reply = await request(url, "tree", PoolGet(tree=tree, path=path))
        typer.echo(json.dumps(reply.data, indent=2, sort_keys=True))

    run_async(go)


@app.command("list")
def list_(tree: Annotated[str | None, Opt("--tree", help="Only this tree.")] = None, as_json: AsJson = False,
          data_dir: DataDir = DEFAULT_DATA_DIR) -> None:
    """List pools as a table."""
    url = find_url(data_dir)

    async def go() -> None:
        reply = await request(url, "tree", PoolList(tree=tree))
        pools = [p for t in reply.data["trees"] for p in t["pools"]]
        if as_json:
            typer.echo(json.dumps(pools, indent=2, sort_keys=True))
        else:
            console().print(pool_table(pools))

    run_async(go)


@app.command("tree")
def tree_(tree: Annotated[str | None, Opt("--tree", help="Only this tree.")] = None,
          at: Annotated[str | None, Opt("--at", help="As the log had it then: a log position (SEQ) or an "
                                                     "event time (ISO 8601).")] = None,
          data_dir: DataDir = DEFAULT_DATA_DIR) -> None:
    """Draw the pool tree(s) with reservation, limit and share (`--at`: as they were then)."""
    url = find_url(data_dir)

    def show(data: dict[str, Any]) -> None:
        out = console()
        for t in data["trees"]:
            out.print(pool_tree(t["tree"], t["pools"], t.get("capacity")))

    async def go() -> None:
        show((await request(url, "tree", PoolList(tree=tree))).data)

    if at is not None:
        from services.tools.cli.state_cmd import pools_at

        show(pools_at(url, at, tree))
    else:
        run_async(go)
