"""`poolwise state [--at TIME|SEQ]`: the trees, their pools with their numbers, the queues and the
gangs, as admission's fold had them at a log position (default: now); and the `--at` of
`pool tree`, `gangs` and `explain`, answered the same way (issue 21, "time travel").

The fold runs in this process (`services.tools.cli.folds`: from admission's newest snapshot at or
before the position, then the log up to it), and the answers are the services' own: the tree's
`list_pools`/`list_trees` views of the configuration, admission's `pool_numbers`, and its query
handler (`queries.answer`) for `gangs` and `explain`. Nothing is appended.

    poolwise state --at 1200
    poolwise gangs --at 2026-11-28T07:30:00Z --state pending
    poolwise explain g2 --at 1200
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from pydantic import BaseModel

from events.commands import Reply
from services.tools.cli.errors import run_async
from services.tools.cli.options import DEFAULT_DATA_DIR, AsJson, DataDir

At = Annotated[str | None, typer.Option("--at", help="As the log had it then: a log position (SEQ) or an event "
                                                     "time (ISO 8601, UTC unless it names a zone).")]


def register(app: typer.Typer) -> None:
    app.command("state")(state)


def state(at: At = None, tree: Annotated[str | None, typer.Option("--tree", help="Only this tree.")] = None,
          as_json: AsJson = False, data_dir: DataDir = DEFAULT_DATA_DIR) -> None:
    """The trees, pools with their numbers (reservation, limit, entitlement, allocation, demand),
    queues and gangs, as admission's fold of the log had them at `--at` (default: now)."""
    from services.tools.cli.client import find_url
    from services.tools.cli.folds import described

    url = find_url(data_dir)
    folder, position = run_async(lambda: fold_at(url, at))
    document = state_document(folder.state, tree)
    # the position asked for (admission's last folded one may be before it: the messages between
    # are not on its subjects, and change nothing it holds)
    document["as_of"] = {"seq": position.seq if position else folder.state.last_seq,
                         "time": position.time if position else None, "asked": position.asked if position else None}
    if as_json:
        typer.echo(json.dumps(document, indent=2, sort_keys=True))
        return
    _print_state(document, described(position) if position else f"as of log position {folder.state.last_seq}")


async def fold_at(url: str, at: str | None) -> Any:
    """Admission's fold (`ExplainingFolder`) up to `--at` (None: the end of the log), and where."""
    from services.tools.cli.folds import fold_admission

    return await fold_admission(url, at)


def answer_at(url: str, at: str, op: str, query: BaseModel) -> Reply:
    """Admission's answer to `query` (`gangs`, `explain`) as it would have given it at `--at`: its
    own handler on its fold up to there. An error reply raises ServiceError, as a live one."""
    from services.admission.queries import answer
    from services.tools.cli.args import ServiceError

    folder, position = run_async(lambda: fold_at(url, at))
    reply = answer(folder, op, query.model_dump_json().encode())
    if op == "gangs" and reply.ok and position is not None and isinstance(reply.data, dict):
        reply.data["as_of"] = position.seq  # as `state --at` says it (see there)
    if not reply.ok:
        error = reply.error
        raise ServiceError(error.rule, error.message, error.field) if error else ServiceError("invalid_command",
                                                                                             "refused")
    return reply


def pools_at(url: str, at: str, tree: str | None) -> dict[str, Any]:
    """The tree service's `pool_list` answer as the configuration was at `--at`."""
    folder, _ = run_async(lambda: fold_at(url, at))
    return pool_lists(folder.state.config, tree)


def pool_lists(config: Any, tree: str | None) -> dict[str, Any]:
    """`{"trees": [{"tree", "capacity", "pools"}]}`, as the tree service answers `pool_list`."""
    from services.tree.domain.views import list_pools, list_trees

    names = [tree] if tree else config.tree_names()
    trees = {t["name"]: t for t in list_trees(config)}
    return {"trees": [{"tree": n, "capacity": trees.get(n, {}).get("capacity"), "pools": list_pools(config, n)}
                      for n in names]}


def state_document(admission: Any, tree: str | None) -> dict[str, Any]:
    """Per tree: its options' version and capacity, each pool's configuration and numbers, its
    queues (pending gangs per queue), and the gangs."""
    from services.admission.domain.gang_rows import gang_rows
    from services.admission.domain.views import pool_numbers
    from services.tree.domain.views import list_pools, list_trees

    config = admission.config
    out: list[dict[str, Any]] = []
    for view in list_trees(config):
        name = view["name"]
        if tree is not None and name != tree:
            continue
        numbers = pool_numbers(admission, name)
        gangs = gang_rows(admission, name)
        queues: dict[str, dict[str, int]] = {}
        for row in gangs:
            if row["state"] == "pending" and row["queue"] is not None:
                counted = queues.setdefault(str(row["pool"]), {})
                counted[str(row["queue"])] = counted.get(str(row["queue"]), 0) + 1
        pools = [{"path": p["path"], "leaf": p["leaf"], "config": p["config"], **numbers.get(p["path"], {}),
                  "queues": queues.get(p["path"], {})} for p in list_pools(config, name) if p["path"] != "/"]
        out.append({"tree": name, "version": view["version"], "policy": view["options"].get("policy"),
                    "capacity": view["capacity"], "hosts": view["hosts"], "pools": pools, "gangs": gangs})
    return {"trees": out}


def _print_state(document: dict[str, Any], where: str) -> None:
    from rich.table import Table

    from services.tools.cli.args import format_resources
    from services.tools.cli.render import console, gang_table

    out = console()
    out.print(f"poolwise state {where}")
    if not document["trees"]:
        out.print("no trees")
    for found in document["trees"]:
        out.print(f"\ntree {found['tree']} (version {found['version']}, policy {found['policy']}): capacity "
                  f"{format_resources(found['capacity'])}, hosts {', '.join(found['hosts']) or 'none'}")
        table = Table("pool", "reservation", "limit", "entitlement", "allocation", "demand", "queues")
        for pool in found["pools"]:
            queues = ", ".join(f"{q} {n}" for q, n in sorted(pool["queues"].items())) or "-"
            table.add_row(pool["path"], *(format_resources(_shown(pool.get(k))) for k in
                                          ("reservation", "limit", "entitlement", "allocation", "demand")), queues)
        out.print(table)
        rows = found["gangs"]
        out.print(gang_table(rows, len(rows), document["as_of"]["seq"]))


def _shown(values: Any) -> dict[str, float]:
    """A resource map without its zeros and unbounded kinds (inf)."""
    return {k: v for k, v in (values or {}).items() if v and v != float("inf")}
