"""`poolwise export --parquet DIR [--tables gangs,tasks]`: the read models' tables as Parquet files
(`DIR/<table>.parquet`), for DuckDB, pandas, Spark and the like.

On a stopped data dir each table is read in one transaction, batch by batch. On a running system
the tree service is asked for pages of each table in key order (`projections/answers.py`), each
as large as one message holds: a table is then as the pages found it, not one instant's (rows
written meanwhile may be in it or not; a row changed meanwhile appears once, as one page saw it)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from services.tools.cli.args import InputError
from services.tools.cli.options import DEFAULT_DATA_DIR, DataDir

PAGE_ROWS = 50_000  # rows asked for per page (fewer come back when they do not fit in a message)


def register(app: typer.Typer) -> None:
    app.command("export")(export)


def export(
    parquet: Annotated[Path, typer.Option("--parquet", help="Directory to write <table>.parquet files into.")],
    tables: Annotated[str | None, typer.Option("--tables", help="Comma-separated tables (default: every "
                                               "read model's table).")] = None,
    data_dir: DataDir = DEFAULT_DATA_DIR,
) -> None:
    """Write the read models' tables as Parquet files, from a running system or a stopped data dir."""
    from services.tools.cli.answers import open_source

    with open_source(data_dir) as source:
        known = _known(source)
        chosen = known if tables is None else [t.strip() for t in tables.split(",") if t.strip()]
        unknown = [t for t in chosen if t not in known]
        if unknown:
            raise InputError(f"--tables: no table {', '.join(unknown)}; known: {', '.join(known)}")
        if not chosen:
            raise InputError("--tables: name at least one table")
        try:
            parquet.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"--parquet: cannot make {parquet}: {exc}") from None
        for table in chosen:
            rows = _export(source, table, parquet / f"{table}.parquet")
            typer.echo(f"{table}: {rows:,} rows -> {parquet / f'{table}.parquet'}")


def _known(source: Any) -> list[str]:
    from projections.answers import INTERNAL

    answer = source.ask("SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() "
                        "AND NOT temporary AND NOT internal ORDER BY table_name", 10_000)
    return [name for name in answer.table.column("table_name").to_pylist() if name not in INTERNAL]


def _key(source: Any, table: str) -> list[str]:
    from projections.answers import NATURAL_KEYS

    answer = source.ask("SELECT constraint_column_names FROM duckdb_constraints() WHERE constraint_type = "
                        "'PRIMARY KEY' AND table_name = ? AND database_name = current_database()", 1, [table])
    found = answer.table.column("constraint_column_names").to_pylist()
    return list(found[0]) if found else list(NATURAL_KEYS.get(table, ()))


def _export(source: Any, table: str, path: Path) -> int:
    import pyarrow.parquet as pq

    from projections.answers import page_sql
    from projections.base import quote

    written = 0
    writer: pq.ParquetWriter | None = None
    try:
        if not source.running:
            for batch in source.batches(f"SELECT * FROM {quote(table)}"):
                writer = writer or pq.ParquetWriter(path, batch.schema)
                writer.write_batch(batch)
                written += batch.num_rows
            if writer is None:  # no rows: the columns all the same
                writer = pq.ParquetWriter(path, source.ask(f"SELECT * FROM {quote(table)}", 0).table.schema)
            return written
        key = _key(source, table)
        after: list[Any] | None = None
        while True:
            sql, params = page_sql(table, key, after, written)
            answer = source.ask(sql, PAGE_ROWS, params or None)
            page = answer.table
            if answer.cut and page.num_rows == 0:
                raise InputError(f"{table}: a single row is larger than one NATS message; stop poolwise and "
                                 "export from the data dir")
            writer = writer or pq.ParquetWriter(path, page.schema)
            if page.num_rows:
                writer.write_table(page)
            written += int(page.num_rows)
            if page.num_rows < PAGE_ROWS and not answer.cut:
                return written
            if key:
                last = page.slice(page.num_rows - 1, 1)
                after = [last.column(column).to_pylist()[0] for column in key]
    except OSError as exc:
        raise InputError(f"--parquet: cannot write {path}: {exc}") from None
    finally:
        if writer is not None:
            writer.close()
