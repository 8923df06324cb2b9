"""`poolwise replay --verify`: re-derive every recorded decision from the log and report any that differ.

Which log: `--nats-url` / `NATS_URL`, else the system running on `--data-dir` (its `nats.url`),
else the store a stopped `poolwise up` left in `--data-dir` (read through a private server).
Exit 0 when every decision matches, 1 when one differs or is missing, 2 for bad input.

The log is read a piece at a time (memory: the services' folded state, not the log). On a
terminal (stdout and stderr both), a progress bar on stderr (positions, events/s, ETA: the
stream's last sequence is the total); nothing extra with `--json` or when either is not a terminal.
`--to SEQ` folds the log through SEQ only and checks the decisions recorded through it and those
re-derived from it; `--tree T` reports only the decisions of tree T (everything is folded).
`--from SEQ` starts each of admission, preemption and the tree from its newest usable snapshot at
or before SEQ (the server's object store `poolwise_snapshots`) and verifies every decision after it;
the report names the snapshots (`from snapshots admission@1200, preemption@1180, tree@1190`) and
those passed over. A service with no usable snapshot there is folded from the start (said so; not
an error: the check is the same, only longer). See `services/tools/replay/verify.py` for exactly what
each checks.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any

import typer

from events.subjects import TREE_NAME
from services.common.natsserver import resolve_nats_url
from services.tools.cli.args import InputError
from services.tools.cli.errors import run_async
from services.tools.cli.options import DEFAULT_DATA_DIR, AsJson, DataDir

if TYPE_CHECKING:
    from services.common.jetstream import JetStreamLog
    from services.tools.replay import Report
    from services.tools.replay.progress import OnProgress
    from services.tools.replay_process import ChildProcess


def register(app: typer.Typer) -> None:
    app.command("replay")(replay)


def replay(
    verify: Annotated[bool, typer.Option("--verify", help="Re-derive every decision and compare (required).")] = False,
    data_dir: DataDir = DEFAULT_DATA_DIR,
    nats_url: Annotated[str | None, typer.Option("--nats-url", envvar="NATS_URL",
                                                  help="NATS server; default: the data dir's.")] = None,
    as_json: AsJson = False,
    to_seq: Annotated[int | None, typer.Option("--to", metavar="SEQ", help=(
        "Fold the log through position SEQ only: check the decisions recorded through it and those "
        "re-derived from it."))] = None,
    from_seq: Annotated[int | None, typer.Option("--from", metavar="SEQ", help=(
        "Start each service's fold from its newest usable snapshot at or before position SEQ and "
        "verify every decision after it (a service with none: from the start)."))] = None,
    tree: Annotated[str | None, typer.Option("--tree", metavar="TREE", help=(
        "Report only the decisions of this tree (the whole log is still folded)."))] = None,
    chunk: Annotated[int | None, typer.Option("--chunk", hidden=True, help="Positions per read.")] = None,
    process_from: Annotated[int | None, typer.Option("--process-from", hidden=True, help=(
        "Positions of log from which the verifier runs in a process of its own."))] = None,
) -> None:
    """Audit replay: re-derive the decisions of the log with the services' own code and compare."""
    if not verify:
        raise InputError("replay does one thing so far: say `poolwise replay --verify`")
    if to_seq is not None and to_seq < 1:
        raise InputError(f"--to {to_seq}: a log position is 1 or more")
    if from_seq is not None and from_seq < 1:
        raise InputError(f"--from {from_seq}: a log position is 1 or more")
    if from_seq is not None and to_seq is not None and to_seq < from_seq:
        raise InputError(f"--to {to_seq} is before --from {from_seq}")
    if chunk is not None and chunk < 1:
        raise InputError(f"--chunk {chunk}: at least 1")
    if tree is not None and not TREE_NAME.match(tree):
        raise InputError(f"--tree {tree!r}: not a tree name (letters, digits, - and _, at most 64)")
    options: dict[str, Any] = {"tree": tree, "to_seq": to_seq, "chunk": chunk, "process_from": process_from,
                               "from_seq": from_seq}

    async def on_server(url: str, named: str) -> Report:
        """The replay of the stream at `url` (`named` so in an error)."""
        from services.common.jetstream import JetStreamLog
        from services.tools.cli.client import connect
        from services.tools.replay_process import stop_child

        log = JetStreamLog(await connect(url, name="poolwise-replay", reading=True), owns_connection=True)
        child = None
        try:
            child = await early_child(log, to_seq=to_seq, from_seq=from_seq, process_from=process_from)
            from services.tools.replay.reader import NoLog, verify_jetstream  # imports every service

            try:
                return await verify_jetstream(log, **options, on_progress=progress, child=child)
            except NoLog as exc:
                raise InputError(f"{named}: {exc}") from None
        finally:
            if child is not None:
                await stop_child(child)
            await log.close()

    url = nats_url or resolve_nats_url(data_dir)

    async def go() -> Report:
        if url:
            return await on_server(url, url)
        if not (data_dir / "nats").is_dir():
            raise InputError(f"no log found: no running poolwise and no store in {data_dir} (set NATS_URL or "
                             "--data-dir)")
        from services.common.natsserver import EmbeddedNats

        async with EmbeddedNats(data_dir) as server:  # (a private server on the stopped system's store)
            return await on_server(server.url, str(data_dir))

    with progress_bar(enabled=not as_json and sys.stdout.isatty() and sys.stderr.isatty()) as progress:
        report = run_async(go)  # `go` reports its progress to `progress`
    if as_json:
        typer.echo(json.dumps(report.to_dict(), sort_keys=True))
    else:
        print_report(report)
    raise typer.Exit(0 if report.ok else 1)


async def early_child(log: JetStreamLog, *, to_seq: int | None, from_seq: int | None,
                      process_from: int | None) -> ChildProcess | None:
    """The replay's derivation process, started before this process imports the replay (each
    imports every service's fold, ~0.4 s of CPU: at once, on two cores), when the log is long
    enough for the replay to want one from position 1; None otherwise (from snapshots, `--from`,
    the replay knows only once it has read them: it starts its own then)."""
    from services.tools.replay_process import started_child, wants_child

    if from_seq is not None:
        return None
    try:
        end = await log.last_seq()
    except Exception:  # (no stream: the replay says so, in its words)
        return None
    return await started_child() if wants_child(1, end if to_seq is None else min(to_seq, end), process_from) else None


@contextmanager
def progress_bar(*, enabled: bool) -> Iterator[OnProgress | None]:
    """A rich progress bar on stderr, fed by the reader's progress (None when not `enabled`)."""
    if not enabled:
        yield None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from services.tools.replay.progress import Progress as Step

    bar = Progress(TextColumn("replay"), BarColumn(), TaskProgressColumn(),
                   TextColumn("seq {task.completed:,.0f}/{task.total:,.0f}"),
                   TextColumn("{task.fields[rate]:,.0f} events/s"), TimeElapsedColumn(), TextColumn("ETA"),
                   TimeRemainingColumn(), console=Console(stderr=True), transient=True)
    task = bar.add_task("replay", total=1, rate=0.0)

    def update(step: Step) -> None:
        bar.update(task, completed=step.position, total=max(step.end, 1), rate=step.events_per_second)

    with bar:
        yield update


def print_report(report: Report) -> None:
    recorded = sum(c.recorded for c in report.counts.values())
    derived = sum(c.derived for c in report.counts.values())
    typer.echo(f"replay: {report.messages} messages ({report.malformed} malformed), {recorded} decisions recorded, "
               f"{derived} re-derived")
    if report.from_seq is not None:
        typer.echo(f"  {starts_line(report)}")
        for why in report.passed_over:
            typer.echo(f"  snapshot passed over: {why}")
    scope = [f"{report.events} events through seq {report.last_seq}"]
    if report.to_seq is not None:
        scope.append(f"stopped at --to {report.to_seq}" + (
            f" (read on to seq {report.read_to} for decisions made by then)" if report.read_to > report.to_seq else ""))
    if report.tree is not None:
        scope.append(f"decisions of tree {report.tree} only")
    if report.unchecked:
        scope.append(f"{report.unchecked} decisions recorded after the earliest snapshot but based before their "
                     "service's not checked")
    typer.echo(f"  {'; '.join(scope)}")
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


def starts_line(report: Report) -> str:
    """Where `--from` started each service (`from snapshots admission@1200, preemption@1180, tree@1190`)."""
    used = [f"{name}@{seq}" for name, seq in report.starts.items() if seq]
    none = [name for name, seq in report.starts.items() if not seq]
    if not used:
        return f"--from {report.from_seq}: no usable snapshot at or before it: verified from the start"
    text = f"--from {report.from_seq}: from snapshots {', '.join(used)}"
    if none:
        text += f"; {', '.join(none)} from the start (no usable snapshot at or before {report.from_seq})"
    return text
