"""`poolwise bench entitlement|admission|scale|large-tree|pipeline|projection|raw|soak|whatif|all`: measure, compare
with the raw speeds of NATS and DuckDB measured in the same run, and optionally record in docs/performance.md. `soak`
(issue 18: restart, failover, memory and replay at two history sizes, `--sizes A,B`) and `whatif` (issue 21: the
what-if and `--at` on a 100k-gang history) run only when named.

The benchmarks live in the source tree's `bench/` package (imported only when this command runs).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from services.tools.cli.errors import fail, run_async
from services.tools.cli.options import AsJson
from services.tools.cli.render import console

CHOICES: tuple[str, ...] = ("entitlement", "admission", "scale", "large-tree", "pipeline", "projection", "raw",
                            "soak", "whatif", "all")


def register(app: typer.Typer) -> None:
    app.command("bench")(bench)


def _default_docs() -> Path | None:
    try:
        import bench as package
    except ImportError:
        return None
    return Path(package.__file__).resolve().parent.parent / "docs" / "performance.md"


def bench(
    what: Annotated[str, typer.Argument(help=f"One of: {', '.join(CHOICES)}.")] = "all",
    quick: Annotated[bool, typer.Option("--quick", help="Small sizes (all of them in under 30 s): a smoke run "
                                                        "for CI.")] = False,
    write_docs: Annotated[bool, typer.Option("--write-docs", help="Replace each benchmark's section of "
                                                                  "docs/performance.md with this run's "
                                                                  "numbers.")] = False,
    docs: Annotated[Path | None, typer.Option("--docs", help="The performance document to update "
                                                             "(default: docs/performance.md of the checkout).")] = None,
    profile: Annotated[bool, typer.Option("--profile", help="Run under cProfile (this thread: the domain benchmarks "
                                                            "and the pipeline's services) and print the top "
                                                            "functions.")] = False,
    single_process: Annotated[bool, typer.Option("--single-process", help="Run the pipeline's services in the "
                                                                          "benchmark's process (as `poolwise up "
                                                                          "--single-process`), not one process "
                                                                          "each.")] = False,
    sizes: Annotated[str | None, typer.Option("--sizes", metavar="A,B", help="soak only: the two history sizes, "
                                                                          "in gangs (default 100000,1000000; "
                                                                          "--quick 10000,100000).")] = None,
    as_json: AsJson = False,
) -> None:
    """Benchmarks with ratios against raw JetStream and DuckDB speeds measured in the same run
    (`soak` and `whatif`: not part of `all`)."""
    if what not in CHOICES:
        raise fail(f"unknown benchmark {what!r}; one of: {', '.join(CHOICES)}")
    soak_sizes = _soak_sizes(sizes) if sizes is not None else None
    if soak_sizes is not None and what != "soak":
        raise fail("--sizes: only for `poolwise bench soak`")
    try:
        from bench.report import rich_table, update_doc
        from bench.suite import NAMES, run_benchmarks
    except ImportError as exc:
        raise fail(f"the benchmarks live in the source tree's bench/ package, not importable here ({exc}); "
                   "run from a checkout") from None
    names = list(NAMES) if what == "all" else [what]
    out = console()

    def show(section: Any) -> None:
        if not as_json:
            out.print(rich_table(section))
            for note in section.notes:
                out.print(f"  [dim]{note}[/dim]", highlight=False)
            out.print()

    async def run() -> list[Any]:
        # the profiler sees this process only: with it, the services run here too
        return await run_benchmarks(names, quick=quick, on_section=show, single_process=single_process or profile,
                                    soak_sizes=soak_sizes, on_progress=None if as_json else progress)

    def progress(text: str) -> None:
        out.print(f"[dim]{text}[/dim]", highlight=False)

    if profile:
        from bench.profiling import profiled, top_cprofile

        sections, stats = profiled(lambda: run_async(run))
        if not as_json:
            out.print(_profile_table(top_cprofile(stats, 25)))
    else:
        sections = run_async(run)
    if as_json:
        typer.echo(json.dumps([asdict(s) for s in sections], default=str))
    else:
        _summary(sections)
    if write_docs:
        target = docs or _default_docs()
        if target is None:
            raise fail("--write-docs: no docs/performance.md found; give --docs PATH")
        for section in sections:
            update_doc(target, section)
        typer.echo(f"updated {target}", err=True)


def _soak_sizes(text: str) -> tuple[int, int]:
    try:
        values = [int(part.replace("_", "").strip()) for part in text.split(",")]
    except ValueError:
        values = []
    if len(values) != 2 or min(values) < 1:
        raise fail(f"--sizes: two history sizes in gangs, like 10000,100000 (got {text!r})")
    return values[0], values[1]


def _profile_table(rows: list[Any]) -> Table:
    table = Table("function", "own", "with callees", "calls", title="cProfile, this thread, by own time",
                  title_justify="left")
    for row in rows:
        table.add_row(row.function, f"{row.own:.1%}", f"{row.inclusive:.1%}", f"{row.calls:,}")
    return table


def _summary(sections: list[Any]) -> None:
    goals = [(s.key, r) for s in sections for r in s.goals()]
    if not goals:
        return
    table = Table("benchmark", "goal", "measured", "", title="Goals", title_justify="left")
    for key, row in goals:
        mark = "[green]met[/green]" if row.met else "[bold red]NOT met[/bold red]"
        table.add_row(key, f"{row.name} {row.goal}", f"{row.value:,.1f} {row.unit}", mark)
    console().print(table)
