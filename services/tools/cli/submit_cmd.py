"""`poolwise submit`, `poolwise task set`, `poolwise cancel` (also `poolwise gang cancel`): what a
submitter and an executor say, published with the submitter SDK (`services.sdk`).

    poolwise submit --gang g1 --pool /ATG --tasks 4 --resources cpu=2,memory=100 --priority 5
    poolwise submit --file gangs.yaml          # one gang (a mapping) or many (a list, or `gangs:`)
    poolwise task set g1/0 running --gang g1
    poolwise cancel g1 --reason "not needed"

A file names each gang with the `enqueue` arguments of the SDK (`gang`, `pool`, `tasks` (a
count, or a list of `{id, resources}`), `resources`, `size`, `job`, `user`, `priority`,
`preemptible`, `revocable`, `controller`, `timeout`, `tree`, `first_member`).
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
import yaml

from services.sdk import PublishError, SubmitError, Submitter, enqueue_event
from services.sdk.build import TASK_STATES
from services.tools.cli.args import InputError, parse_resources
from services.tools.cli.client import find_url
from services.tools.cli.errors import run_async
from services.tools.cli.gangs_cmd import first_word
from services.tools.cli.options import DEFAULT_DATA_DIR, DataDir, TreeName

T = TypeVar("T")

SOURCE = "cli"
GANG_KEYS: tuple[str, ...] = ("gang", "pool", "tasks", "count", "resources", "size", "job", "user", "priority",
                              "preemptible", "revocable", "controller", "timeout", "tree", "first_member")

task_app = typer.Typer(help="Report task states (what placement and executors do).", no_args_is_help=True)
gang_app = typer.Typer(help="Act on one gang.", no_args_is_help=True)

Opt = typer.Option


def register(app: typer.Typer) -> None:
    app.command("submit")(submit)
    app.command("cancel")(cancel)
    app.add_typer(task_app, name="task")
    app.add_typer(gang_app, name="gang")
    gang_app.command("cancel")(cancel)
    task_app.command("set")(task_set)


def submit(
    gang: Annotated[str | None, Opt("--gang", "-g", help="Gang id (used once).")] = None,
    pool: Annotated[str | None, Opt("--pool", "-p", help="Leaf pool, e.g. /ATG/Simulation.")] = None,
    tasks: Annotated[int | None, Opt("--tasks", "-n", help="How many members this submits.")] = None,
    resources: Annotated[str | None, Opt("--resources", "-r", help="Per member, e.g. cpu=2,memory=100.")] = None,
    size: Annotated[int | None, Opt("--size", help="Members the gang waits for (default: --tasks).")] = None,
    first_member: Annotated[int, Opt("--first-member", help="Number of the first member id <gang>/<n>.")] = 0,
    job: Annotated[str | None, Opt("--job", help="Job of the gang (default: the gang id).")] = None,
    user: Annotated[str | None, Opt("--user", help="Submitting user (default: anonymous).")] = None,
    priority: Annotated[int, Opt("--priority", help="Higher first.")] = 0,
    preemptible: Annotated[bool, Opt("--preemptible/--no-preemptible", help="May its tasks be preempted.")] = True,
    revocable: Annotated[bool, Opt("--revocable", help="Runs on slack; first to go.")] = False,
    controller: Annotated[bool, Opt("--controller", help="A controller gang (controller_limit).")] = False,
    timeout: Annotated[float | None, Opt("--timeout", help="Seconds to wait for members and for placement.")] = None,
    file: Annotated[str | None, Opt("--file", "-f", help="YAML/JSON file of gangs (`-`: standard input).")] = None,
    wait: Annotated[float | None, Opt("--wait", help="Then wait up to this many seconds for admission's "
                                                     "first word on the gang(s), and print it.")] = None,
    tree: TreeName = "default",
    data_dir: DataDir = DEFAULT_DATA_DIR,
) -> None:
    """Submit a gang from flags, or one or many gangs from --file."""
    if file is not None:
        flags = {"--gang": gang, "--pool": pool, "--tasks": tasks, "--resources": resources, "--size": size,
                 "--job": job, "--user": user, "--timeout": timeout}
        given = [name for name, value in flags.items() if value is not None]
        if given:
            raise InputError(f"--file: give the gangs in the file or by flags, not both (also given: {given[0]})")
        specs = read_gangs(file, tree)
    else:
        if gang is None or pool is None or resources is None:
            missing = [n for n, v in (("--gang", gang), ("--pool", pool), ("--resources", resources)) if v is None]
            raise InputError(f"submit needs {', '.join(missing)} (or --file)")
        specs = [{"gang": gang, "pool": pool, "count": 1 if tasks is None else tasks,
                  "resources": parse_resources(resources, option="resources"), "size": size, "job": job,
                  "user": user, "priority": priority, "preemptible": preemptible, "revocable": revocable,
                  "controller": controller, "timeout": timeout, "tree": tree, "first_member": first_member}]
        members_of(specs[0])  # bad input is said before anything is sent
    url = find_url(data_dir)

    async def go() -> None:
        receipts = await send(url, lambda client: client.enqueue_many(specs))
        for spec, receipt in zip(specs, receipts, strict=True):
            members = members_of(spec)
            where = f"{spec['pool']} in tree {spec.get('tree', tree)}"
            if receipt.duplicate:
                typer.echo(f"gang {spec['gang']}: these members were submitted before (log position {receipt.seq}); "
                           f"nothing new stored")
            else:
                typer.echo(f"submitted gang {spec['gang']}: {members} member(s) to {where} "
                           f"(log position {receipt.seq})")
        if wait is not None:
            refused = 0
            for spec in specs:
                state, line = await first_word(url, str(spec["gang"]), str(spec.get("tree", tree)), wait)
                typer.echo(line)
                refused += state == "rejected"
            if refused:
                raise typer.Exit(2)

    run_async(go)


def task_set(
    task: Annotated[str, typer.Argument(help="Task id.")],
    state: Annotated[str, typer.Argument(help=f"One of: {', '.join(TASK_STATES)}.")],
    gang: Annotated[str, Opt("--gang", "-g", help="The task's gang.")],
    message: Annotated[str | None, Opt("--message", "-m", help="Why (kept with the event).")] = None,
    attempt: Annotated[int | None, Opt("--attempt", help="The gang's admission attempt this report is about.")] = None,
    tree: TreeName = "default",
    data_dir: DataDir = DEFAULT_DATA_DIR,
) -> None:
    """Report a task's new state, e.g. `poolwise task set g1/0 running --gang g1`."""
    if state not in TASK_STATES:
        raise InputError(f"state {state!r} is not a task state; one of: {', '.join(TASK_STATES)}")
    url = find_url(data_dir)

    async def go() -> None:
        receipt = await send(url, lambda client: client.task_state(task, gang, state, message=message,
                                                                    attempt=attempt, tree=tree))
        again = "; sent before, stored once" if receipt.duplicate else ""
        typer.echo(f"task {task} of gang {gang}: {state} (log position {receipt.seq}{again})")

    run_async(go)


def cancel(
    gang: Annotated[str, typer.Argument(help="Gang id.")],
    reason: Annotated[str | None, Opt("--reason", help="Why (kept with the event).")] = None,
    tree: TreeName = "default",
    data_dir: DataDir = DEFAULT_DATA_DIR,
) -> None:
    """Cancel a gang: queued, it leaves its queue; admitted, its tasks are killed."""
    url = find_url(data_dir)

    async def go() -> None:
        receipt = await send(url, lambda client: client.cancel(gang, reason=reason, tree=tree))
        again = "; sent before, stored once" if receipt.duplicate else ""
        typer.echo(f"cancel of gang {gang} in tree {tree} sent (log position {receipt.seq}{again}); "
                   f"`poolwise explain {gang}` tells what came of it")

    run_async(go)


# --- helpers -------------------------------------------------------------------------------------


def members_of(spec: dict[str, Any]) -> int:
    """How many members a gang spec submits; a spec the SDK refuses is an InputError."""
    try:
        return len(enqueue_event(**spec).tasks)
    except SubmitError as exc:
        raise InputError(str(exc)) from None


async def send(url: str, call: Callable[[Submitter], Awaitable[T]]) -> T:
    """Run one SDK call on a connection of its own; its refusals become one-line input errors.
    Traced when the environment asks for spans (`services.common.tracing.configure`): the SDK's span
    of each event, its context carried to the services."""
    from services.common import tracing

    tracing.configure("poolwise-cli")
    try:
        async with Submitter(url, source=SOURCE) as client:
            return await call(client)
    except (SubmitError, PublishError) as exc:
        raise InputError(str(exc)) from None
    finally:
        tracing.flush()


def read_gangs(file: str, tree: str = "default") -> list[dict[str, Any]]:
    """The gangs of a YAML/JSON file (`-`: standard input) as `Submitter.enqueue` arguments,
    checked for shape here and for content by the SDK (before anything is sent)."""
    name = "standard input" if file == "-" else file
    try:
        text = sys.stdin.read() if file == "-" else Path(file).read_text()
        loaded = yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise InputError(f"--file {name}: {' '.join(str(exc).split())}") from None
    if isinstance(loaded, dict) and "gangs" in loaded:
        loaded = loaded["gangs"]
    items: Sequence[Any] = [loaded] if isinstance(loaded, dict) else loaded
    if not isinstance(items, list) or not items:
        raise InputError(f"--file {name}: expected a gang (a mapping), a list of gangs, or `gangs:` with a list")
    specs = [_gang_spec(item, index, name, tree) for index, item in enumerate(items, start=1)]
    seen: set[tuple[str, str]] = set()
    for spec in specs:
        key = (str(spec["tree"]), str(spec["gang"]))
        if key in seen:
            raise InputError(f"--file {name}: gang {key[1]} appears twice (submit more members of a gang with "
                             f"their own ids and the same size in one entry)")
        seen.add(key)
    for index, spec in enumerate(specs, start=1):
        try:
            enqueue_event(**spec)
        except SubmitError as exc:
            raise InputError(f"--file {name}: gang {index} ({spec['gang']}): {exc}") from None
    return specs


def _gang_spec(item: Any, index: int, name: str, tree: str) -> dict[str, Any]:
    where = f"--file {name}: gang {index}"
    if not isinstance(item, dict):
        raise InputError(f"{where}: expected a mapping of gang options, got {type(item).__name__}")
    unknown = sorted(str(k) for k in item if k not in GANG_KEYS)
    if unknown:
        raise InputError(f"{where}: unknown key {unknown[0]!r}; known: {', '.join(GANG_KEYS)}")
    for required in ("gang", "pool"):
        if not isinstance(item.get(required), str) or not item[required]:
            raise InputError(f"{where}: `{required}` is required (a string)")
    spec = dict(item)
    where = f"--file {name}: gang {index} ({spec['gang']})"
    spec.setdefault("tree", tree)
    resources = spec.get("resources")
    if isinstance(resources, str):
        spec["resources"] = parse_resources(resources, option="resources")
    tasks = spec.get("tasks")
    if isinstance(tasks, bool) or (tasks is not None and not isinstance(tasks, int | list)):
        raise InputError(f"{where}: `tasks` is a count or a list of {{id, resources}}")
    if isinstance(tasks, int):
        if "count" in spec:
            raise InputError(f"{where}: give `tasks` (a count) or `count`, not both")
        spec["count"] = spec.pop("tasks")
    elif isinstance(tasks, list):
        spec["tasks"] = [_task_item(t, where) for t in tasks]
    if "count" in spec and "resources" not in spec:
        raise InputError(f"{where}: a member count needs `resources` (each member's)")
    return spec


def _task_item(item: Any, where: str) -> Any:
    if isinstance(item, dict) and isinstance(item.get("resources"), str):
        return {**item, "resources": parse_resources(item["resources"], option="resources")}
    return item

