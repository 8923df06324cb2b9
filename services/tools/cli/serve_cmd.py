"""`poolwise up` (every service, each in a process of its own, on an embedded NATS) and `poolwise
serve <service>` (one service, in this process).

Both run each service under its leadership lease (`services.common.leadership`): one instance of
a service decides, the others stand by and take over when it stops or loses its lease. `serve` is
ready once its service leads or stands by. `up` starts one `poolwise serve <service>` child per
service (`services.launcher.run_processes`), passes their stderr lines on to its own, and is ready
once every child leads; it restarts a child that exits (with a backoff), gives up with a one-line
error when one keeps failing before it leads, and stops them all on SIGINT/SIGTERM. With
`--single-process` it runs every service in its own single process instead (`run_system`), as
before: one process, one core. Changes of role are told on stderr (`poolwise: admission leading`,
`... standing by (leader: ...)`).

`--trees per-tree` (or POOLWISE_LEASES=per-tree): admission's and preemption's instances share
the trees instead of standing by (`services.common.tree_gate.run_per_tree`); each says which trees
it holds (`trees_line`), and is ready once its fold has caught up, whatever it holds. `up` passes
it to every child; the tree service keeps one leader either way.

`--http-port P` (docs/observability.md): `serve` serves its process's `/metrics`, `/healthz` and
`/readyz` on `--http-host` (default 127.0.0.1) port P (0: any free one; the line `poolwise: <service>
http on HOST:PORT` says which); `up` runs each child with its own loopback port and serves them
all, gathered, on P (`services.common.exposition`), with the dashboard at `/` and its JSON API
under `/api/` (`services.tools.dashboard`, docs/dashboard.md; `--dashboard-refresh`).

`--sql-retention 30d` (or POOLWISE_SQL_RETENTION) bounds the history of the tree service's SQL read
models to that much log time (`projections/store.py`, "Retention"); off by default. Only the tree
service reads it (`up` passes it to its tree process).

`--sql-memory 2GB` (or POOLWISE_SQL_MEMORY; default 512MB) is the memory limit of the read models'
DuckDB (`projections.store.sql_memory`; below 16MiB it cannot insert a batch): checked here, then
set in this process's environment, which the service processes of `up` inherit and every DuckDB
connection of the read models reads."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any

import typer

from services.tools.cli.args import InputError, parse_duration, parse_size
from services.tools.cli.options import DEFAULT_DATA_DIR, DataDir

SQL_RETENTION = "--sql-retention"
SQL_MEMORY_ENV = "POOLWISE_SQL_MEMORY"  # (projections.store.SQL_MEMORY_ENV, which reads it)
SQL_MEMORY = ("--sql-memory",)
SqlMemory = Annotated[str | None, typer.Option(
    *SQL_MEMORY, envvar=SQL_MEMORY_ENV, metavar="SIZE",
    help="Memory limit of the tree service's SQL read models (DuckDB): 512MB (the default), 2GB, 1GiB. "
         "A query that needs more spills to disk or is refused; decisions never wait on it.")]
SqlRetention = Annotated[str | None, typer.Option(
    SQL_RETENTION, envvar="POOLWISE_SQL_RETENTION", metavar="DURATION",
    help="Delete from the tree service's SQL read models (event_log, finished gangs and their tasks, "
         "entitlement_history, preemptions, rejections) what is older than this much log time: 30d, 12h, "
         "90m, 3600 (seconds), or off (the default: keep everything). The log itself keeps every event.")]

Replicas = Annotated[str | None, typer.Option(
    "--replicas", envvar="POOLWISE_STREAM_REPLICAS", metavar="N",
    help="Copies of the log the NATS cluster keeps (1-5; default 1): the stream, the lease bucket and the "
         "snapshot store are created with N replicas, and one found with fewer is raised to N "
         "(services/common/replicas.py). More than the cluster's servers: an error.")]

Trees = Annotated[str | None, typer.Option(
    "--trees", envvar="POOLWISE_LEASES", metavar="service|per-tree",
    help="How instances of admission and preemption share the work: service (the default: one instance "
         "decides every tree, the others stand by) or per-tree (every instance decides the trees whose lease "
         "it holds, shared evenly; when one stops or dies the others take its trees over). Every instance "
         "of a deployment must be given the same. docs/operations.md, \"Trees spread over instances\".")]

HttpPort = Annotated[int | None, typer.Option(
    "--http-port", envvar="POOLWISE_HTTP_PORT", min=0, max=65535, metavar="PORT",
    help="Serve /metrics (Prometheus), /healthz and /readyz on this port (0: any free one); off by default. "
         "docs/observability.md.")]
HttpHost = Annotated[str, typer.Option(
    "--http-host", envvar="POOLWISE_HTTP_HOST", metavar="HOST",
    help="The address --http-port binds (default 127.0.0.1, loopback only; 0.0.0.0: every interface).")]
ReadyLag = Annotated[int, typer.Option(
    "--ready-lag", envvar="POOLWISE_READY_LAG", min=0, metavar="N",
    help="/readyz answers 200 only while each service's fold is within N log positions of the log's end.")]
DashboardRefresh = Annotated[float, typer.Option(
    "--dashboard-refresh", envvar="POOLWISE_DASHBOARD_REFRESH", min=0.1, max=3600, metavar="SECONDS",
    help="With --http-port, the dashboard (/ and /api/, docs/dashboard.md) asks the services and reads the log "
         "at most once per this many seconds, and only while someone looks; every browser is served from "
         "that cache.")]
DEFAULT_HTTP_HOST = "127.0.0.1"
DEFAULT_READY_LAG = 1000
DEFAULT_DASHBOARD_REFRESH = 1.0


# The names of `services.launcher.SERVICES`, in its order (a test keeps them equal): the launcher
# imports every service (DuckDB, Arrow, ...), which only `up` and `serve` need, not every command.
SERVICES: tuple[str, ...] = ("tree", "admission", "preemption")


def register(app: typer.Typer) -> None:
    app.command("up")(up)
    app.command("serve")(serve)


def up(
    data_dir: DataDir = DEFAULT_DATA_DIR,
    nats_url: Annotated[str | None, typer.Option("--nats-url", envvar="NATS_URL",
                                                  help="Use this NATS server instead of an embedded one.")] = None,
    single_process: Annotated[bool, typer.Option(
        "--single-process", help="Run every service in this one process (one core; for debugging).")] = False,
    sql_retention: SqlRetention = None,
    sql_memory: SqlMemory = None,
    replicas: Replicas = None,
    trees: Trees = None,
    http_port: HttpPort = None,
    http_host: HttpHost = DEFAULT_HTTP_HOST,
    ready_lag: ReadyLag = DEFAULT_READY_LAG,
    dashboard_refresh: DashboardRefresh = DEFAULT_DASHBOARD_REFRESH,
) -> None:
    """Run poolwise on this machine: an embedded NATS server (unless NATS_URL is set) and every
    service, each in a process of its own. With --http-port, the dashboard too."""
    retention = parse_duration(sql_retention, option=SQL_RETENTION[2:])
    _set_sql_memory(sql_memory)
    copies = _replicas(replicas)
    leases = _leases(trees)
    http = Http(http_host, http_port, ready_lag, dashboard_refresh)
    if single_process:
        _run(list(SERVICES), data_dir, nats_url, ready_on_standby=False, sql_retention=retention, replicas=copies,
             leases=leases, http=http)
    else:
        _run_processes(list(SERVICES), data_dir, nats_url, sql_retention=retention, replicas=copies, leases=leases,
                       http=http)


LEAST_SQL_MEMORY = 16 * 2**20  # (below this DuckDB cannot insert a batch of the read models' rows)


def _set_sql_memory(text: str | None) -> None:
    """`--sql-memory` checked, and set where the read models' connections (in this process and in
    the service processes it starts) read it (`projections.store.sql_memory`; not imported here:
    this process may hold no DuckDB)."""
    if text is not None:
        os.environ[SQL_MEMORY_ENV] = parse_size(text, name=SQL_MEMORY[0], least=LEAST_SQL_MEMORY)


def check_environment() -> None:
    """`POOLWISE_SQL_MEMORY` checked for every command (`sql` and `export` on a stopped data dir,
    `demo` and `whatif` open read models too; `up` and `serve` check it as `--sql-memory`):
    InputError with the rule, before anything runs, rather than DuckDB's parser error later."""
    text = os.environ.get(SQL_MEMORY_ENV)
    if text:
        os.environ[SQL_MEMORY_ENV] = parse_size(text, name=SQL_MEMORY_ENV, least=LEAST_SQL_MEMORY)


@dataclass(frozen=True)
class Http:
    """What `--http-host`, `--http-port`, `--ready-lag` and `--dashboard-refresh` asked for (port
    None: no HTTP; dashboard None: no dashboard, as `serve` has none)."""

    host: str = DEFAULT_HTTP_HOST
    port: int | None = None
    ready_lag: int = DEFAULT_READY_LAG
    dashboard: float | None = None

    def board(self, url: Callable[[], str | None]) -> Any:
        """The dashboard served beside the routes (`process_http.Extra`), or None."""
        if self.dashboard is None:
            return None
        from services.tools.dashboard import Dashboard

        return Dashboard(url, self.dashboard)

    def child_args(self) -> list[str]:
        """A child of `up` serves on a loopback port of its own, any free one (up gathers them)."""
        return [] if self.port is None else ["--http-port", "0", "--http-host", "127.0.0.1",
                                             "--ready-lag", str(self.ready_lag)]


def _leases(text: str | None) -> str:
    from services.common.tree_leases import leases_mode

    try:
        return leases_mode(text)
    except ValueError as exc:
        raise InputError(str(exc)) from None


def _replicas(text: str | None) -> int:
    from services.common.replicas import parse_replicas

    return 1 if text is None or not text.strip() else parse_replicas(text)


def serve(
    service: Annotated[str, typer.Argument(help=f"One of: {', '.join(SERVICES)}.")],
    data_dir: DataDir = DEFAULT_DATA_DIR,
    nats_url: Annotated[str | None, typer.Option("--nats-url", envvar="NATS_URL",
                                                  help="NATS server; default: the one `poolwise up` started.")] = None,
    sql_retention: SqlRetention = None,
    sql_memory: SqlMemory = None,
    replicas: Replicas = None,
    trees: Trees = None,
    http_port: HttpPort = None,
    http_host: HttpHost = DEFAULT_HTTP_HOST,
    ready_lag: ReadyLag = DEFAULT_READY_LAG,
) -> None:
    """Run one service alone against a NATS server (NATS_URL, or the data dir's embedded one)."""
    from services.common.supervisor import die_with_parent

    supervised = die_with_parent()  # a child of `poolwise up`: goes when up goes, even killed
    if service not in SERVICES:
        raise InputError(f"unknown service {service!r}; one of: {', '.join(SERVICES)}")
    retention = parse_duration(sql_retention, option=SQL_RETENTION[2:])
    _set_sql_memory(sql_memory)
    copies = _replicas(replicas)
    leases = _leases(trees)
    if nats_url is None:
        from services.common.natsserver import resolve_nats_url

        nats_url = resolve_nats_url(data_dir)
        if nats_url is None:
            raise InputError("no NATS server: set NATS_URL or start `poolwise up` first")
    # Next to the deciding services, under `poolwise up`: once started (leading or standing by),
    # not before, so that the start of `up` waits on none of its services' CPU share.
    _run([service], data_dir, nats_url, embedded=False, ready_on_standby=True, announce=not supervised,
         sql_retention=retention, yield_when_ready=supervised and service in YIELDING, replicas=copies,
         leases=leases, http=Http(http_host, http_port, ready_lag))


# Services off the admission path: the tree service's read models (and pool commands) may wait a
# moment, and so may preemption (it acts on pools over their entitlement for seconds; its passes
# follow admission's cycles); admission's decisions should not. On a saturated machine the kernel
# then gives the CPU to admission first, which shortens enqueue -> decision under load
# (docs/performance.md, sessions 3 and 5: "yields the CPU"); with a core to spare it changes nothing.
YIELDING: tuple[str, ...] = ("tree", "preemption")
YIELD_NICENESS = 10


def yield_cpu(niceness: int = YIELD_NICENESS) -> None:
    """Lower this process's CPU priority by `niceness` (where the platform allows; else nothing)."""
    import os

    with contextlib.suppress(OSError, AttributeError):
        os.nice(niceness)


def role_line(lease: str, state: str, holder: str | None) -> str:
    """What stderr says when a service's role changes (`lease` is `<stream>.<service>`)."""
    service = lease.split(".", 1)[-1]
    if state == "leading":
        return f"poolwise: {service} leading (as {holder})"
    if state == "standby":
        return f"poolwise: {service} standing by (leader: {holder or 'unknown'})"
    return f"poolwise: {service} lost its lease; stopped deciding"


def trees_line(service: str, held: frozenset[str], holder: str) -> str:
    """What stderr says when an instance deciding per tree is ready, and when its trees change."""
    trees = f"trees {', '.join(sorted(held))}" if held else "no tree (folding the log)"
    return f"poolwise: {service} deciding per tree (as {holder}): {trees}"


def says_leading(service: str, line: str) -> bool:
    """Whether a line of `poolwise serve SERVICE`'s stderr is its `role_line` for leading (or, per
    tree, its `trees_line`: it is ready, whatever it holds)."""
    return line.startswith((f"poolwise: {service} leading (", f"poolwise: {service} deciding per tree ("))


def child_line(service: str, line: str) -> str:
    """A line of a service process's stderr as `up` tells it: its own lines name the service
    already (`poolwise: admission leading ...`); any other is prefixed with it."""
    return line if line.startswith("poolwise: ") else f"poolwise: {service}: {line}"


def ready_line(names: list[str], url: str, data_dir: DataDir) -> str:
    from services.common.connection import shown  # the URLs without passwords (a unit's NATS_URL has them)

    return f"poolwise: {', '.join(names)} ready on {shown(url)} (data dir {data_dir}); Ctrl-C to stop"


def _run(names: list[str], data_dir: DataDir, nats_url: str | None, *, embedded: bool = True,
         ready_on_standby: bool, announce: bool = True, sql_retention: float | None = None,
         yield_when_ready: bool = False, replicas: int = 1, leases: str = "service", http: Http | None = None) -> None:
    from services.common import metrics
    from services.common.runtime import run_until_signalled
    from services.common.tracing import configure
    from services.launcher import run_system

    http = http or Http()
    url = [nats_url]  # an embedded server's is known once it runs (on_ready)

    configure(f"poolwise-{names[0]}" if len(names) == 1 else "poolwise")  # POOLWISE_TRACE=console: spans

    def on_ready(ready_url: str) -> None:
        url[0] = ready_url
        if yield_when_ready:
            yield_cpu()
        if announce:
            typer.echo(ready_line(names, ready_url, data_dir), err=True)

    def on_change(lease: str, state: str, holder: str | None) -> None:
        metrics.set_role(lease.split(".", 1)[-1], state if state in ("leading", "standby") else "lost")
        typer.echo(role_line(lease, state, holder), err=True)

    def on_trees(service: str, held: frozenset[str], holder: str) -> None:
        metrics.set_role(service, "per-tree", len(held))
        typer.echo(trees_line(service, held, holder), err=True)

    def system() -> Awaitable[None]:
        return run_system(names, data_dir, nats_url if not embedded or nats_url else None,
                          on_ready=on_ready, ready_on_standby=ready_on_standby,
                          on_change=on_change, options=service_options(sql_retention),
                          replicas=replicas, leases=leases, on_trees=on_trees)

    def main() -> Awaitable[None]:
        if http.port is None and not metrics.otlp_wanted():
            return system()
        from services.common.process_http import run_observed

        return run_observed(system, names, host=http.host, port=http.port, max_lag=http.ready_lag,
                            url=lambda: url[0], announce=lambda line: typer.echo(line, err=True),
                            extra=http.board(lambda: url[0]))

    try:
        run_until_signalled(main)
    except Exception as exc:
        _fail_on_known(exc)
        raise


def tree_options(sql_retention: float | None) -> dict[str, dict[str, Any]]:
    """The keyword arguments of the services' entry points (`services.launcher.start_services`)."""
    return {} if sql_retention is None else {"tree": {"sql_retention": sql_retention}}


def service_options(sql_retention: float | None) -> dict[str, dict[str, Any]]:
    """`tree_options`, and the tree service's clock on: a live system's commands are stamped with
    the wall clock when it is later than the log's time (`services.tree.service`)."""
    options = tree_options(sql_retention)
    return {**options, "tree": {**options.get("tree", {}), "clock": True}}


def tree_args(sql_retention: float | None) -> dict[str, list[str]]:
    """The arguments of `poolwise serve` for each service's process, beyond the common ones."""
    return {} if sql_retention is None else {"tree": [SQL_RETENTION, repr(sql_retention)]}


def service_args(sql_retention: float | None, leases: str) -> dict[str, list[str]]:
    """`tree_args`, and `--trees` for every service's process (each reads what concerns it)."""
    args = tree_args(sql_retention)
    return {name: [*args.get(name, []), "--trees", leases] for name in SERVICES}


def _run_processes(names: list[str], data_dir: DataDir, nats_url: str | None, *,
                   sql_retention: float | None = None, replicas: int = 1, leases: str = "service",
                   http: Http | None = None) -> None:
    from services.common.exposition import Children
    from services.common.runtime import run_until_signalled
    from services.launcher import run_processes

    http = http or Http()
    children = Children(names)
    running: list[str | None] = [None]  # the NATS URL, once up runs on it

    def on_ready(url: str) -> None:
        running[0] = url
        typer.echo(ready_line(names, url, data_dir), err=True)

    def on_line(service: str, line: str) -> None:
        children.heard(line)  # `poolwise: <service> http on HOST:PORT`: where up's port gathers it from
        if line.strip():
            typer.echo(child_line(service, line), err=True)

    def echo(text: str) -> None:
        typer.echo(f"poolwise: {text}", err=True)

    args = {name: [*more, *http.child_args()] for name, more in service_args(sql_retention, leases).items()}

    def supervise() -> Awaitable[None]:
        return run_processes(names, data_dir, nats_url, on_ready=on_ready, is_up=says_leading, on_line=on_line,
                             echo=echo, args=args, replicas=replicas)

    def main() -> Awaitable[None]:
        if http.port is None:
            return supervise()
        from services.common.process_http import run_gathering

        return run_gathering(supervise, children, host=http.host, port=http.port,
                             announce=lambda line: typer.echo(line, err=True), extra=http.board(lambda: running[0]))

    try:
        run_until_signalled(main)
    except Exception as exc:
        _fail_on_known(exc)
        raise


def _fail_on_known(exc: BaseException) -> None:
    """A service that kept failing to start, or the embedded server gone: `poolwise up` stops with
    one line saying so (exit 1)."""
    from services.common.process_http import HttpPortError
    from services.common.supervisor import GaveUp
    from services.launcher import ServerGone
    from services.tools.cli.errors import fail, leaves

    known = [found for found in leaves(exc) if isinstance(found, GaveUp | ServerGone | HttpPortError)]
    if known:
        raise fail(f"{known[0]}; stopped poolwise up", code=1) from None
