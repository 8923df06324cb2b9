"""A NATS connection that gives up on an unreachable server (nats-py, asked to reconnect forever,
also retries the first connect forever; asked not to, it loops in its server selection), and
that then reconnects forever, quietly (nats-py logs each failed attempt with a traceback).

The services' logs (`JetStreamLog.connect`), the submitter SDK and the CLI connect this way: an
operator who gives `poolwise up` or `poolwise serve` a wrong `--nats-url` gets one line naming
it, not a traceback a second forever.

A URL may be one server or several, comma-separated (`nats://n1:4222,nats://n2:4222`, as the
systemd units give `NATS_URL`), or a list: the connection is made to any of them, and a lost one
is re-established to any of them (`nats_servers`). Messages show the URLs without passwords.

Who the client is and how it talks (`Auth`): a user and password in the URL
(`nats://user:pw@host:4222`), a `.creds` file (a user JWT and its nkey seed: `--creds`,
`NATS_CREDS`), an nkey seed file (`--nkey`, `NATS_NKEY`); TLS with a CA to verify the servers by
and, for servers that verify clients, a certificate and its key (`--tls-ca`, `--tls-cert`,
`--tls-key`; `NATS_CA`, `NATS_CERT`, `NATS_KEY`, the names the `nats` CLI reads). A `tls://` URL
asks for TLS (with the system's CAs unless a CA is given); a server that requires TLS gets it
either way. `connect_options` is the one place that turns them into nats-py's connect options;
every connection (`connect_nats`, the CLI's, a lease's) takes them from there, from the
environment unless given. A missing file or a bad one is a `ConnectionError` of one line naming
the option, before anything is sent."""

from __future__ import annotations

import base64
import logging
import os
import ssl
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, fields
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anyio
from nats.aio.client import Client as NATS
from nats.errors import Error as NatsError

from services.common.nats_client import new_client

log = logging.getLogger("poolwise.nats")

CONNECT_TIMEOUT = 5.0  # seconds to reach the server at first


async def quietly(exc: Exception) -> None:
    """A connection's error callback: a lost or refused connection is retried, not worth a
    traceback on the console (nats-py's default prints one for every failed reconnect)."""
    log.debug("nats: %s: %s", exc.__class__.__name__, exc)


_quietly = quietly

Urls = str | Sequence[str]  # one URL, several comma-separated, or a list of either
ErrorCallback = Callable[[Exception], Awaitable[None]]


def nats_servers(urls: Urls) -> list[str]:
    """The server URLs of `urls` (one URL, a comma-separated list, or a list of either), in order,
    each checked as nats-py reads it; `ConnectionError` naming one that is empty or malformed."""
    given = [urls] if isinstance(urls, str) else list(urls)
    servers = [part.strip() for item in given for part in str(item).split(",")]
    if not any(servers):
        raise ConnectionError(f"no NATS server URL in {shown(urls)!r}: give a URL such as nats://127.0.0.1:4222, "
                              f"or several separated by commas")
    if not all(servers):
        raise ConnectionError(f"an empty NATS server URL in {shown(urls)!r} (two commas in a row, or one at an end)")
    parse = getattr(NATS, "_parse_server_uri", None)  # nats-py's own reading of one URL (2.10+)
    for server in servers:
        try:
            if parse is not None:
                parse(server)
        except (NatsError, ValueError) as exc:
            raise ConnectionError(f"NATS URL {shown(server)!r} is not valid: {exc}") from None
    return servers


def shown(urls: Urls) -> str:
    """`urls` as a message shows them: comma-separated, passwords replaced by `***`."""
    given = [urls] if isinstance(urls, str) else list(urls)
    return ",".join(_without_password(part.strip()) for item in given for part in str(item).split(","))


def _without_password(url: str) -> str:
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        user = parts.username or ""
        host = parts.netloc.rpartition("@")[2]
        return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))
    except ValueError:
        return url


@dataclass(frozen=True, slots=True)
class Tls:
    """TLS to the NATS servers: `ca`, a PEM file of the CA(s) to verify the servers by (the
    system's when not given); `cert` and `key`, a client certificate and its private key (PEM),
    for servers that verify clients (`verify: true`). The key may be in the certificate's file."""

    ca: str | None = None
    cert: str | None = None
    key: str | None = None


@dataclass(frozen=True, slots=True)
class Auth:
    """How a client proves who it is and protects the connection, besides a user and password in
    the URL: `creds`, a `.creds` file (user JWT and seed, for servers in operator/JWT mode);
    `nkey`, a file holding a user nkey seed (`SU...`), for servers that list the user's public
    nkey; `tls`, a `Tls` (or an `ssl.SSLContext` of your own). `Auth.from_env()` reads them from
    `NATS_CREDS`, `NATS_NKEY`, `NATS_CA`, `NATS_CERT` and `NATS_KEY`."""

    creds: str | None = None
    nkey: str | None = None
    tls: Tls | ssl.SSLContext | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Auth:
        env = os.environ if env is None else env

        def get(name: str) -> str | None:
            return (env.get(name) or "").strip() or None

        ca, cert, key = get(ENV["tls_ca"]), get(ENV["tls_cert"]), get(ENV["tls_key"])
        tls = Tls(ca, cert, key) if (ca or cert or key) else None
        return cls(creds=get(ENV["creds"]), nkey=get(ENV["nkey"]), tls=tls)

    def over(self, base: Auth) -> Auth:
        """These settings, and `base`'s where these give none (TLS fields one by one)."""
        tls = self.tls
        if isinstance(tls, Tls) and isinstance(base.tls, Tls):
            tls = Tls(**{f.name: getattr(tls, f.name) or getattr(base.tls, f.name) for f in fields(Tls)})
        return Auth(creds=self.creds or base.creds, nkey=self.nkey or base.nkey,
                    tls=tls if tls is not None else base.tls)


# the environment variable and command-line option of each setting (as messages name them)
ENV = {"creds": "NATS_CREDS", "nkey": "NATS_NKEY", "tls_ca": "NATS_CA", "tls_cert": "NATS_CERT",
       "tls_key": "NATS_KEY"}
OPTION = {"creds": "--creds", "nkey": "--nkey", "tls_ca": "--tls-ca", "tls_cert": "--tls-cert",
          "tls_key": "--tls-key"}


def _named(setting: str) -> str:
    return f"{OPTION[setting]} ({ENV[setting]})"


def _readable(setting: str, path: str) -> str:
    if not os.path.isfile(path):
        raise ConnectionError(f"{_named(setting)}: no such file {path!r}")
    try:
        with open(path, "rb"):
            return path
    except OSError as exc:
        raise ConnectionError(f"{_named(setting)}: cannot read {path!r}: {exc.strerror or exc}") from None


def _nkey_seed(path: str) -> str:
    """The user nkey seed in `path` (the file may hold comments or the public key too)."""
    with open(_readable("nkey", path), encoding="utf-8", errors="replace") as f:
        seeds = [line.strip() for line in f if line.strip().startswith("SU")]
    if len(seeds) != 1:
        raise ConnectionError(f"{_named('nkey')}: {path!r} holds no user nkey seed (a line SU...)"
                              if not seeds else f"{_named('nkey')}: {path!r} holds {len(seeds)} seeds, give one")
    try:
        import nkeys
    except ImportError:
        raise ConnectionError(f"{_named('nkey')} needs the nkeys package (pip install nkeys)") from None
    try:
        raw = base64.b32decode(seeds[0] + "=" * (-len(seeds[0]) % 8))
        if bytes(nkeys.crc16_checksum(raw[:-2])) != raw[-2:]:  # (nkeys does not check it: a typo signs as another key)
            raise ValueError("checksum")
        nkeys.from_seed(bytearray(seeds[0].encode())).wipe()
    except Exception as exc:
        raise ConnectionError(f"{_named('nkey')}: {path!r} holds no valid seed ({exc.__class__.__name__})") from None
    return seeds[0]


def _creds(path: str) -> str:
    with open(_readable("creds", path), encoding="utf-8", errors="replace") as f:
        text = f.read()
    if "BEGIN NATS USER JWT" not in text or "BEGIN USER NKEY SEED" not in text:
        raise ConnectionError(f"{_named('creds')}: {path!r} is not a .creds file (a user JWT and its nkey seed)")
    try:
        import nkeys  # noqa: F401 - nats-py signs with it
    except ImportError:
        raise ConnectionError(f"{_named('creds')} needs the nkeys package (pip install nkeys)") from None
    return path


def ssl_context(tls: Tls) -> ssl.SSLContext:
    """A client's TLS context: servers verified by `tls.ca` (else the system's CAs), and the
    client's certificate when given; `ConnectionError` naming the option whose file is bad."""
    if tls.key and not tls.cert:
        raise ConnectionError(f"{_named('tls_key')} given without {_named('tls_cert')}")
    try:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH,
                                             cafile=_readable("tls_ca", tls.ca) if tls.ca else None)
    except ssl.SSLError as exc:
        raise ConnectionError(f"{_named('tls_ca')}: {tls.ca!r} holds no CA certificate ({exc.reason or exc})") from None
    if tls.cert:
        cert = _readable("tls_cert", tls.cert)
        key = _readable("tls_key", tls.key) if tls.key else None
        try:
            context.load_cert_chain(cert, key)
        except ssl.SSLError as exc:
            which = "tls_key" if tls.key else "tls_cert"
            raise ConnectionError(f"{_named('tls_cert')} and {_named(which)}: {tls.cert!r} and {tls.key or tls.cert!r} "
                                  f"are not a certificate and its private key ({exc.reason or exc})") from None
    return context


def connect_options(auth: Auth | None = None) -> dict[str, Any]:
    """nats-py's connect options for `auth` (the environment's when None): credentials and TLS.
    A user and password stay in the URL."""
    auth = Auth.from_env() if auth is None else auth
    options: dict[str, Any] = {}
    if auth.creds and auth.nkey:
        raise ConnectionError(f"give {_named('creds')} or {_named('nkey')}, not both")
    if auth.creds:
        options["user_credentials"] = _creds(auth.creds)
    if auth.nkey:
        options["nkeys_seed_str"] = _nkey_seed(auth.nkey)
    if isinstance(auth.tls, ssl.SSLContext):
        options["tls"] = auth.tls
    elif auth.tls is not None:
        options["tls"] = ssl_context(auth.tls)
    return options


async def connect_nats(url: Urls, *, name: str = "poolwise", timeout: float = CONNECT_TIMEOUT,
                       auth: Auth | None = None, on_error: ErrorCallback | None = None) -> NATS:
    """Connect to any server of `url` (one URL, comma-separated URLs, or a list) within `timeout`
    seconds, else `ConnectionError` naming them. Once connected, a lost connection is
    re-established, to any of them, for as long as it takes. `auth`: credentials and TLS (the
    environment's when None: `Auth.from_env`). `on_error` hears the connection's errors too (the
    server's permissions violations come only this way)."""
    servers = nats_servers(url)
    options = connect_options(auth)
    nc = new_client()  # the log's fast paths (PubAcks straight from the parser)

    async def errors(exc: Exception) -> None:
        await _quietly(exc)
        if on_error is not None:
            await on_error(exc)

    try:
        with anyio.fail_after(timeout):
            await nc.connect(servers, name=name, connect_timeout=max(1, int(min(timeout, 2.0))),
                             max_reconnect_attempts=-1, reconnect_time_wait=1, error_cb=errors, **options)
    except TimeoutError:
        await _abandon(nc)
        raise ConnectionError(f"cannot reach NATS at {shown(servers)} within {timeout:g} s") from None
    except Exception as exc:  # refused authorization, ...
        await _abandon(nc)
        why = f"{exc.__class__.__name__} {exc}".strip()
        raise ConnectionError(f"cannot reach NATS at {shown(servers)}: {why}") from None
    except BaseException:  # cancelled (a caller's deadline): the client must not go on trying in the background
        await _abandon(nc)
        raise
    return nc


async def _abandon(nc: NATS) -> None:
    with anyio.CancelScope(shield=True), suppress(Exception):
        await nc.close()
