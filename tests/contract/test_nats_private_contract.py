"""The private parts of nats-py that our code overrides, calls or reads, checked against the
installed nats-py: a release that renames one, changes its signature or stops calling it fails
here, naming the version, before the services misbehave. pyproject.toml pins nats-py to the minor
these were checked with (2.16); moving the pin starts with this file.

Where each is used:
- `Client._process_msg(sid, subject, reply, data, headers)`: overridden by `LogClient`
  (services/common/nats_client.py, the direct path) and called by `FastParser`
  (services/common/protocol.py) for every message;
- `Client._process_headers(headers)`: overridden by `LogClient` (plain header blocks, the same
  result as nats-py's, checked below);
- `Client._process_err/_process_ping/_process_pong/_process_info`: called by `FastParser`;
- `Client._ps` (the parser the read loop feeds: `LogClient` puts a `FastParser` there), its
  `reset()`, and `Parser`'s state attributes (`buf`, `state`, `needed`, `header_needed`,
  `msg_arg`) and module constants (`nats.protocol.parser`);
- `Client._subs` (sid -> subscription: the direct path skips an unsubscribed sid) and `stats`;
- `Subscription._id` (the sid a direct handler is filed under: `subscribe_direct`);
- `Client._max_pending_size`, `_pending_data_size` (services/common/jetstream_publish.py, `_one_write`:
  read with a default, atomic batches without them);
- `Client._parse_server_uri` (services/common/connection.py, read with a fallback) and the module
  attribute `nats.aio.client.parse_email` (nats_client.py: whether nats-py parses headers itself).
"""

from __future__ import annotations

import inspect
from typing import Any

import nats.aio.client as nats_client
import nats.protocol.parser as nats_parser
import pytest
from nats.aio.client import Client
from nats.aio.subscription import Subscription

from services.common.nats_client import LogClient, subscribe_direct
from services.common.protocol import FastParser

VERSION = nats_client.__version__
TESTED_MINOR = "2.16"


def _why(what: str) -> str:
    return (f"nats-py {VERSION}: {what} changed; services/common/nats_client.py, protocol.py or "
            f"jetstream_publish.py rely on it (checked with nats-py {TESTED_MINOR}.x, the pin in pyproject.toml)")


def _parameters(function: Any) -> list[str]:
    return list(inspect.signature(function).parameters)


def test_the_installed_nats_py_is_the_pinned_minor() -> None:
    assert VERSION.startswith(TESTED_MINOR + "."), _why("the version")


@pytest.mark.parametrize(("method", "parameters"), [
    ("_process_msg", ["self", "sid", "subject", "reply", "data", "headers"]),
    ("_process_headers", ["self", "headers"]),
    ("_process_err", ["self", "err_msg"]),
    ("_process_ping", ["self"]),
    ("_process_pong", ["self"]),
    ("_process_info", ["self", "info", "initial_connection"]),
])
def test_the_client_methods_we_override_or_call_keep_their_signatures(method: str, parameters: list[str]) -> None:
    found = getattr(Client, method, None)
    assert found is not None, _why(f"Client.{method} (gone)")
    assert inspect.iscoroutinefunction(found), _why(f"Client.{method} (no longer a coroutine)")
    assert _parameters(found) == parameters, _why(f"Client.{method}{inspect.signature(found)}")


def test_the_ones_read_with_a_fallback_are_still_there() -> None:
    parse = getattr(Client, "_parse_server_uri", None)
    assert parse is not None and _parameters(parse) == ["connect_url"], _why("Client._parse_server_uri")
    assert hasattr(nats_client, "parse_email"), _why("nats.aio.client.parse_email")
    client = Client()
    for name, kind in (("_max_pending_size", int), ("_pending_data_size", int), ("_subs", dict), ("stats", dict)):
        assert isinstance(getattr(client, name, None), kind), _why(f"Client().{name}")
    assert {"in_msgs", "in_bytes"} <= set(client.stats), _why("Client.stats")


def test_the_read_loop_feeds_the_parser_in_ps() -> None:
    source = inspect.getsource(Client._read_loop)
    assert "self._ps.parse(" in source, _why("Client._read_loop (no longer feeds self._ps)")
    assert isinstance(LogClient()._ps, FastParser)


def test_the_parser_state_fast_parser_keeps_is_nats_pys() -> None:
    for name in ("AWAITING_CONTROL_LINE", "AWAITING_MSG_PAYLOAD", "ERR_RE", "INFO_RE", "MAX_CONTROL_LINE_SIZE",
                 "OK_RE", "PING_RE", "PONG_RE"):
        assert hasattr(nats_parser, name), _why(f"nats.protocol.parser.{name}")
    parser = nats_parser.Parser(None)
    parser.reset()
    for name in ("buf", "state", "needed", "header_needed", "msg_arg"):
        assert hasattr(parser, name), _why(f"Parser().{name}")
    assert isinstance(parser.buf, bytearray) and parser.state == nats_parser.AWAITING_CONTROL_LINE


def test_a_subscription_keeps_its_sid_in_id() -> None:
    assert "id" in _parameters(Subscription.__init__), _why("Subscription(id=...)")
    assert Subscription(Client(), id=7)._id == 7, _why("Subscription._id")


@pytest.mark.anyio
async def test_the_direct_path_takes_a_subscribed_sid_and_leaves_the_rest_to_nats_py() -> None:
    """A message for a direct sid reaches its handler raw and counts in `stats`; one for a sid
    nats-py does not know is nats-py's (counted, dropped), as before the override."""
    client = LogClient()
    got: list[tuple[bytes, bytes, bytes, bytes]] = []

    async def handler(subject: bytes, reply: bytes, data: bytes, headers: bytes) -> None:
        got.append((subject, reply, data, headers))

    client._subs[5] = Subscription(client, id=5, subject="in.box")
    client.direct(5, handler)
    headers = b"NATS/1.0\r\nNats-Msg-Id: m-1\r\n\r\n"
    frame = f"HMSG in.box 5 reply.to {len(headers)} {len(headers) + 3}\r\n".encode() + headers + b"abc\r\n"
    await client._ps.parse(frame + b"MSG other 9 2\r\nzz\r\n")
    assert got == [(b"in.box", b"reply.to", b"abc", headers)]
    assert (client.stats["in_msgs"], client.stats["in_bytes"]) == (2, 5)


@pytest.mark.parametrize("raw", [
    b"NATS/1.0\r\nNats-Msg-Id: m-1\r\n\r\n",
    b"NATS/1.0\r\nNats-Msg-Id: m-1\r\nTraceparent: 00-ab-cd-01\r\nX-Empty:\r\n\r\n",
    b"NATS/1.0\r\n bad name: skipped\r\nOk: kept \r\n\r\n",
    b"NATS/1.0 408 Request Timeout\r\n\r\n",
    b"",
])
@pytest.mark.anyio
async def test_the_header_override_gives_nats_pys_result(raw: bytes) -> None:
    ours = await LogClient()._process_headers(raw)
    theirs = await Client._process_headers(Client(), raw)
    assert ours == theirs, _why(f"Client._process_headers({raw!r})")


@pytest.mark.anyio
async def test_subscribe_direct_files_the_handler_under_the_subscriptions_sid() -> None:
    class Recording(LogClient):
        async def subscribe(self, subject: str, *args: Any, **kwargs: Any) -> Any:
            return Subscription(self, id=11, subject=subject)

    client = Recording()

    async def handler(subject: bytes, reply: bytes, data: bytes, headers: bytes) -> None:
        return None

    async def fallback(msg: Any) -> None:
        return None

    sub = await subscribe_direct(client, "in.box", handler, fallback)
    assert sub._id == 11 and client._direct == {11: handler}
