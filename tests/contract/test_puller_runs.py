"""`Puller._on_run` (services/common/jetstream_pull.py): what it buffers from runs of raw stream
messages, whatever the form of their ack subjects: each message once, in order of stream
sequence, as the `Stored` the log's port promises (equal to one made by its constructor), its
message id as `msg_id_of` reads it."""

from __future__ import annotations

from typing import Any

import pytest

from services.common.jetstream_pull import ConsumerLost, Puller
from services.common.log import Stored
from services.common.nats_client import msg_id_of


class Client:
    def __init__(self) -> None:
        self.stats = {"reconnects": 0}


def puller(after: int = 0, cseq: int = 0) -> Puller:
    made = Puller(Client(), "$JS.API", "S", "c", window=100, last_cseq=cseq, after_seq=after)  # type: ignore[arg-type]
    made._sub = object()
    made._current = 1  # (a request open: nothing is asked of the client)
    made._unserved = 10
    return made


def v1(delivered: int, sseq: int, cseq: int, pending: int) -> bytes:
    return f"$JS.ACK.S.c.{delivered}.{sseq}.{cseq}.1700000000.{pending}".encode()


def v2(delivered: int, sseq: int, cseq: int, pending: int) -> bytes:
    return f"$JS.ACK.hub.ACC.S.c.{delivered}.{sseq}.{cseq}.1700000000.{pending}.tok".encode()


HEADERS = [b"NATS/1.0\r\nNats-Msg-Id: a-1\r\n\r\n", b"", b"NATS/1.0\r\nOther: x\r\nNats-Msg-Id:  b 2 \r\n\r\n",
           b"NATS/1.0\r\nNats-Msg-Id:c\r\nOther: y\r\n\r\n"]


def test_a_run_is_buffered_as_stored_messages_whatever_the_ack_subjects_form() -> None:
    p = puller()
    run: list[Any] = [(b"poolwise.t", (v1 if n % 2 else v2)(1, n, n, 4 - n), HEADERS[n - 1], f"d{n}".encode())
                      for n in range(1, 5)]
    assert p._on_run(run) is None  # (a request is open: none is due)
    assert list(p.items) == [Stored(n, "poolwise.t", f"d{n}".encode(), msg_id_of(HEADERS[n - 1])) for n in range(1, 5)]
    assert [s.msg_id for s in p.items] == ["a-1", None, "b 2", "c"]
    assert (p.high, p.pending, p._cseq, p._unserved) == (4, 0, 4, 6)
    assert p._error is None


def test_redeliveries_are_dropped_and_a_late_first_delivery_ends_the_puller() -> None:
    p = puller(after=5, cseq=5)
    p._on_run([(b"s", v1(2, 5, 6, 3), b"", b"again"), (b"s", v1(1, 6, 7, 2), b"", b"six")])
    assert [s.seq for s in p.items] == [6] and p._error is None
    p._on_run([(b"s", v1(1, 4, 8, 1), b"", b"late")])
    assert isinstance(p._error, ConsumerLost) and p._error.behind == 4
    assert [s.seq for s in p.items] == [6]


def test_a_jump_in_consumer_sequence_ends_the_puller_and_what_is_not_an_ack_is_passed_over() -> None:
    p = puller()
    p._on_run([(b"s", b"_INBOX.x.1", b"", b"not a message"), (b"s", v1(1, 1, 1, 1), b"", b"one"),
               (b"s", v1(1, 2, 3, 0), b"", b"two")])
    assert [s.seq for s in p.items] == [1, 2]
    assert isinstance(p._error, ConsumerLost) and "jumped from 1 to 3" in str(p._error)


def test_a_run_received_after_a_reconnect_ends_the_puller() -> None:
    p = puller()
    p._nc.stats["reconnects"] = 1
    p._on_run([(b"s", v1(1, 1, 1, 0), b"", b"one")])
    assert not p.items and isinstance(p._error, ConsumerLost)


@pytest.mark.anyio
async def test_take_hands_out_in_order_with_the_last_ones_ack_subject() -> None:
    p = puller()
    p._on_run([(b"s", v1(1, n, n, 3 - n), b"", b"x") for n in range(1, 4)])
    assert [s.seq for s in await p.take(2)] == [1, 2] and p.reply == v1(1, 2, 2, 1).decode()
    assert [s.seq for s in await p.take(0)] == [3] and p.reply == v1(1, 3, 3, 0).decode()
