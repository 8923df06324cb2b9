"""The CLI's credentials and TLS to NATS: global options (`poolwise --creds team-a.creds submit
...`), each also read from its environment variable. Given on the command line, a setting is put
in the environment, where every connection of this process (`services.common.connection`) and of
the services `poolwise up` starts finds it. A missing or bad file is one line naming the option."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from services.tools.cli.args import InputError

Creds = Annotated[Path | None, typer.Option("--creds", envvar="NATS_CREDS", show_default=False,
                                            help="NATS .creds file (user JWT and nkey seed).")]
Nkey = Annotated[Path | None, typer.Option("--nkey", envvar="NATS_NKEY", show_default=False,
                                           help="File holding a NATS user nkey seed (SU...).")]
TlsCa = Annotated[Path | None, typer.Option("--tls-ca", envvar="NATS_CA", show_default=False,
                                            help="CA certificate(s) to verify the NATS servers by (PEM).")]
TlsCert = Annotated[Path | None, typer.Option("--tls-cert", envvar="NATS_CERT", show_default=False,
                                              help="Client certificate for NATS (PEM), with --tls-key.")]
TlsKey = Annotated[Path | None, typer.Option("--tls-key", envvar="NATS_KEY", show_default=False,
                                             help="Private key of --tls-cert (PEM).")]


def connection(creds: Creds = None, nkey: Nkey = None, tls_ca: TlsCa = None, tls_cert: TlsCert = None,
               tls_key: TlsKey = None) -> None:
    """Event-sourced resource manager for shared compute clusters."""
    given = {"NATS_CREDS": creds, "NATS_NKEY": nkey, "NATS_CA": tls_ca, "NATS_CERT": tls_cert, "NATS_KEY": tls_key}
    if not any(given.values()):
        return
    for name, value in given.items():
        if value is not None:
            os.environ[name] = str(value)
    from services.common.connection import connect_options

    try:
        connect_options()
    except ConnectionError as exc:
        raise InputError(str(exc)) from None


def register(app: typer.Typer) -> None:
    app.callback()(connection)
