"""`poolwise gangs` and `poolwise explain GANG`: what the admission service knows of the gangs,
answered from its state (`poolwise.cmd.admission.gangs|explain`).

    poolwise gangs --pool /ATG --state pending,waiting
    poolwise explain g2
    gang g2 (job g2, tree default) is pending in queue pending of pool /ATG, 1 of 2: ...
      - entitlement: needs cpu 8, pool /ATG has 6 of 10 left
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import anyio
import typer
from pydantic import BaseModel

from events.commands import Reply
from services.admission.commands import DEFAULT_LIMIT, SERVICE, ExplainQuery, GangsQuery
from services.admission.domain.model import GANG_STATES, UNKNOWN
from services.tools.cli.args import InputError, parse_list
from services.tools.cli.client import ServiceAbsent, find_url, request
from services.tools.cli.errors import run_async
from services.tools.cli.options import DEFAULT_DATA_DIR, AsJson, DataDir
from services.tools.cli.render import console, gang_table

Opt = typer.Option
REQUEST_TIMEOUT = 10.0
At = Annotated[str | None, Opt("--at", help="As the log had it then: a log position (SEQ) or an event time "
                                            "(ISO 8601); answered from a fold in this process.")]


def register(app: typer.Typer) -> None:
    app.command("gangs")(gangs)
    app.command("explain")(explain)


def gangs(
    pool: Annotated[str | None, Opt("--pool", "-p", help="Only this pool and the pools under it.")] = None,
    state: Annotated[str | None, Opt("--state", "-s", help=f"Only these states, comma-separated: "
                                                           f"{', '.join(GANG_STATES)}.")] = None,
    tree: Annotated[str | None, Opt("--tree", help="Only this pool tree.")] = None,
    limit: Annotated[int, Opt("--limit", min=1, help="At most this many (the most recent).")] = DEFAULT_LIMIT,
    at: At = None,
    as_json: AsJson = False,
    data_dir: DataDir = DEFAULT_DATA_DIR,
) -> None:
    """List gangs: pool, state, queue, tasks, resources, priority, job, attempt (`--at`: as the
    log had them then)."""
    states = parse_list(state)
    if states is not None:
        unknown = [s for s in states if s not in GANG_STATES]
        if unknown or not states:
            raise InputError(f"--state: unknown gang state {unknown[0] if unknown else state!r}; one of: "
                             f"{', '.join(GANG_STATES)}")
    query = GangsQuery(tree=tree, pool=pool, states=states, limit=limit)
    url = find_url(data_dir)

    async def go() -> None:
        show(await ask(url, query))

    def show(reply: Reply) -> None:
        data: dict[str, Any] = reply.data
        if as_json:
            typer.echo(json.dumps(data, indent=2, sort_keys=True))
            return
        console().print(gang_table(data["gangs"], data["total"], data["as_of"]))

    if at is not None:
        from services.tools.cli.state_cmd import answer_at

        show(answer_at(url, at, "gangs", query))
    else:
        run_async(go)


def explain(
    gang: Annotated[str, typer.Argument(help="Gang id.")],
    tree: Annotated[str | None, Opt("--tree", help="Its pool tree (default: the one that has it).")] = None,
    at: At = None,
    as_json: AsJson = False,
    data_dir: DataDir = DEFAULT_DATA_DIR,
) -> None:
    """Why a gang waits, or when it was admitted, or why it ended.

    For a waiting or pending gang: the check it fails and by how much, the gang ahead of it
    (head of line), the pools on its path whose running-job limit is full, its members and
    when it times out. `--at`: as the log had it then."""
    url = find_url(data_dir)

    async def go() -> None:
        show(await ask(url, ExplainQuery(gang=gang, tree=tree)))

    def show(reply: Reply) -> None:
        data: dict[str, Any] = reply.data
        if as_json:
            typer.echo(json.dumps(data, indent=2, sort_keys=True))
        elif data["state"] == UNKNOWN:
            raise InputError(data["summary"])
        else:
            typer.echo(data["text"])

    if at is not None:
        from services.tools.cli.state_cmd import answer_at

        show(answer_at(url, at, "explain", ExplainQuery(gang=gang, tree=tree)))
    else:
        run_async(go)


async def ask(url: str, query: BaseModel, timeout: float = REQUEST_TIMEOUT) -> Reply:
    """One query to the admission service (`client.request`): an error reply raises
    ServiceError; an unreachable server or service, or a subject the server refuses this user,
    an InputError (never a hang: every step is bounded)."""
    return await request(url, SERVICE, query, timeout)


async def first_word(url: str, gang: str, tree: str, wait: float) -> tuple[str, str]:
    """Poll `explain` for at most `wait` seconds until admission has read the gang and, if it
    fits, has run the cycle that admits it: (state, one line). No answerer is asked again until
    then: admission has none for a moment while its lease moves (after a NATS node of a cluster is
    lost, its leader may lose the lease and take it again); ServiceAbsent if none came at all. An
    admission that answered and then went away had not read the gang in time: so it is said."""
    data: dict[str, Any] = {"state": UNKNOWN, "summary": "", "findings": []}
    absent: ServiceAbsent | None = None
    answered = False
    with anyio.move_on_after(wait):
        while True:
            try:
                data = (await ask(url, ExplainQuery(gang=gang, tree=tree))).data
            except ServiceAbsent as exc:
                absent = exc
                await anyio.sleep(0.2)
                continue
            answered, absent = True, None
            checks = [f["check"] for f in data["findings"]]
            if data["state"] != UNKNOWN and checks[:1] != ["fits"]:
                break
            await anyio.sleep(0.2)
    if data["state"] == UNKNOWN:
        if absent is not None and not answered:
            raise absent
        gone = "" if absent is None else " (admission answered, then stopped answering)"
        return UNKNOWN, f"gang {gang}: not read by admission within {wait:g} s{gone}"
    return str(data["state"]), f"gang {gang}: {str(data['state']).replace('_', ' ')}: {data['summary']}"
