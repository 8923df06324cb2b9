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
"""

from __future__ import annotations

import json

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


class FastParser(Parser):
    async def parse(self, data: bytes = b"") -> None:
        buf = self.buf
        if buf:
            buf += data
            data = bytes(buf)
        pos, size, nc = 0, len(data), self.nc
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
