"""A throwaway CA and certificates signed by it, made at test time with the `openssl` CLI (no
certificate or key is kept in the repository): for the TLS tests of deploy/nats/."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Pki:
    ca: Path
    server: Pair  # for 127.0.0.1 and localhost; serverAuth and clientAuth (routes dial each other)
    client: Pair  # a client's (clientAuth)
    stranger: Pair  # a client's certificate from another CA: verified, refused


def _openssl(*args: str, cwd: Path) -> None:
    done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)}: {done.stderr.strip()}")


def _ca(where: Path, name: str) -> tuple[Path, Path]:
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
             "-subj", f"/CN={name}", "-keyout", f"{name}-key.pem", "-out", f"{name}.pem",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             cwd=where)
    return where / f"{name}.pem", where / f"{name}-key.pem"


def _signed(where: Path, ca: tuple[Path, Path], name: str, extensions: str) -> Pair:
    (where / f"{name}.ext").write_text(extensions)
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-subj", f"/CN={name}",
             "-keyout", f"{name}-key.pem", "-out", f"{name}.csr", cwd=where)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", str(ca[0]), "-CAkey", str(ca[1]), "-CAcreateserial",
             "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.pem", cwd=where)
    return Pair(where / f"{name}.pem", where / f"{name}-key.pem")


def make_pki(where: Path) -> Pki:
    """A CA, a server certificate and a client certificate of it, and a client certificate of
    another CA, in `where` (keys unencrypted, for the test's time only)."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl CLI is needed to make the test's certificates")
    where.mkdir(parents=True, exist_ok=True)
    ca = _ca(where, "ca")
    server = _signed(where, ca, "server", "subjectAltName=DNS:localhost,IP:127.0.0.1\n"
                                          "extendedKeyUsage=serverAuth,clientAuth\n")
    client = _signed(where, ca, "client", "extendedKeyUsage=clientAuth\n")
    stranger = _signed(where, _ca(where, "other-ca"), "stranger", "extendedKeyUsage=clientAuth\n")
    return Pki(ca[0], server, client, stranger)
