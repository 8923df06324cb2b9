"""How the CLI finds and talks to a running poolwise: NATS request/reply to the services."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from nats.aio.client import Client as NATS
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout
from pydantic import BaseModel

from events import subjects
from events.commands import Reply
from services.common.natsserver import resolve_nats_url
from services.tools.cli.args import InputError, ServiceError


def find_url(data_dir: Path) -> str:
    url = resolve_nats_url(data_dir)
    if not url:
        raise InputError(
            f"no running poolwise found: set NATS_URL, or start `poolwise up` (data dir {data_dir})"
        )
    return url


async def _quiet(_: Exception) -> None:
    """nats-py's default error callback prints a traceback per failed attempt: a person sees one line."""


async def connect(url: str, *, name: str = "poolwise-cli", error_cb: Any = _quiet, reading: bool = False) -> Any:
    """A NATS connection for one command to any server of `url` (one URL or several,
    comma-separated): one attempt each (nats-py takes max_reconnect_attempts=0 for "forever"), a
    bounded wait, no traceback; InputError when no server can be reached. `reading`: for a command
    that reads the log in bulk (`poolwise replay`)."""
    from services.common.connection import connect_options, nats_servers, shown

    try:
        servers = nats_servers(url)
        options = connect_options()  # credentials and TLS: the global options, NATS_CREDS, ...
    except ConnectionError as exc:
        raise InputError(str(exc)) from None
    if reading:  # the log's fast paths (services/common/protocol.py): ~half the reader's CPU
        from services.common.nats_client import new_client

        nc = new_client()
    else:
        nc = NATS()
    options.update(reconnect_time_wait=0.2)  # (typed int by nats-py; a float works)
    try:
        await nc.connect(servers, name=name, connect_timeout=3, max_reconnect_attempts=1,
                         allow_reconnect=False, error_cb=error_cb, **options)
        return nc
    except Exception as exc:
        raise InputError(f"cannot reach NATS at {shown(servers)}: {exc.__class__.__name__} {exc}".strip()) from None


class ServiceAbsent(InputError):
    """No instance of the service answered (none subscribed, so nothing was done): safe to ask again."""


# seconds a command asks again while no service answers (none subscribed: nothing was done): the
# interest of a service started a moment ago takes a moment to reach every node of a cluster
NO_RESPONDER_PATIENCE = 2.0
NO_RESPONDER_RETRY = 0.1


async def request(url: str, service: str, command: BaseModel, timeout: float = 10.0) -> Reply:
    """Send one command and return the service's reply; an error reply raises ServiceError."""
    from services.common.connection import shown

    refusals: list[str] = []  # the server refused this user a subject (its permissions): said at once
    refused = asyncio.Event()

    async def on_error(exc: Exception) -> None:
        if "permissions violation" in str(exc).lower():
            refusals.append(" ".join(str(exc).split()))
            refused.set()

    nc = await connect(url, error_cb=on_error)
    subject = subjects.command(service, getattr(command, "op"))  # noqa: B009 - every command model has `op`
    payload = command.model_dump_json().encode()
    patience = asyncio.get_running_loop().time() + NO_RESPONDER_PATIENCE
    try:
        while True:
            asking = asyncio.ensure_future(nc.request(subject, payload, timeout=timeout))
            watching = asyncio.ensure_future(refused.wait())
            try:
                await asyncio.wait({asking, watching}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                watching.cancel()
            if not asking.done():
                asking.cancel()
                raise InputError(f"NATS at {shown(url)} refused this user: {refusals[0]} (not among its permissions)")
            if isinstance(asking.exception(), NoRespondersError) and asyncio.get_running_loop().time() < patience:
                # nobody got it (so asking again changes nothing twice): on a cluster, a service
                # that has just started may not be known to this node yet
                await asyncio.sleep(NO_RESPONDER_RETRY)
                continue
            msg = asking.result()
            break
    except NoRespondersError:
        raise ServiceAbsent(f"the {service} service is not running (no responder on {shown(url)})") from None
    except NatsTimeout:
        raise InputError(f"the {service} service did not answer within {timeout:g} s") from None
    finally:
        await nc.close()
    reply = Reply.model_validate_json(msg.data)
    if not reply.ok and reply.error is not None:
        raise ServiceError(reply.error.rule, reply.error.message, reply.error.field)
    return reply


def data_of(reply: Reply) -> Any:
    return reply.data
