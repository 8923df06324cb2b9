"""Request/reply for every service: `poolwise.cmd.<service>.<op>`, one queue group per service
(one instance answers each request), and the parsing and error replies they share."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from contextlib import suppress
from typing import Any

import anyio
from anyio.abc import TaskStatus
from pydantic import BaseModel, ValidationError

from events import subjects
from events.commands import CommandError, Reply

Answer = Callable[[str, bytes], Reply | Awaitable[Reply]]


REPLY_ROOM = 1024  # bytes of a reply's message besides its data: its subject and framing


def _max_payload(nc: Any) -> int | None:
    found = getattr(nc, "max_payload", None)
    return found if isinstance(found, int) and found > 0 else None


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
        data = reply.model_dump_json().encode()
        limit = _max_payload(nc)
        if limit is not None and len(data) > limit - REPLY_ROOM:
            # nats-py would refuse it (MaxPayloadError) and the asker wait out its timeout: say why
            data = error_reply("answer_too_large", f"the answer is {len(data):,} bytes, over the {limit:,} the NATS "
                               "server takes in one message (max_payload); ask for less (e.g. one tree or "
                               "pool at a time)").model_dump_json().encode()
        await msg.respond(data)

    subscription = await nc.subscribe(subjects.command(service, "*"), queue=service, cb=on_request)
    await nc.flush()
    return subscription


async def answer_until_cancelled(nc: Any, service: str, answer: Answer, *,
                                 task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
    """`serve_requests` until cancelled (then unsubscribed); ready once the server knows the
    subscription."""
    subscription = await serve_requests(nc, service, answer)
    try:
        task_status.started()
        await anyio.sleep_forever()
    finally:
        with anyio.CancelScope(shield=True), suppress(Exception):
            await subscription.unsubscribe()
