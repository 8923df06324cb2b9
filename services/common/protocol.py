"""`FastParser`: nats-py's protocol parser, the same calls on the client, at a fraction of the cost.

nats-py's `Parser.parse` tries a regular expression per operation on the whole buffer for every
message (`MSG` first: a JetStream message, an `HMSG`, fails it before its own matches), copies
each payload twice (a bytearray slice, then `bytes`) and deletes each message from the front of
its buffer. Reading the log that was most of a reader's CPU: 8.7 of 30 profiled seconds for 810k
messages, before its handlers ran (docs/performance.md, "Replay").

This one takes what arrived as one `bytes`, finds each control line with `find`, splits the
`MSG`/`HMSG` line on spaces, slices payloads and headers out of it (one copy each) and keeps only
the unparsed rest. Every other operation (`+OK`, `-ERR`, `PING`, `PONG`, `INFO`) is matched by
nats-py's own expressions and handed to the same client methods. What it calls on the client, in
what order and with which values, is nats-py's (`tests/contract/test_protocol_parser.py` feeds
both the same bytes in random pieces). It keeps nats-py's state attributes (`buf`, `state`,
`needed`, `header_needed`, `msg_arg`) and `reset()`, which the client calls on a reconnect: a
reset while a handler runs (the buffer replaced) ends the parse, as nats-py's loop ends on its
emptied buffer.

Runs (`runs`, keyed by a subscription's id as the server writes it): the stream messages of a
pull consumer's inbox come in long runs, each the same `HMSG <subject> <sid> <reply> <h> <n>`.
For a subscription registered there, each run of its messages whole in what arrived goes to its
handler as one list of (subject, reply, headers, payload), synchronously, with the client's
message counts (`stats`) kept as `_process_msg` keeps them: no coroutine per message and no
second look at the line (a replay's parent read 500k messages; the awaits and lookups of the
per-message path were a third of its reading). The handler may give back an awaitable, awaited
before the parse goes on (a pull request to send). Anything else, and a message cut by the end
of what arrived, takes the usual path (`_process_msg`), in order.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

from nats.errors import ProtocolError
from nats.protocol.parser import (
    AWAITING_CONTROL_LINE,
    AWAITING_MSG_PAYLOAD,
    ERR_RE,
    INFO_RE,
    MAX_CONTROL_LINE_SIZE,
    OK_RE,
    PING_RE,
    PONG_RE,
    Parser,
)

_CRLF = b"\r\n"
_HMSG = b"HMSG "

Raw = tuple[bytes, bytes, bytes, bytes]  # subject, reply, headers, payload
RunHandler = Callable[[list[Raw]], Awaitable[None] | None]


class FastParser(Parser):
    def __init__(self, nc: object = None) -> None:
        super().__init__(nc)
        # sid (as the server writes it) -> (sid, handler): see the module's doc, "Runs"
        self.runs: dict[bytes, tuple[int, RunHandler]] = {}

    def add_run(self, sid: int, handler: RunHandler) -> None:
        self.runs[str(sid).encode()] = (sid, handler)

    def remove_run(self, sid: int) -> None:
        self.runs.pop(str(sid).encode(), None)

    async def parse(self, data: bytes = b"") -> None:
        buf = self.buf
        if buf:
            buf += data
            data = bytes(buf)
        pos, size, nc, runs = 0, len(data), self.nc, self.runs
        try:
            while pos < size:
                if self.state == AWAITING_MSG_PAYLOAD:
                    end = pos + self.needed
                    if end + 2 > size:
                        break  # the rest of the payload is still to come
                    split = self.header_needed
                    headers = data[pos:pos + split] if split else None
                    payload = data[pos + split:end]
                    arg = self.msg_arg
                    pos = end + 2
                    self.state, self.header_needed = AWAITING_CONTROL_LINE, 0
                    await nc._process_msg(arg["sid"], arg["subject"], arg["reply"], payload, headers)
                    if self.buf is not buf:
                        return  # reset while the message was handled (a reconnect): what is left goes
                    continue
                eol = data.find(_CRLF, pos)
                if eol < 0:
                    break  # the rest of the line is still to come
                if data.startswith(b"HMSG", pos) or data.startswith(b"MSG", pos):
                    if runs and data.startswith(_HMSG, pos):
                        parts = data[pos + 5:eol].split(b" ")
                        run = runs.get(parts[1]) if len(parts) == 5 else None
                        if run is not None and run[0] in nc._subs:
                            batch, after, size_of = self._run(data, pos, eol, parts)
                            if batch:
                                pos = after
                                stats = nc.stats
                                stats["in_msgs"] += len(batch)
                                stats["in_bytes"] += size_of
                                later = run[1](batch)
                                if later is not None:
                                    await later
                                    if self.buf is not buf:
                                        return
                                continue
                    self._message_line(data[pos:eol])
                    pos = eol + 2
                    continue
                line = data[pos:eol + 2]
                pos = eol + 2
                await self._control_line(line)
                if self.buf is not buf:
                    return
        finally:
            if self.buf is buf:
                buf[:] = data[pos:]

    @staticmethod
    def _run(data: bytes, pos: int, eol: int, parts: list[bytes]) -> tuple[list[Raw], int, int]:
        """The messages whole in `data` from `pos` (an `HMSG` line with a reply, split: `parts`)
        on, for as long as they are the same subscription's: (subject, reply, headers, payload)
        each, where the next operation begins, and their payloads' bytes. Empty when the first
        is not whole, or its line is not as the server writes it (the usual path takes it)."""
        batch: list[Raw] = []
        append = batch.append
        sid, size, payloads = parts[1], len(data), 0
        while True:
            try:
                split, start = int(parts[3]), eol + 2
                end = start + int(parts[4])
            except ValueError:
                return batch, pos, payloads  # (the usual way refuses it, after what came before)
            if end + 2 > size:
                return batch, pos, payloads  # (this one is cut: it and the rest go the usual way)
            append((parts[0], parts[2], data[start:start + split], data[start + split:end]))
            payloads += end - start - split
            pos = end + 2
            if not data.startswith(_HMSG, pos):
                return batch, pos, payloads
            eol = data.find(_CRLF, pos)
            if eol < 0:
                return batch, pos, payloads
            parts = data[pos + 5:eol].split(b" ")
            if len(parts) != 5 or parts[1] != sid:
                return batch, pos, payloads

    def _message_line(self, line: bytes) -> None:
        """`MSG <subject> <sid> [reply] <size>` or `HMSG <subject> <sid> [reply] <header size> <size>`."""
        parts = line.split()
        headers = parts[0] == b"HMSG"
        fixed = 5 if headers else 4  # tokens besides the reply: op, subject, sid, the sizes
        if parts[0] not in (b"MSG", b"HMSG") or len(parts) not in (fixed, fixed + 1):
            raise ProtocolError("nats: malformed MSG")
        try:
            arg = self.msg_arg
            arg["subject"], arg["sid"] = parts[1], int(parts[2])
            arg["reply"] = parts[3] if len(parts) == fixed + 1 else b""
            self.needed = int(parts[-1])
            self.header_needed = int(parts[-2]) if headers else 0
        except ValueError:
            raise ProtocolError("nats: malformed MSG") from None
        self.state = AWAITING_MSG_PAYLOAD

    async def _control_line(self, line: bytes) -> None:
        nc = self.nc
        if OK_RE.match(line):
            return
        if (err := ERR_RE.match(line)) is not None:
            await nc._process_err(err.groups()[0].decode().lower())
        elif PING_RE.match(line):
            await nc._process_ping()
        elif PONG_RE.match(line):
            await nc._process_pong()
        elif (info := INFO_RE.match(line)) is not None:
            await nc._process_info(json.loads(info.groups()[0].decode()))
        elif len(line) < MAX_CONTROL_LINE_SIZE:
            raise ProtocolError("nats: unknown protocol")
