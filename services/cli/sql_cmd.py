"""`poolwise sql "SELECT ..."`: query the projections (the whole history, pools, hosts, gangs, tasks,
entitlements, preemptions, refusals) with SQL."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.table import Table

from services.cli.args import InputError
from services.cli.client import request
from services.cli.errors import run_async
from services.cli.options import DEFAULT_DATA_DIR, AsJson, DataDir
from services.cli.render import console
from services.common.natsserver import resolve_nats_url


def register(app: typer.Typer) -> None:
    app.command("sql")(sql)


def sql(
    query: Annotated[str, typer.Argument(help="One read-only statement, e.g. \"SELECT type, count(*) FROM "
                                              "event_log GROUP BY type\".")],
    service: Annotated[str, typer.Option("--service", help="Whose projections: tree.")] = "tree",
    as_json: AsJson = False,
    data_dir: DataDir = DEFAULT_DATA_DIR,
) -> None:
    """Tables: event_log (every event), trees, pools, pool_resources, hosts, host_resources; gangs, tasks;
    pool_entitlements (latest per pool and kind), entitlement_history (changes, per second), pool_starvation;
    preemptions (one row per task), rejections (refused inputs); checkpoints.

    Example: SELECT pool, state, count(*) FROM gangs GROUP BY ALL ORDER BY pool"""
    url = resolve_nats_url(data_dir)

    async def via_service() -> dict[str, Any]:
        from pydantic import BaseModel

        class SqlRequest(BaseModel):
            op: str = "sql"
            sql: str

        reply = await request(url or "", service, SqlRequest(sql=query))
        data: dict[str, Any] = reply.data
        return data

    data = run_async(via_service) if url else _from_file(data_dir / service / f"{service}.duckdb", query)
    if as_json:
        typer.echo(json.dumps([dict(zip(data["columns"], row, strict=True)) for row in data["rows"]], default=str))
        return
    table = Table(*data["columns"])
    for row in data["rows"]:
        table.add_row(*["" if v is None else str(v) for v in row])
    console().print(table)


def _from_file(path: Any, query: str) -> dict[str, Any]:
    from projections.store import ProjectionStore

    if not path.exists():
        raise InputError(f"no projections at {path}: start `poolwise up` first")
    store = ProjectionStore.open_read_only(path)
    try:
        columns, rows = store.query(query)
    except Exception as exc:
        raise InputError(f"sql: {exc}") from None
    finally:
        store.close()
    return {"columns": columns, "rows": rows}
