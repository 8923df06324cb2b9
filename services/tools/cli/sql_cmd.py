"""`poolwise sql "SELECT ..."`: query the read models (the whole history, pools, hosts, gangs,
tasks, entitlements, preemptions, refusals) with SQL, as a table, CSV, JSON or Parquet.
docs/analytics.md has every table and column, and the questions an operator asks as SQL."""

from __future__ import annotations

import csv
import io
import json
import sys
from datetime import date, datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from services.tools.cli.args import InputError
from services.tools.cli.options import DEFAULT_DATA_DIR, AsJson, DataDir

DEFAULT_LIMIT = 10_000
MAX_LIMIT = 999_999  # one more is asked for: the tree service answers at most 1,000,000 rows a request


class Format(StrEnum):
    table = "table"
    csv = "csv"
    json = "json"
    parquet = "parquet"


def register(app: typer.Typer) -> None:
    app.command("sql")(sql)


def sql(
    query: Annotated[str, typer.Argument(help="One read-only statement, e.g. \"SELECT type, count(*) FROM "
                                              "event_log GROUP BY type\".")],
    output_format: Annotated[Format, typer.Option("--format", "-f", help="table, csv, json (an array of "
                                                  "objects) or parquet (needs -o).")] = Format.table,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the answer to this file.")] = None,
    limit: Annotated[int, typer.Option("--limit", help="At most this many rows; more are cut, with a note on "
                                       "stderr (whole tables: `poolwise export`).", min=1,
                                       max=MAX_LIMIT)] = DEFAULT_LIMIT,
    service: Annotated[str, typer.Option("--service", help="Whose read models: tree (it holds them all).")] = "tree",
    as_json: AsJson = False,
    data_dir: DataDir = DEFAULT_DATA_DIR,
) -> None:
    """Ask the read models one read-only SQL query, running or stopped (docs/analytics.md).

    Tables: event_log (every event), trees, pools, pool_resources, hosts, host_resources; gangs, tasks;
    pool_entitlements (latest per pool and kind), entitlement_history (changes, per second), pool_starvation;
    preemptions (one row per task, with what it was for), rejections (refused inputs); checkpoints.
    Works on a running system (asks the tree service) and on a stopped data dir (reads its files).

    Example: SELECT pool, state, count(*) FROM gangs GROUP BY ALL ORDER BY pool"""
    from services.tools.cli.answers import HOLDER, open_source

    if service != HOLDER:
        raise InputError(f"--service: only {HOLDER} keeps read models (got {service!r})")
    chosen = Format.json if as_json else output_format
    if chosen is Format.parquet and output is None:
        raise InputError("--format parquet: give the file to write with -o FILE")
    with open_source(data_dir) as source:
        answer = source.ask(query, limit + 1)
    table = answer.table
    if table.num_rows > limit:
        table = table.slice(0, limit)
        typer.echo(f"showing {limit:,} of at least {limit + 1:,} rows; use --limit or `poolwise export`", err=True)
    elif answer.cut:
        typer.echo(f"showing {table.num_rows:,} rows: one message holds no more of this answer; use fewer "
                   "columns or `poolwise export`", err=True)
    write(table, chosen, output)


def write(table: Any, chosen: Format, output: Path | None) -> None:
    """`table` (Arrow) in format `chosen`, to `output` or stdout."""
    if chosen is Format.parquet:
        import pyarrow.parquet as pq

        assert output is not None
        try:
            pq.write_table(table, output)
        except OSError as exc:
            raise InputError(f"-o: cannot write {output}: {exc}") from None
        return
    if chosen is Format.table and output is None:
        _print_table(table)
        return
    text = _json_text(table) if chosen is Format.json else _csv_text(table) if chosen is Format.csv else \
        _table_text(table)
    if output is None:
        sys.stdout.write(text)
        return
    try:
        output.write_text(text)
    except OSError as exc:
        raise InputError(f"-o: cannot write {output}: {exc}") from None


def _rows(table: Any) -> tuple[list[str], list[tuple[Any, ...]]]:
    columns = [column.to_pylist(maps_as_pydicts="strict") for column in table.columns]
    return list(table.column_names), list(zip(*columns, strict=True)) if columns else []


def _plain(value: Any) -> Any:
    """A value as JSON holds it: times in ISO 8601, maps as objects."""
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, dict | list | tuple):
        return json.dumps(_plain(value), default=str)
    if isinstance(value, datetime | date):
        return value.isoformat()
    return str(value)


def _json_text(table: Any) -> str:
    names, rows = _rows(table)
    return json.dumps([{name: _plain(v) for name, v in zip(names, row, strict=True)} for row in rows],
                      default=str) + "\n"


def _csv_text(table: Any) -> str:
    names, rows = _rows(table)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(names)
    writer.writerows([_cell(v) for v in row] for row in rows)
    return out.getvalue()


def _rich_table(table: Any) -> Any:
    from rich.table import Table

    names, rows = _rows(table)
    shown = Table(*names)
    for row in rows:
        shown.add_row(*[_cell(v) for v in row])
    return shown


def _print_table(table: Any) -> None:
    from services.tools.cli.render import console

    console().print(_rich_table(table))


def _table_text(table: Any) -> str:
    from rich.console import Console

    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(_rich_table(table))
    return out.getvalue()
