"""Credentials and TLS options (`services.common.connection`): read from the environment or
given, checked before anything is sent, a bad one a one-line error naming the option."""

from __future__ import annotations

import os
import ssl
from pathlib import Path

import nkeys
import pytest

from services.common.connection import Auth, Tls, connect_options
from services.sdk.client import Submitter


def seed_file(where: Path) -> Path:
    path = where / "user.nk"
    path.write_bytes(b"# a user nkey\n" + nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER) + b"\n")
    return path


def test_nothing_given_is_no_options() -> None:
    assert connect_options(Auth()) == {}


def test_an_nkey_seed_file_gives_its_seed(tmp_path: Path) -> None:
    options = connect_options(Auth(nkey=str(seed_file(tmp_path))))
    assert options["nkeys_seed_str"].startswith("SU")


def test_the_environment_is_read_and_given_settings_win(tmp_path: Path) -> None:
    env = {"NATS_CREDS": "/from/env.creds", "NATS_CA": "/env/ca.pem", "NATS_CERT": " ", "NATS_KEY": "/env/key.pem"}
    assert Auth.from_env(env) == Auth(creds="/from/env.creds", tls=Tls(ca="/env/ca.pem", key="/env/key.pem"))
    given = Auth(creds="/given.creds", tls=Tls(cert="/given/cert.pem"))
    assert given.over(Auth.from_env(env)) == Auth(creds="/given.creds",
                                                  tls=Tls(ca="/env/ca.pem", cert="/given/cert.pem", key="/env/key.pem"))
    assert Auth.from_env({}) == Auth()


def test_a_context_of_ones_own_is_used_as_it_is() -> None:
    context = ssl.create_default_context()
    assert connect_options(Auth(tls=context)) == {"tls": context}


def bad(tmp_path: Path) -> list[tuple[Auth, str]]:
    text = tmp_path / "text.txt"
    text.write_text("hello\n")
    return [
        (Auth(creds=str(tmp_path / "missing.creds")), "--creds (NATS_CREDS): no such file"),
        (Auth(creds=str(text)), "--creds (NATS_CREDS): " + repr(str(text)) + " is not a .creds file"),
        (Auth(nkey=str(tmp_path / "missing.nk")), "--nkey (NATS_NKEY): no such file"),
        (Auth(nkey=str(text)), "holds no user nkey seed"),
        (Auth(nkey=str(tmp_path)), "--nkey (NATS_NKEY): no such file"),  # a directory
        (Auth(creds=str(text), nkey=str(text)), "give --creds (NATS_CREDS) or --nkey (NATS_NKEY), not both"),
        (Auth(tls=Tls(ca=str(tmp_path / "missing.pem"))), "--tls-ca (NATS_CA): no such file"),
        (Auth(tls=Tls(ca=str(text))), "--tls-ca (NATS_CA): " + repr(str(text)) + " holds no CA certificate"),
        (Auth(tls=Tls(key=str(text))), "--tls-key (NATS_KEY) given without --tls-cert (NATS_CERT)"),
        (Auth(tls=Tls(cert=str(tmp_path / "missing.pem"))), "--tls-cert (NATS_CERT): no such file"),
        (Auth(tls=Tls(cert=str(text), key=str(text))), "are not a certificate and its private key"),
    ]


def test_a_bad_setting_is_one_line_naming_the_option(tmp_path: Path) -> None:
    for auth, message in bad(tmp_path):
        with pytest.raises(ConnectionError) as caught:
            connect_options(auth)
        assert message in str(caught.value), (auth, str(caught.value))
        assert "\n" not in str(caught.value)


def test_a_bad_nkey_seed_is_named(tmp_path: Path) -> None:
    path = tmp_path / "bad.nk"
    path.write_text("SUAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\n")
    with pytest.raises(ConnectionError, match=r"--nkey \(NATS_NKEY\): .* holds no valid seed"):
        connect_options(Auth(nkey=str(path)))


def test_the_sdk_refuses_a_bad_file_at_once(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no such file"):
        Submitter("nats://127.0.0.1:4222", creds=str(tmp_path / "missing.creds"))
    with pytest.raises(ValueError, match="holds no CA certificate"):
        Submitter("nats://127.0.0.1:4222", tls=Tls(ca=__file__))
    Submitter("nats://127.0.0.1:4222", nkey=str(seed_file(tmp_path)))  # a good one: nothing is sent yet
