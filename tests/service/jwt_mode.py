"""NATS's decentralized (JWT, "operator") mode made at test time: an operator, an account with
JetStream, and users with their permissions in their JWTs, signed with nkeys made now (what `nsc`
does), and the users' `.creds` files. Nothing is kept in the repository."""

from __future__ import annotations

import base64
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nkeys


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


@dataclass(frozen=True)
class Key:
    seed: bytes
    public: str

    @classmethod
    def new(cls, prefix: int) -> Key:
        seed = nkeys.encode_seed(os.urandom(32), prefix)
        return cls(seed, nkeys.from_seed(bytearray(seed)).public_key.decode())

    def sign(self, claims: dict[str, Any]) -> str:
        header = _b64(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode())
        body = _b64(json.dumps({"jti": _b64(os.urandom(16)), "iat": int(time.time()), "iss": self.public,
                                **claims}).encode())
        signature = nkeys.from_seed(bytearray(self.seed)).sign(f"{header}.{body}".encode())
        return f"{header}.{body}.{_b64(signature)}"


UNLIMITED = {"subs": -1, "data": -1, "payload": -1}


@dataclass(frozen=True)
class Operator:
    """An operator, its system account, and one account (`POOLWISE`, JetStream on) of it."""

    operator: Key
    system: Key
    account: Key

    @classmethod
    def new(cls) -> Operator:
        return cls(*(Key.new(prefix) for prefix in (nkeys.PREFIX_BYTE_OPERATOR, nkeys.PREFIX_BYTE_ACCOUNT,
                                                    nkeys.PREFIX_BYTE_ACCOUNT)))

    def server_config(self, where: Path) -> str:
        """The server config's lines for this operator and its account (a memory resolver)."""
        (where / "operator.jwt").write_text(self.operator.sign(
            {"sub": self.operator.public, "name": "poolwise-test",
             "nats": {"system_account": self.system.public, "type": "operator", "version": 2}}))
        system = self.operator.sign({"sub": self.system.public, "name": "SYS",
                                     "nats": {"limits": {**UNLIMITED, "conn": -1}, "type": "account", "version": 2}})
        limits = {**UNLIMITED, "imports": -1, "exports": -1, "wildcards": True, "conn": -1, "leaf": -1,
                  "mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1}
        account = self.operator.sign({"sub": self.account.public, "name": "POOLWISE",
                                      "nats": {"limits": limits, "type": "account", "version": 2}})
        return (f'operator: "{where / "operator.jwt"}"\nsystem_account: {self.system.public}\nresolver: MEMORY\n'
                f'resolver_preload: {{ {self.system.public}: "{system}", {self.account.public}: "{account}" }}\n')

    def creds(self, where: Path, name: str, publish: list[str], subscribe: list[str]) -> Path:
        """A user of the account allowed `publish` and `subscribe`: its `.creds` file."""
        user = Key.new(nkeys.PREFIX_BYTE_USER)
        token = self.account.sign({"sub": user.public, "name": name, "nats": {
            "pub": {"allow": publish}, "sub": {"allow": subscribe}, **UNLIMITED, "type": "user", "version": 2}})
        path = where / f"{name}.creds"
        path.write_text(f"-----BEGIN NATS USER JWT-----\n{token}\n------END NATS USER JWT------\n\n"
                        f"-----BEGIN USER NKEY SEED-----\n{user.seed.decode()}\n------END USER NKEY SEED------\n")
        path.chmod(0o600)
        return path
