"""Request/reply for every service: `poolwise.cmd.<service>.<op>`, one queue group per service
(one instance answers each request), and the parsing and error replies they share."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from events import subjects
from events.commands import CommandError, Reply

Answer = Callable[[str, bytes], Reply | Awaitable[Reply]]


def error_reply(rule: str, message: str, field: str | None = None) -> Reply:
    return Reply(ok=False, error=CommandError(rule=rule, message=message, field=field))


def parse_request(models: Mapping[str, type[BaseModel]], op: str, data: bytes | str, service: str) -> BaseModel | Reply:
    """The request model for `op` read from `data`, or the error reply naming the field and rule."""
    model = models.get(op)
    if model is None:
        return error_reply("unknown_op", f"unknown {service} request {op!r}; known: {', '.join(sorted(models))}")
    try:
        return model.model_validate_json(data or b"{}")
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in err["loc"]) or None
        return error_reply("invalid_command", f"{where}: {err['msg']}" if where else str(err["msg"]), where)


async def serve_requests(nc: Any, service: str, answer: Answer) -> Any:
    """Subscribe `answer(op, data)` to the service's request subjects; returns the subscription.
    A failing answer is reported to the asker (`internal`), never a crash of the service."""
    prefix = subjects.command(service, "")

    async def on_request(msg: Any) -> None:
        try:
            reply = answer(msg.subject[len(prefix):], msg.data)
            if inspect.isawaitable(reply):
                reply = await reply
        except Exception as exc:  # the service stays up; the asker gets the reason
            reply = error_reply("internal", f"{exc.__class__.__name__}: {exc}")
        await msg.respond(reply.model_dump_json().encode())

    subscription = await nc.subscribe(subjects.command(service, "*"), queue=service, cb=on_request)
    await nc.flush()
    return subscription
