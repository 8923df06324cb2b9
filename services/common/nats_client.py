"""`LogClient`: nats-py's client with the shortcuts for what the log receives in bulk (its pull
consumers' messages and its PubAcks straight from the parser, `FastParser` for the protocol), and
the raw-header helpers they share. `new_client()` makes one, not yet connected: for connections
that carry a log (services, the submitter SDK, `poolwise replay`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import nats.aio.client as _nats_client
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from services.common.protocol import FastParser

MSG_ID = "Nats-Msg-Id"

_PLAIN_HEADERS = b"NATS/1.0\r\n"  # a header block without an inline status
_NATS_PARSES_EMAIL = getattr(_nats_client, "parse_email", None) is not None  # nats-py's optional parser


def header_lines(raw: bytes) -> dict[str, str]:
    """nats-py's `Client._parseheader_lines`, the same result, without a generator per name."""
    out: dict[str, str] = {}
    for line in raw.split(b"\r\n"):
        if not line:
            continue
        name, sep, value = line.partition(b":")
        if not sep:
            continue
        try:
            key = name.strip().decode("ascii")
        except UnicodeDecodeError:
            continue
        if key and key.split() != [key]:  # whitespace inside the name: skipped, as nats-py does
            continue
        out[key] = value.strip().decode("utf-8", "replace")
    return out


DirectHandler = Callable[[bytes, bytes, bytes, bytes], Awaitable[None]]  # subject, reply, data, raw headers


class LogClient(NATS):
    """nats-py's client, with two shortcuts for the messages the log itself receives in bulk:

    - subscriptions registered with `direct(sid, handler)` (pull consumers' inboxes, the PubAck
      inbox) get each message's raw parts straight from the protocol parser: no `Msg` object, no
      header dictionary, no queue and no hop through the subscription's task (about a fifth of a
      consuming service's time went there); the handler runs in the reading loop, so it only
      files the message away;
    - the plain header block every stream message carries (`Nats-Msg-Id`) is parsed with less
      overhead where nats-py does parse it (anything else is nats-py's own code);
    - the protocol itself is parsed by `FastParser` (services/common/protocol.py): nats-py's calls,
      a fraction of its cost."""

    def __init__(self) -> None:
        super().__init__()
        self._direct: dict[int, DirectHandler] = {}
        self._ps = FastParser(self)

    def direct(self, sid: int, handler: DirectHandler) -> None:
        self._direct[sid] = handler

    def undirect(self, sid: int) -> None:
        self._direct.pop(sid, None)

    async def _process_msg(self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes) -> None:
        handler = self._direct.get(sid)
        if handler is None or sid not in self._subs:  # not direct, or unsubscribed meanwhile
            await super()._process_msg(sid, subject, reply, data, headers)
            return
        stats = self.stats
        stats["in_msgs"] += 1
        stats["in_bytes"] += len(data)
        await handler(subject, reply, data, headers)

    async def _process_headers(self, headers: bytes) -> dict[str, str] | None:
        if headers and not _NATS_PARSES_EMAIL and headers.startswith(_PLAIN_HEADERS):
            return header_lines(headers[len(_PLAIN_HEADERS):]) or None
        found: dict[str, str] | None = await super()._process_headers(headers)
        return found


_MSG_ID_LINE = b"\r\nNats-Msg-Id:"


def msg_id_of(headers: bytes) -> str | None:
    """`Nats-Msg-Id` of a raw header block, as nats-py would parse it."""
    if not headers:
        return None
    at = headers.find(_MSG_ID_LINE)
    if at < 0:
        return header_lines(headers.partition(b"\r\n")[2]).get(MSG_ID) if MSG_ID.encode() in headers else None
    start = at + len(_MSG_ID_LINE)
    end = headers.find(b"\r\n", start)
    return headers[start: end if end >= 0 else len(headers)].strip().decode("utf-8", "replace")


def status_of(headers: bytes) -> tuple[str | None, str]:
    """(status code, description) of a raw header block (`NATS/1.0 408 Request Timeout`)."""
    first = headers.partition(b"\r\n")[0]
    parts = first.split(b" ", 2)
    if len(parts) < 2 or not parts[1]:
        found = header_lines(headers.partition(b"\r\n")[2])
        return found.get("Status"), found.get("Description", "")
    return parts[1].decode("ascii", "replace"), (parts[2].decode("utf-8", "replace") if len(parts) > 2 else "")


async def subscribe_direct(nc: NATS, subject: str, handler: DirectHandler,
                           fallback: Callable[[Msg], Awaitable[None]]) -> Any:
    """Subscribe with `handler` on the direct path when the client has it (a `LogClient`, or a
    wrapper that passes its attributes through, such as a leadership term's connection), else
    `fallback` (a plain nats-py callback)."""
    direct = getattr(nc, "direct", None)
    if callable(direct):
        sub = await nc.subscribe(subject)
        direct(sub._id, handler)
        return sub
    return await nc.subscribe(subject, cb=fallback)


async def unsubscribe_direct(nc: NATS, sub: Any) -> None:
    undirect = getattr(nc, "undirect", None)
    if callable(undirect):
        undirect(sub._id)
    await sub.unsubscribe()




def new_client() -> NATS:
    """A nats-py client with the log's shortcuts (`LogClient`), not yet connected: for connections
    that carry a log (services, the submitter SDK), so that its PubAcks and consumed messages take
    the direct path."""
    return LogClient()
