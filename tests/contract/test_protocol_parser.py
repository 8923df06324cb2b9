"""`FastParser` (services/common/protocol.py) against nats-py's own `Parser`: the same bytes, cut
into the same random pieces, make the same calls on the client with the same values, whichever
way the pieces fall. If a nats-py release changes what its parser calls, this fails first.

And on a real server: a read of a range asks for no message past its end (a read in pieces took
~60% more messages than it kept before).
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from nats.errors import ProtocolError
from nats.protocol.parser import Parser

from services.common.jetstream import JetStreamLog
from services.common.log import read_in_chunks
from services.common.protocol import FastParser
from tests.contract.test_log_contract import task


class Recorder:
    """The client methods a parser calls, recorded in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    async def _process_msg(self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None) -> None:
        self.calls.append(("msg", sid, bytes(subject), bytes(reply), bytes(data),
                           None if headers is None else bytes(headers)))

    async def _process_err(self, message: str) -> None:
        self.calls.append(("err", message))

    async def _process_ping(self) -> None:
        self.calls.append(("ping",))

    async def _process_pong(self) -> None:
        self.calls.append(("pong",))

    async def _process_info(self, info: dict[str, Any]) -> None:
        self.calls.append(("info", info))


def _hmsg(subject: str, sid: int, reply: str | None, headers: bytes, data: bytes) -> bytes:
    reply_part = f" {reply}" if reply else ""
    return (f"HMSG {subject} {sid}{reply_part} {len(headers)} {len(headers) + len(data)}\r\n".encode()
            + headers + data + b"\r\n")


def _msg(subject: str, sid: int, reply: str | None, data: bytes) -> bytes:
    reply_part = f" {reply}" if reply else ""
    return f"MSG {subject} {sid}{reply_part} {len(data)}\r\n".encode() + data + b"\r\n"


def _traffic(rng: random.Random) -> bytes:
    """What a server sends a client: every operation, payloads holding CRLFs and op names too."""
    parts = [b'INFO {"server_id":"x","max_payload":1048576}\r\n', b"+OK\r\n", b"PING\r\n"]
    for i in range(300):
        choice = rng.randrange(6)
        data = rng.choice([b"", b"x", b"MSG 1 2 3\r\n", b"\r\n\r\n", bytes(rng.randrange(256) for _ in range(200))])
        if choice == 0:
            parts.append(_msg(f"poolwise.t{i}", rng.randrange(1, 9), None, data))
        elif choice == 1:
            parts.append(_msg("_INBOX.a.1", 3, f"$JS.ACK.S.c.1.{i}.{i}.0.{1000 - i}", data))
        elif choice == 2:
            headers = f"NATS/1.0\r\nNats-Msg-Id: id-{i}\r\n\r\n".encode()
            parts.append(_hmsg("poolwise.admission", 7, f"$JS.ACK.S.c.1.{i}.{i}.0.5", headers, data))
        elif choice == 3:
            parts.append(_hmsg("_INBOX.b.2", 9, None, b"NATS/1.0 408 Request Timeout\r\n\r\n", b""))
        elif choice == 4:
            parts.append(rng.choice([b"PING\r\n", b"PONG\r\n", b"+OK\r\n", b"-ERR 'Permissions Violation'\r\n"]))
        else:
            parts.append(b'INFO {"connect_urls":["127.0.0.1:' + str(4000 + i).encode() + b'"]}\r\n')
    return b"".join(parts)


def _pieces(data: bytes, rng: random.Random) -> list[bytes]:
    cuts = sorted(rng.sample(range(1, len(data)), k=min(len(data) - 1, rng.randrange(1, 400))))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]


async def _calls(parser_class: type[Parser], pieces: list[bytes]) -> tuple[list[tuple[Any, ...]], bytes, int]:
    """The calls made, and what the parser holds after the last piece (its unparsed rest, its state)."""
    recorder = Recorder()
    parser = parser_class(recorder)
    for piece in pieces:
        await parser.parse(piece)
    return recorder.calls, bytes(parser.buf), parser.state


@pytest.mark.anyio
@pytest.mark.parametrize("seed", range(20))
async def test_fast_parser_makes_nats_pys_calls_however_the_bytes_are_cut(seed: int) -> None:
    rng = random.Random(seed)
    traffic = _traffic(rng)
    expected = await _calls(Parser, [traffic])
    assert len([c for c in expected[0] if c[0] == "msg"]) > 100
    assert expected[1] == b""
    assert await _calls(FastParser, [traffic]) == expected
    assert await _calls(FastParser, _pieces(traffic, rng)) == expected
    # byte by byte, stopped anywhere: the same calls so far and the same rest held
    stop = rng.randrange(1_000, 3_000)
    one_by_one = [traffic[i:i + 1] for i in range(stop)]
    assert await _calls(FastParser, one_by_one) == await _calls(Parser, one_by_one)


@pytest.mark.anyio
@pytest.mark.parametrize("line", [b"FOO bar\r\n", b"HMSG a 1 x 5\r\n", b"MSG a b 5\r\n"])
async def test_fast_parser_refuses_what_nats_py_refuses(line: bytes) -> None:
    for parser_class in (Parser, FastParser):
        with pytest.raises(ProtocolError):
            await parser_class(Recorder()).parse(line)


@pytest.mark.anyio
async def test_a_reset_while_a_message_is_handled_drops_the_rest() -> None:
    class Resetting(Recorder):
        async def _process_msg(self, *args: Any) -> None:
            await super()._process_msg(*args)
            parser.reset()  # what the client does on a reconnect

    recorder = Resetting()
    parser = FastParser(recorder)
    await parser.parse(_msg("a", 1, None, b"one") + _msg("b", 1, None, b"two") + b"PING\r\n")
    assert recorder.calls == [("msg", 1, b"a", b"", b"one", None)]
    assert not parser.buf
    await parser.parse(b"PONG\r\n")  # the new connection's traffic parses from a clean state
    assert recorder.calls[-1] == ("pong",)


@pytest.mark.anyio
async def test_a_read_in_pieces_takes_no_message_past_each_piece(jetstream_log: JetStreamLog) -> None:
    for start in range(0, 5_000, 1000):
        await jetstream_log.append([task(i) for i in range(start, start + 1000)])
    before = jetstream_log.nc.stats["in_msgs"]
    seqs = [stored.seq async for piece in read_in_chunks(jetstream_log, 1, (), 700) for stored in piece]
    assert seqs == list(range(1, 5_001))
    # the messages of the log plus the API's answers (a consumer made and deleted per piece)
    assert jetstream_log.nc.stats["in_msgs"] - before <= 5_000 + 4 * 8


class RunRecorder(Recorder):
    """A client whose subscription 7 takes its messages in runs (`FastParser.add_run`), recorded
    as the calls `_process_msg` would have had."""

    def __init__(self) -> None:
        super().__init__()
        self._subs = {7: object()}
        self.stats = {"in_msgs": 0, "in_bytes": 0}
        self.runs, self.run_msgs, self.run_bytes = 0, 0, 0

    def on_run(self, run: list[tuple[bytes, bytes, bytes, bytes]]) -> None:
        self.runs += 1
        for subject, reply, headers, data in run:
            self.calls.append(("msg", 7, subject, reply, data, headers))
            self.run_msgs += 1
            self.run_bytes += len(data)


@pytest.mark.anyio
@pytest.mark.parametrize("seed", range(10))
async def test_runs_get_the_messages_nats_py_would_hand_out_in_the_same_order(seed: int) -> None:
    rng = random.Random(seed)
    traffic = _traffic(rng)
    expected, rest, state = await _calls(Parser, [traffic])
    for pieces in ([traffic], _pieces(traffic, rng)):
        recorder = RunRecorder()
        parser = FastParser(recorder)
        parser.add_run(7, recorder.on_run)
        for piece in pieces:
            await parser.parse(piece)
        assert (recorder.calls, bytes(parser.buf), parser.state) == (expected, rest, state)
        assert recorder.runs > 0
        # the runs' messages counted as `_process_msg` counts them (the others are its to count)
        assert recorder.stats == {"in_msgs": recorder.run_msgs, "in_bytes": recorder.run_bytes}


@pytest.mark.anyio
async def test_a_run_ends_at_another_subscriptions_message_and_at_a_cut_one() -> None:
    headers = b"NATS/1.0\r\nNats-Msg-Id: a\r\n\r\n"
    one = _hmsg("s.a", 7, "$JS.ACK.S.c.1.1.1.0.2", headers, b"x")
    two = _hmsg("s.b", 7, "$JS.ACK.S.c.1.2.2.0.1", headers, b"y")
    other = _hmsg("s.c", 8, "$JS.ACK.S.d.1.1.1.0.0", headers, b"z")
    recorder = RunRecorder()
    parser = FastParser(recorder)
    parser.add_run(7, recorder.on_run)
    await parser.parse(one + other + two + two[:-3])
    assert [c[2] for c in recorder.calls] == [b"s.a", b"s.c", b"s.b"]
    assert (recorder.runs, recorder.stats["in_msgs"]) == (2, 2)
    await parser.parse(two[-3:])  # the cut one, whole now: the usual way
    assert [c[2] for c in recorder.calls] == [b"s.a", b"s.c", b"s.b", b"s.b"]
    assert (recorder.runs, recorder.stats["in_msgs"]) == (2, 2)
    parser.remove_run(7)
    await parser.parse(one)
    assert (recorder.runs, len(recorder.calls)) == (2, 5)
