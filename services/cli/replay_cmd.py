"""`poolwise replay --verify`: re-derive every recorded decision from the log and report any that differ.

Which log: `--nats-url` / `NATS_URL`, else the system running on `--data-dir` (its `nats.url`),
else the store a stopped `poolwise up` left in `--data-dir` (read through a private server).
Exit 0 when every decision matches, 1 when one differs or is missing, 2 for bad input.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer

from services.cli.args import InputError
from services.cli.errors import run_async
from services.cli.options import DEFAULT_DATA_DIR, AsJson, DataDir
from services.common.natsserver import resolve_nats_url

if TYPE_CHECKING:
    from services.replay import Report


def register(app: typer.Typer) -> None:
    app.command("replay")(replay)


def replay(
    verify: Annotated[bool, typer.Option("--verify", help="Re-derive every decision and compare (required).")] = False,
    data_dir: DataDir = DEFAULT_DATA_DIR,
    nats_url: Annotated[str | None, typer.Option("--nats-url", envvar="NATS_URL",
                                                  help="NATS server; default: the data dir's.")] = None,
    as_json: AsJson = False,
) -> None:
    """Audit replay: re-derive the decisions of the whole log with the services' own code and compare."""
    if not verify:
        raise InputError("replay does one thing so far: say `poolwise replay --verify`")
    from services.replay.reader import NoLog, verify_data_dir, verify_jetstream  # imports every service

    async def on_server(url: str) -> Report:
        from services.cli.client import connect
        from services.common.jetstream import JetStreamLog

        log = JetStreamLog(await connect(url, name="poolwise-replay"), owns_connection=True)
        try:
            return await verify_jetstream(log)
        except NoLog as exc:
            raise InputError(f"{url}: {exc}") from None
        finally:
            await log.close()

    url = nats_url or resolve_nats_url(data_dir)

    async def go() -> Report:
        if url:
            return await on_server(url)
        if not (data_dir / "nats").is_dir():
            raise InputError(f"no log found: no running poolwise and no store in {data_dir} (set NATS_URL or "
                             "--data-dir)")
        try:
            return await verify_data_dir(data_dir)
        except NoLog as exc:
            raise InputError(f"{data_dir}: {exc}") from None

    report = run_async(go)
    if as_json:
        typer.echo(json.dumps(report.to_dict(), sort_keys=True))
    else:
        print_report(report)
    raise typer.Exit(0 if report.ok else 1)


def print_report(report: Report) -> None:
    recorded = sum(c.recorded for c in report.counts.values())
    derived = sum(c.derived for c in report.counts.values())
    typer.echo(f"replay: {report.messages} messages ({report.malformed} malformed), {recorded} decisions recorded, "
               f"{derived} re-derived")
    width = max([len("decision"), *(len(t) for t in report.counts)])
    typer.echo(f"  {'decision':<{width}}  recorded  re-derived  matched")
    for name, count in sorted(report.counts.items()):
        typer.echo(f"  {name:<{width}}  {count.recorded:>8}  {count.derived:>10}  {count.matched:>7}")
    for finding in report.findings:
        typer.echo(finding.line())
    if report.ok:
        typer.echo(f"ok: all {recorded} recorded decisions re-derived identically")
    else:
        kinds: dict[str, int] = {}
        for finding in report.findings:
            kinds[finding.kind] = kinds.get(finding.kind, 0) + 1
        summary = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
        typer.echo(f"MISMATCH: {summary}")
